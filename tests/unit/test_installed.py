"""What ./bootstrap says when it points this machine's chtop install at another clone."""

import json
from pathlib import Path

from chtop_tasks.cli import installed


def fake_install(site_dir: Path, clone: Path) -> None:
    """An editable chtop install's metadata, as pip writes it (PEP 610's direct_url.json)."""
    info = site_dir / "chtop-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chtop\nVersion: 0.1.0\n")
    (info / "direct_url.json").write_text(json.dumps({"dir_info": {"editable": True}, "url": clone.as_uri()}))


def test_the_installed_clone_is_read_from_the_install_and_a_move_is_said_with_the_way_back(tmp_path):
    first, second, site_dir = tmp_path / "ch" / "top", tmp_path / "ch2" / "top", tmp_path / "site"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    assert installed.installed_clone([str(site_dir)]) is None
    fake_install(site_dir, first)
    assert installed.installed_clone([str(site_dir)]) == first
    assert installed.move_notice(None, second) == ""                      # a first install says nothing
    assert installed.move_notice(first, first) == ""                      # nor one from the same clone
    notice = installed.move_notice(first, second)
    assert f"now runs {second}; it ran {first}." in notice and f"cd {first} && ./bootstrap" in notice
    first.rmdir()
    assert f"it ran {first} (no longer there)" in installed.move_notice(first, second)

