"""chtop_tasks.workspace.packread: an object read from a store's packs as data is git's, whole or
as either kind of delta; anything odd (a garbled or short pack, a delta chain too long, a pack
that is a link) is None, never an exception."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import git
from real_repos import bare_remotes_from_bundles

from chtop_tasks.workspace import packread
from chtop_tasks.workspace.packread import read_object, read_packed


def gits_objects(store: Path) -> dict[str, tuple[bytes, bytes]]:
    """Every object of ``store`` as (type, content), from ``git cat-file --batch``."""
    names = subprocess.run(["git", "--git-dir", str(store), "cat-file", "--batch-all-objects",
                            "--batch-check=%(objectname)"], capture_output=True, text=True, check=True).stdout.split()
    out = subprocess.run(["git", "--git-dir", str(store), "cat-file", "--batch"], input="\n".join(names).encode() + b"\n",
                         capture_output=True, check=True).stdout
    objects, at = {}, 0
    while at < len(out):
        header_end = out.index(b"\n", at)
        sha, kind, size = out[at:header_end].split()
        start = header_end + 1
        objects[sha.decode()] = (kind, out[start:start + int(size)])
        at = start + int(size) + 1
    return objects


def repo_with_history(path: Path, revisions: int = 30) -> Path:
    """A repo whose files change a little per commit (so a repack stores most as deltas), with a
    file over 64 KiB (a delta's copy of 0x10000 bytes has no size bytes) and a nested tree."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "d" / "e").mkdir(parents=True)
    big = "".join(f"line {n} of a file long enough for big copies\n" for n in range(3000))
    for rev in range(revisions):
        (path / "notes.txt").write_text("".join(f"note {n}\n" for n in range(200 + rev)))
        (path / "big.txt").write_text(big.replace("line 1500 ", f"line 1500 rev {rev} "))
        (path / "d" / "e" / f"f{rev % 5}.txt").write_text(f"rev {rev}\n" * 50)
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"rev {rev}")
    return path


def repack(repo: Path, *extra: str) -> None:
    subprocess.run(["git", *extra, "repack", "-adfq", "--depth=50", "--window=50"], cwd=repo, check=True)
    subprocess.run(["git", "prune-packed"], cwd=repo, check=True)


@pytest.mark.parametrize("offsets", [True, False], ids=["offset-deltas", "ref-deltas"])
def test_every_packed_object_reads_as_git_reads_it(tmp_path, offsets):
    repo = repo_with_history(tmp_path / "r")
    repack(repo, "-c", f"repack.useDeltaBaseOffset={'true' if offsets else 'false'}")
    store = repo / ".git"
    assert not any((store / "objects").glob("[0-9a-f][0-9a-f]/*")), "every object is packed"
    verify = subprocess.run(["git", "verify-pack", "-v", *map(str, (store / "objects" / "pack").glob("*.idx"))],
                            capture_output=True, text=True, check=True).stdout
    assert "chain length = " in verify, "the pack holds deltas"
    objects = gits_objects(store)
    assert len(objects) > 100
    for sha, expected in objects.items():
        assert read_packed(store, sha) == expected, sha
    assert read_packed(store, "0" * 40) is None
    assert read_packed(store, "not a sha") is None


def test_the_real_repos_trees_and_commits_read_as_gits(tmp_path):
    """ksgpu's bundle as git cloned it: its commits and trees (what merge-up's diff reads)."""
    bare = bare_remotes_from_bundles(tmp_path / "remotes")["ksgpu"]
    objects = {sha: obj for sha, obj in gits_objects(bare).items() if obj[0] in (b"commit", b"tree")}
    assert len(objects) > 500
    assert all(read_object(bare, sha) == obj for sha, obj in objects.items())


def only_pack(store: Path) -> Path:
    (pack,) = (store / "objects" / "pack").glob("*.pack")
    return pack


def test_a_garbled_or_short_pack_reads_as_nothing(tmp_path):
    repo = repo_with_history(tmp_path / "r", revisions=8)
    repack(repo)
    store = repo / ".git"
    objects = gits_objects(store)
    pack = only_pack(store)
    data = bytearray(pack.read_bytes())
    pack.chmod(0o644)
    pack.write_bytes(bytes(data[:len(data) // 2]))          # cut short: half the offsets point past its end
    found = {sha: read_packed(store, sha) for sha in objects}
    assert None in found.values()
    assert all(got is None or got == objects[sha] for sha, got in found.items())
    for at in range(12, len(data) - 20, max(1, len(data) // 97)):
        data[at] ^= 0xFF                                   # one byte flipped here and there
    pack.write_bytes(bytes(data))
    found = {sha: read_packed(store, sha) for sha in objects}
    assert all(got is None or got == objects[sha] for sha, got in found.items())
    assert None in found.values()


def test_a_chain_of_deltas_longer_than_the_limit_reads_as_nothing(tmp_path):
    repo = repo_with_history(tmp_path / "r")
    repack(repo)
    store = repo / ".git"
    objects = gits_objects(store)
    verify = subprocess.run(["git", "verify-pack", "-v", str(only_pack(store).with_suffix(".idx"))],
                            capture_output=True, text=True, check=True).stdout
    deep = [line.split()[0] for line in verify.splitlines() if len(line.split()) >= 7 and line.split()[5].isdigit()
            and int(line.split()[5]) >= 3]           # sha type size size-in-pack offset depth base
    assert deep, verify
    assert all(read_packed(store, sha, chain_left=2) is None for sha in deep)
    assert packread.MAX_CHAIN >= 50                  # git's default depth
    assert all(read_packed(store, sha) == objects[sha] for sha in deep)


def test_a_pack_or_index_that_is_a_link_reads_as_nothing(tmp_path):
    repo = repo_with_history(tmp_path / "r", revisions=3)
    repack(repo)
    store = repo / ".git"
    sha = git(repo, "rev-parse", "HEAD")
    assert read_packed(store, sha) is not None
    pack = only_pack(store)
    elsewhere = tmp_path / "elsewhere.pack"
    os.rename(pack, elsewhere)
    os.symlink(elsewhere, pack)
    assert read_packed(store, sha) is None


def test_a_deflated_entry_longer_or_shorter_than_its_header_says_reads_as_nothing(tmp_path):
    """An entry inflates to exactly the size its header gives, or it is not read (a stream that
    would inflate further is not inflated past that size)."""
    import zlib

    data = b"all work and no play " * 5000
    path = tmp_path / "entry"
    path.write_bytes(b"\0" * 7 + zlib.compress(data, 9) + b"trailing pack bytes")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert packread.inflated(fd, 7, len(data)) == data
        assert packread.inflated(fd, 7, len(data) - 1) is None
        assert packread.inflated(fd, 7, 10) is None
        assert packread.inflated(fd, 7, len(data) + 1) is None
    finally:
        os.close(fd)
