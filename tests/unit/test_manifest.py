"""Manifest parsing and validation: each broken entry is a clear error naming file and entry."""

from pathlib import Path

import pytest

from chtop_tasks.core.errors import ManifestError
from chtop_tasks.workspace.manifest import load_manifest, parse_manifest

GOOD = """
[[repo]]
name = "a"
url = "file:///r/a.git"
branch = "main"

[[repo]]
name = "b"
url = "file:///r/b.git"
branch = "kms"
install = "editable-no-build-isolation"
smoke_import = ["b", "b.sub"]
test = "python -m b.selftest"
"""


def test_this_checkouts_manifest_is_valid():
    """Whatever repos it lists: README tells users to put their own repos in it."""
    manifest = load_manifest(Path(__file__).parents[2] / "git_repositories.toml")
    assert manifest.repos and len(set(manifest.names)) == len(manifest.names)


def test_readme_manifest_example_parses():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    example = readme.split("## The manifest", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    manifest = parse_manifest(Path("README.md"), example)
    repo = manifest.get("ksgpu")
    assert (repo.branch, repo.install, repo.smoke_import) == ("kms", "editable-no-build-isolation", ("ksgpu",))


def test_defaults_give_a_plain_editable_install():
    manifest = parse_manifest(Path("m.toml"), GOOD)
    a, b = manifest.repos
    assert a.install == "editable" and a.smoke_import == () and a.test is None
    assert b.install == "editable-no-build-isolation" and b.smoke_import == ("b", "b.sub")


@pytest.mark.parametrize("entry, message", [
    ('name = "a"\nbranch = "main"', "missing 'url'"),
    ('name = "a"\nurl = "u"', "missing 'branch'"),
    ('name = "a"\nurl = "u"\nbranch = "main"\ncolour = "red"', "unknown key(s) colour"),
    ('name = ".."\nurl = "u"\nbranch = "main"', "must not be"),
    ('name = "../evil"\nurl = "u"\nbranch = "main"', "must not contain '/'"),
    ('name = "a/b"\nurl = "u"\nbranch = "main"', "must not contain '/'"),
    ('name = "-rf"\nurl = "u"\nbranch = "main"', "must not start with '-'"),
    ('name = ".hidden"\nurl = "u"\nbranch = "main"', "must not start with '.'"),
    ('name = "a"\nurl = "u"\nbranch = "main"\ninstall = "magic"', "'install' must be one of"),
    ('name = "tasks.py"\nurl = "u"\nbranch = "main"', "reserved"),
])
def test_bad_entries_name_file_and_entry(entry, message):
    with pytest.raises(ManifestError) as err:
        parse_manifest(Path("/x/git_repositories.toml"), "[[repo]]\n" + entry + "\n",
                       reserved=("tasks.py",))
    text = str(err.value)
    assert "/x/git_repositories.toml" in text and "repo #1" in text and message in text


def test_duplicates_are_refused():
    text = GOOD + '\n[[repo]]\nname = "a"\nurl = "u"\nbranch = "main"\n'
    with pytest.raises(ManifestError, match=r"repo #3 \('a'\): duplicate repo name"):
        parse_manifest(Path("m.toml"), text)


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(ManifestError, match="not valid TOML"):
        parse_manifest(Path("m.toml"), "[[repo]\n")
    with pytest.raises(ManifestError, match="manifest not found"):
        load_manifest(tmp_path / "git_repositories.toml")
