"""Git quarantine: each feature worktree has private git state, and only the host
imports its branch into the shared stores.

The first tests run host-side on real repos (the layout, the import, the
conversion of old worktrees, the proxy daemon's timer).  The podman tests run
every attack from inside a real sandbox -- rootless as the test user, and
rootful as root -- and then check the host's refs, reflogs and ``git fsck``.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shlex
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from conftest import eventually, git
from sandbox_helpers import as_owner_python, as_user, rootful_podman_env, user_group_cm

from chtop_tasks.core import runner
from chtop_tasks.core.errors import CommandFailed
from chtop_tasks.stores import quarantine
from chtop_tasks.workspace.layout import find_workspace, private_store, read_gitdir_file, verify_git_dirs

# -- the layout ------------------------------------------------------------------------------------


def test_create_puts_each_checkout_on_private_git_state(with_dev):
    g = with_dev
    dev = g.path("dev")
    for repo, integration in (("", "main"), ("alpha", "main"), ("beta", "kms")):
        shared = g.toplevel / repo / ".git"
        store = private_store(g.grouping, "dev", repo)
        admin = read_gitdir_file(dev / repo / ".git")
        assert admin.parent == store / "worktrees"
        assert (admin / "commondir").read_text().strip() == "../.."
        assert (store / "objects" / "info" / "alternates").read_text().strip() == str(shared / "objects")
        assert not (shared / "worktrees").exists() or not any((shared / "worktrees").iterdir())
        # the branch is in the shared store too, and the integration branch is there inside
        assert git(shared.parent, "rev-parse", "dev") == git(dev / repo, "rev-parse", "HEAD")
        assert git(dev / repo, "rev-parse", integration) == git(shared.parent, "rev-parse", integration)
        assert git(dev / repo, "rev-parse", "--git-common-dir") == str(store)
    assert git(dev, "status", "--porcelain") == ""           # excludes copied: sub-repos are not untracked
    verify_git_dirs(find_workspace(dev))


def test_a_pointer_to_another_worktrees_private_store_is_refused(with_dev):
    from chtop_tasks.core.errors import WorkspaceError
    from chtop_tasks.workspace.worktrees import create_worktree

    g = with_dev
    create_worktree(find_workspace(g.toplevel), "other")
    other_admin = read_gitdir_file(g.path("other", "alpha", ".git"))
    (g.path("dev", "alpha", ".git")).write_text(f"gitdir: {other_admin}\n")
    with pytest.raises(WorkspaceError, match=r"alpha/\.git: points at .*other"):
        verify_git_dirs(find_workspace(g.path("dev")))


# -- the import ------------------------------------------------------------------------------------


def test_host_tasks_import_the_branch_and_keep_rewritten_tips(with_dev):
    g = with_dev
    dev, shared = g.path("dev"), g.toplevel / "alpha"
    first = g.commit(dev / "alpha", "a.txt", "1\n", "first")
    assert git(shared, "rev-parse", "dev") != first                  # not yet imported
    out = g.inv(dev, "git.status").stdout
    assert git(shared, "rev-parse", "dev") == first
    assert "dev/alpha is 1 commit ahead of top/alpha" in out
    # rewritten inside: the shared branch follows, the old tip is kept
    git(dev / "alpha", "reset", "-q", "--hard", "HEAD~1")
    second = g.commit(dev / "alpha", "b.txt", "2\n", "second")
    g.inv(g.toplevel, "worktree.list")
    assert git(shared, "rev-parse", "dev") == second
    assert git(shared, "rev-parse", f"refs/chtop/kept/dev/{first}") == first
    # destroyed inside after the import: still on the host
    git(dev / "alpha", "reset", "-q", "--hard", "HEAD~1")
    for sub in private_store(g.grouping, "dev", "alpha").glob("objects/??"):
        subprocess.run(["rm", "-rf", str(sub)], check=True)
    g.inv(dev, "git.status")
    for sha in (first, second):
        assert git(shared, "cat-file", "-t", sha) == "commit"
    assert git(shared, "fsck", "--no-dangling") == ""


def test_an_import_with_nothing_new_runs_no_process(with_dev, monkeypatch):
    g = with_dev
    ws = find_workspace(g.path("dev"))
    quarantine.sync_worktree(ws)
    calls = []
    real = runner.run
    monkeypatch.setattr(runner, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert quarantine.sync_worktree(ws, convert=False) == []
    assert calls == []


def test_git_may_run_in_the_checkouts_once_verified_while_the_import_runs(with_dev):
    """``on_verified`` (where merge-up and rebase-down start the worktree's status) is called once,
    after every checkout's git dir was checked and before the import; a checkout that fails the
    check is refused with no call at all."""
    from chtop_tasks.core.errors import WorkspaceError
    from chtop_tasks.gitloop.status import synced_and_verified

    g = with_dev
    dev, shared = g.path("dev"), g.toplevel / "alpha"
    ws = find_workspace(dev)
    new = g.commit(dev / "alpha", "a.txt", "1\n", "first")
    seen = []
    synced_and_verified(ws, on_verified=lambda: seen.append(quarantine.read_ref(shared / ".git", "refs/heads/dev")))
    assert len(seen) == 1 and seen[0] != new                     # called before the import
    assert quarantine.read_ref(shared / ".git", "refs/heads/dev") == new
    g.commit(dev / "alpha", "b.txt", "2\n", "second")
    g.path("dev", "beta", ".git").write_text(f"gitdir: {read_gitdir_file(dev / 'alpha' / '.git')}\n")
    called = []
    with pytest.raises(WorkspaceError, match="refusing to run git"):
        synced_and_verified(ws, on_verified=lambda: called.append(True))
    assert called == []


def test_a_branch_moved_to_its_integration_tip_imports_without_a_fetch(with_dev, monkeypatch):
    """The host's store has its integration tip and everything it reaches: a branch that ends there
    (a rebase-down with no commits of its own) moves in the shared store with no fetch, and a
    rewritten tip is still kept."""
    g = with_dev
    dev, shared = g.path("dev"), g.toplevel / "alpha"
    ws = find_workspace(dev)
    first = g.commit(dev / "alpha", "a.txt", "1\n", "first")
    quarantine.sync_worktree(ws)
    assert git(shared, "rev-parse", "dev") == first
    integration = ws.integration_branch(next(c for c in ws.checkouts() if c.name == "alpha"))
    tip = g.push_upstream_commit("alpha", "up.txt", "up\n")
    git(dev / "alpha", "reset", "-q", "--hard", tip)          # the integration tip, as a rebase leaves it
    calls = recorded_git(monkeypatch)
    imported = quarantine.sync_worktree(ws, convert=False)
    assert [(i.old, i.new) for i in imported] == [(first, tip)]
    assert git(shared, "rev-parse", "dev") == tip == git(shared, "rev-parse", integration)
    assert git(shared, "rev-parse", f"refs/chtop/kept/dev/{first}") == first
    assert not [call for call in calls if call.startswith("pack-objects") or call == "fetch"], calls
    assert git(shared, "for-each-ref", "refs/chtop/incoming") == ""
    # a new commit on top is copied (and checked) as before
    second = g.commit(dev / "alpha", "b.txt", "2\n", "second")
    quarantine.sync_worktree(ws, convert=False)
    assert git(shared, "rev-parse", "dev") == second
    assert calls.count("pack-objects|unpack-objects") == 1 and "fetch" not in calls, calls


def git_subcommand(argv: list[str]) -> str | None:
    """``fetch`` of ``git --no-replace-objects -c a=b fetch ...``."""
    words = iter(argv[1:])
    for word in words:
        if word == "-c":
            next(words)
        elif not word.startswith("-"):
            return word
    return None


def recorded_git(monkeypatch) -> list[str]:
    """The git subcommands chtop runs from now on (a pipeline as ``pack-objects|index-pack``)."""
    calls = []
    run, pipeline = runner.run, runner.run_pipeline
    monkeypatch.setattr(runner, "run", lambda argv, *a, **k: calls.append(git_subcommand(list(argv)))
                        or run(argv, *a, **k))
    def recorded_pipeline(first, second, *args, **kwargs):
        def taker(start: bytes):
            argv = second(start)
            calls.append(f"{git_subcommand(list(first))}|{argv and git_subcommand(list(argv))}")
            return argv
        if not callable(second):
            calls.append(f"{git_subcommand(list(first))}|{git_subcommand(list(second))}")
        return pipeline(first, second if not callable(second) else taker, *args, **kwargs)
    monkeypatch.setattr(runner, "run_pipeline", recorded_pipeline)
    return calls


def packs(store: Path) -> set[str]:
    return {p.name for p in (store / "objects" / "pack").iterdir()} if (store / "objects" / "pack").is_dir() else set()


def test_an_import_copies_the_new_objects_checked_and_a_branch_at_no_commit_never_lands(with_dev, monkeypatch):
    """A new commit is copied with ``pack-objects | unpack-objects --strict`` in the host's store
    (the private store's objects read as objects, nothing of its config; loose, as fetch stores
    fewer than 100 objects), then the branch moves with one ``update-ref`` (that the old tip is the
    new one's parent is its old tip: one ``rev-list`` says so): no fetch, no ``incoming`` ref, no
    new pack.  A hundred objects or more go through ``pack-objects | index-pack --strict``:
    one pack, its ``.keep`` gone once the branch holds it.  A branch the agent
    points at a tree (git writes only commits to a branch) fails the import and stays at its commit;
    a rewritten branch keeps its old tip."""
    g = with_dev
    dev, shared = g.path("dev"), g.toplevel / "alpha"
    ws = find_workspace(dev)
    first = g.commit(dev / "alpha", "a.txt", "1\n", "first")
    quarantine.sync_worktree(ws)
    calls = recorded_git(monkeypatch)
    second = g.commit(dev / "alpha", "b.txt", "2\n", "second")
    imported = quarantine.sync_worktree(ws, convert=False)
    assert [(i.old, i.new, i.kept) for i in imported] == [(first, second, None)]
    assert git(shared, "rev-parse", "dev") == second
    assert calls == ["pack-objects|unpack-objects", "rev-list", "update-ref"], calls
    assert "chtop: import dev from its sandbox" in git(shared, "reflog", "-1", "--format=%gs", "dev")
    # the agent points its branch at a tree: refused, the branch stays at its commit
    tree = git(dev / "alpha", "rev-parse", "HEAD^{tree}")       # as the agent writes it (git refuses to)
    (private_store(g.grouping, "dev", "alpha") / "refs" / "heads" / "dev").write_text(tree + "\n")
    with pytest.raises(CommandFailed, match="importing dev"):
        quarantine.sync_worktree(ws, convert=False, strict=True)
    assert git(shared, "rev-parse", "dev") == second
    assert git(shared, "cat-file", "-t", "dev") == "commit"
    # rewritten inside: the old tip kept
    (private_store(g.grouping, "dev", "alpha") / "refs" / "heads" / "dev").write_text(first + "\n")
    third = g.commit(dev / "alpha", "c.txt", "3\n", "third")
    imported = quarantine.sync_worktree(ws, convert=False)
    assert [(i.old, i.new) for i in imported] == [(second, third)]
    assert git(shared, "rev-parse", f"refs/chtop/kept/dev/{second}") == second
    assert git(shared, "for-each-ref", "refs/chtop/incoming") == ""
    # back to a commit the host's store has (kept): no pack written
    before, ran_before = packs(shared / ".git"), len(calls)
    (private_store(g.grouping, "dev", "alpha") / "refs" / "heads" / "dev").write_text(second + "\n")
    quarantine.sync_worktree(ws, convert=False)
    assert git(shared, "rev-parse", "dev") == second and packs(shared / ".git") == before
    assert calls[ran_before:] == ["pack-objects|unpack-objects", "rev-list", "update-ref"], calls
    # a hundred objects or more: one pack, kept until the branch holds it
    packs_before = packs(shared / ".git")
    for number in range(60):            # 120 blobs and trees, and a commit
        (dev / "alpha" / f"many{number}").mkdir()
        (dev / "alpha" / f"many{number}" / "f.txt").write_text(f"{number}\n")
    git(dev / "alpha", "add", "-A")
    many = g.commit(dev / "alpha", "many.txt", "many\n", "many files")
    quarantine.sync_worktree(ws, convert=False)
    assert git(shared, "rev-parse", "dev") == many and calls[-3:] == ["pack-objects|index-pack", "rev-list", "update-ref"]
    new_packs = packs(shared / ".git") - packs_before
    assert len([name for name in new_packs if name.endswith(".pack")]) == 1, new_packs
    assert not [name for name in packs(shared / ".git") if name.endswith(".keep")]
    assert git(shared, "fsck", "--no-dangling", "--no-progress") == ""


def write_object(repo: Path, kind: str, body: str) -> str:
    """An object as the agent can write one (``--literally``: no check)."""
    return subprocess.run(["git", "hash-object", "-t", kind, "--literally", "-w", "--stdin"], cwd=repo,
                          input=body, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("bad", ["an author without its closing '>'", "a parent no store has"])
def test_an_object_fsck_refuses_or_one_that_links_to_nothing_never_lands(with_dev, bad):
    """The import checks every object it copies as fsck does, and that everything it links to is in
    the host's store: the import fails, the branch stays, nothing of the commit is in the host's store."""
    g = with_dev
    dev, shared = g.path("dev"), g.toplevel / "alpha"
    ws = find_workspace(dev)
    tip = g.commit(dev / "alpha", "a.txt", "1\n", "first")
    quarantine.sync_worktree(ws)
    tree = git(dev / "alpha", "rev-parse", "HEAD^{tree}")
    author = "A U Thor <a@example.invalid" if bad.startswith("an author") else "A U Thor <a@example.invalid>"
    parent = "1" * 40 if "parent" in bad else tip
    body = f"tree {tree}\nparent {parent}\nauthor {author} 1700000000 +0000\ncommitter {author} 1700000000 +0000\n\nbad\n"
    commit = write_object(dev / "alpha", "commit", body)
    (private_store(g.grouping, "dev", "alpha") / "refs" / "heads" / "dev").write_text(commit + "\n")
    with pytest.raises(CommandFailed, match="importing dev"):
        quarantine.sync_worktree(ws, convert=False, strict=True)
    assert git(shared, "rev-parse", "dev") == tip
    assert subprocess.run(["git", "cat-file", "-e", commit], cwd=shared).returncode != 0
    assert git(shared, "fsck", "--no-dangling", "--no-progress") == ""


def test_an_import_copies_loose_and_packed_objects_and_refuses_one_that_lies(with_dev, monkeypatch):
    """The agent's new objects (a file bigger than a pack entry's one-byte size, a new directory)
    land with one ``pack-objects | unpack-objects --strict``; so do objects a ``git gc`` inside
    packed.  A loose object whose content is not what its name says is named by its content on
    the way in, so the name the tree gives is missing: git refuses the import, the branch stays
    and the host's store stays whole."""
    g = with_dev
    dev, shared = g.path("dev"), g.toplevel / "alpha"
    ws = find_workspace(dev)
    store = private_store(g.grouping, "dev", "alpha")
    first = g.commit(dev / "alpha", "a.txt", "1\n", "first")
    quarantine.sync_worktree(ws)
    calls = recorded_git(monkeypatch)
    big = "".join(f"line {n}\n" for n in range(40000))           # 400 kB: a five-byte entry size
    (dev / "alpha" / "new" / "deeper").mkdir(parents=True)
    (dev / "alpha" / "new" / "deeper" / "c.txt").write_text("c\n")
    git(dev / "alpha", "add", "-A")
    second = g.commit(dev / "alpha", "big.txt", big, "big")
    quarantine.sync_worktree(ws, convert=False)
    assert git(shared, "rev-parse", "dev") == second
    assert calls == ["pack-objects|unpack-objects", "rev-list", "update-ref"], calls
    assert git(shared, "show", f"{second}:big.txt") == big.rstrip("\n")
    # packed inside (the agent's gc): copied the same way
    third = g.commit(dev / "alpha", "d.txt", "4\n", "third")
    git(dev / "alpha", "gc", "-q")
    assert not (store / "objects" / third[:2] / third[2:]).exists()
    quarantine.sync_worktree(ws, convert=False)
    assert git(shared, "rev-parse", "dev") == third and calls[-3:] == ["pack-objects|unpack-objects", "rev-list", "update-ref"]
    # a loose blob whose content is another's: refused
    fourth = g.commit(dev / "alpha", "e.txt", "five\n", "fourth")
    blob = git(dev / "alpha", "rev-parse", f"{fourth}:e.txt")
    loose = store / "objects" / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 4\0six\n"))
    with pytest.raises(CommandFailed, match="importing dev"):
        quarantine.sync_worktree(ws, convert=False, strict=True)
    assert git(shared, "rev-parse", "dev") == third
    assert subprocess.run(["git", "cat-file", "-e", fourth], cwd=shared).returncode != 0
    assert git(shared, "fsck", "--no-dangling", "--no-progress") == ""
    assert first in git(shared, "rev-list", "dev").split()


def inflating_past_its_header() -> bytes:
    """A loose blob whose header says ``blob 5`` and whose stream goes on for 512 MiB of zeros."""
    compressor = zlib.compressobj(9)
    out = compressor.compress(b"blob 5\0five\n")
    zeros = b"\0" * (1 << 20)
    out += b"".join(compressor.compress(zeros) for _ in range(512))
    return out + compressor.flush()


@pytest.mark.parametrize("planted", ["a stream past its header's size", "a header over what it holds"])
def test_a_loose_object_whose_stream_and_header_disagree_is_refused_at_once(with_dev, planted):
    """The agent's loose object is inflated by git only as far as its header says and no further: one
    whose stream runs on (512 MiB of zeros) or whose header claims far more than it holds fails the
    import at once, in bounded memory; the branch stays and the host's store stays whole."""
    g = with_dev
    dev, shared = g.path("dev"), g.toplevel / "alpha"
    ws = find_workspace(dev)
    store = private_store(g.grouping, "dev", "alpha")
    first = g.commit(dev / "alpha", "a.txt", "1\n", "first")
    quarantine.sync_worktree(ws)
    second = g.commit(dev / "alpha", "e.txt", "five\n", "second")
    blob = git(dev / "alpha", "rev-parse", f"{second}:e.txt")
    loose = store / "objects" / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(inflating_past_its_header() if planted.startswith("a stream")
                      else zlib.compress(b"blob 99999999999\0five\n"))
    peak_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss        # KiB
    with pytest.raises(CommandFailed, match="importing dev"):
        quarantine.sync_worktree(ws, convert=False, strict=True)
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss <= max(peak_before, 256 << 10), \
        "a git inflated the object far past its header"
    assert git(shared, "rev-parse", "dev") == first
    assert subprocess.run(["git", "cat-file", "-e", second], cwd=shared).returncode != 0
    assert git(shared, "fsck", "--no-dangling", "--no-progress") == ""


def test_worktree_delete_imports_first_and_never_loses_a_commit(with_dev):
    g = with_dev
    sha = g.commit(g.path("dev", "beta"), "x.txt", "x\n", "unimported")
    refused = g.inv(g.toplevel, "worktree.delete", "--name", "dev", check=False)
    assert refused.returncode == 3 and "not merged up" in refused.stderr
    g.inv(g.toplevel, "worktree.delete", "--name", "dev", "--force")
    assert not g.path("dev").exists() and not g.path(".chtop", "git", "dev").exists()
    assert git(g.toplevel / "beta", "rev-parse", "dev") == sha           # kept, with its commit


def test_integration_branch_refresh_overrides_the_private_copy_safely(with_dev, tmp_path):
    g = with_dev
    dev = g.path("dev")
    store = private_store(g.grouping, "dev", "alpha")
    (dev / "alpha" / "README").write_text("stashed\n")
    git(dev / "alpha", "stash", "-q")
    git(dev / "alpha", "pack-refs", "--all")                         # the agent's own packed refs
    git(dev / "alpha", "update-ref", "refs/heads/main", git(dev / "alpha", "rev-parse", "HEAD~0"))
    moved = g.push_upstream_commit("alpha", "up.txt", "up\n")
    g.inv(dev, "git.status")
    assert git(dev / "alpha", "rev-parse", "main") == moved
    assert not (store / "refs" / "heads" / "main").exists()
    assert "WIP on dev" in git(dev / "alpha", "stash", "list")        # its other refs stay
    assert git(dev / "alpha", "rev-parse", "dev") == git(g.toplevel / "alpha", "rev-parse", "dev")
    # a symlinked refs dir planted in the private store: the host deletes nothing through it
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "main").write_text("keep me\n")
    os.rename(store / "refs" / "heads", store / "refs" / "heads-real")
    (store / "refs" / "heads").symlink_to(outside)
    g.push_upstream_commit("alpha", "up2.txt", "up\n")
    quarantine.refresh_integration(store, g.toplevel / "alpha" / ".git", "main")
    assert (outside / "main").read_text() == "keep me\n"


def imported_soon(g, sha: str, within: float = 10) -> bool:
    """Whether the toplevel's ``dev`` reaches ``sha`` within ``within`` seconds (else fails)."""
    return eventually(lambda: git(g.toplevel / "alpha", "rev-parse", "dev") == sha, f"the toplevel's dev at {sha}",
                      timeout=within, interval=0.02)


def test_proxy_daemon_timer_imports_within_seconds(with_dev):
    g = with_dev
    notes = []
    timer = quarantine.ImportTimer(g.grouping, notes.append, interval=0.2)
    try:
        sha = g.commit(g.path("dev", "alpha"), "t.txt", "t\n", "while the agent runs")
        assert imported_soon(g, sha)
        # the timer notes an import once its round has moved every ref: a moment after the ref here moved
        eventually(lambda: any(n.startswith("IMPORT   dev") for n in notes), "the timer's IMPORT note",
                   timeout=10, explain=lambda: repr(notes))
    finally:
        timer.stop()


def test_a_woken_import_timer_imports_at_once(with_dev):
    """The proxy wakes its timer when a sandbox ends: the import comes then, not at the next tick."""
    g = with_dev
    timer = quarantine.ImportTimer(g.grouping, [].append, interval=600)
    try:
        sha = g.commit(g.path("dev", "alpha"), "w.txt", "w\n", "just before the sandbox ended")
        timer.wake()
        assert imported_soon(g, sha)
    finally:
        timer.stop()


# -- worktrees made before private git state ------------------------------------------------------------


def make_legacy_worktree(g, name: str) -> Path:
    """What worktree.create made before private stores: `git worktree add` in each shared store."""
    root = g.path(name)
    git(g.toplevel, "worktree", "add", "-q", "-b", name, str(root), "main")
    for repo, branch in (("alpha", "main"), ("beta", "kms")):
        git(g.toplevel / repo, "worktree", "add", "-q", "-b", name, str(root / repo), branch)
    return root


def test_an_old_worktree_converts_with_commits_stash_and_rebase_in_progress(initialized):
    g = initialized
    old = make_legacy_worktree(g, "old")
    alpha = old / "alpha"
    mine = g.commit(alpha, "mine.txt", "m\n", "mine")
    (alpha / "README").write_text("stashed\n")
    git(alpha, "stash", "-q")
    g.push_upstream_commit("alpha", "alpha.txt", "line 1\nupstream\nline 3\n")
    g.commit(alpha, "alpha.txt", "line 1\nmine\nline 3\n", "conflicting")
    assert subprocess.run(["git", "rebase", "main"], cwd=alpha, capture_output=True).returncode != 0
    staged = git(alpha, "diff", "--name-only", "--diff-filter=U")
    notes = []
    racing = quarantine.ImportTimer(g.grouping, notes.append, interval=0.01)   # the proxy's timer
    try:
        g.inv(old, "git.status")                                        # the next host task converts
    finally:
        racing.stop()
    store = private_store(g.grouping, "old", "alpha")
    assert read_gitdir_file(alpha / ".git").parent == store / "worktrees"
    assert not (g.toplevel / "alpha" / ".git" / "worktrees" / "alpha").exists()
    assert "rebase in progress" in git(alpha, "status")
    assert git(alpha, "diff", "--name-only", "--diff-filter=U") == staged
    assert git(alpha, "stash", "list").count("\n") == 0 and "WIP on old" in git(alpha, "stash", "list")
    (alpha / "alpha.txt").write_text("line 1\nresolved\nline 3\n")
    git(alpha, "add", "alpha.txt")
    subprocess.run(["git", "-c", "core.editor=true", "rebase", "--continue"], cwd=alpha, check=True,
                   capture_output=True)
    git(alpha, "stash", "pop", "-q")
    assert (alpha / "README").read_text() == "stashed\n"
    g.inv(old, "git.status")
    assert git(g.toplevel / "alpha", "rev-parse", "old") == git(alpha, "rev-parse", "HEAD")
    assert git(g.toplevel / "alpha", "log", "--format=%s", "main..old").splitlines() == ["conflicting", "mine"]
    assert git(g.toplevel / "alpha", "cat-file", "-t", mine) == "commit"
    for repo in ("", "beta"):
        assert read_gitdir_file(old / repo / ".git").parent == private_store(g.grouping, "old", repo) / "worktrees"
    assert "old" in g.inv(g.toplevel, "worktree.list").stdout


# -- from inside real sandboxes ------------------------------------------------------------------------

MARK = "/tmp/chtop-quarantine-pwned"


def attack_script(g) -> str:
    """Every attack on the shared history, as an agent would try it.

    The first kind works only on the agent's private copy (harmless: the host
    checks that nothing shared moved); the second must fail outright, and
    prints ``ESCAPED: ...`` if it does not.
    """
    top, grp = g.toplevel, g.grouping
    private_only, must_fail = [], []
    for repo in ("alpha", "beta"):
        shared = top / repo / ".git"
        private = private_store(grp, "dev", repo)
        admin = private / "worktrees" / repo
        monitor = f"printf '[core]\\n\\tfsmonitor = touch {MARK}\\n'"
        private_only += [
            f"git -C {repo} update-ref refs/heads/main $root",
            f"git -C {repo} update-ref refs/heads/dev2 $root",
            f"git -C {repo} replace $(git -C {repo} rev-parse main) $evil",
            f"git -C {repo} reflog expire --expire=now --all",
            f"git -C {repo} pack-refs --all",
            f"git -C {repo} tag evil-tag $evil",
            f"{monitor} > {private}/config.worktree",                  # never read: no GIT_DIR is the store
            f"mkdir -p {private}/evil && {monitor} > {private}/evil/config && echo {private}/evil > {private}/commondir",
        ]
        must_fail += [
            (f"update-ref main in {repo}'s shared store", f"git --git-dir={shared} update-ref refs/heads/main $root"),
            (f"update-ref dev2 in {repo}'s shared store", f"git --git-dir={shared} update-ref refs/heads/dev2 $root"),
            (f"rm shared objects of {repo}", f"rm {shared}/objects/pack/*.pack"),
            (f"git replace in {repo}'s shared store", f"git --git-dir={shared} replace -f $main $root"),
            (f"rewrite {repo}'s shared reflog", f": > {shared}/logs/HEAD"),
            (f"delete {repo}'s shared reflogs", f"rm -r {shared}/logs && test ! -e {shared}/logs"),
            (f"write {repo}'s shared packed-refs", f"echo \"$root refs/heads/main\" > {shared}/packed-refs"),
            (f"plant a tag in {repo}'s shared store", f"echo $root > {shared}/refs/tags/planted"),
            (f"move dev2's {repo} HEAD", f"echo 'ref: refs/heads/main' > {private_store(grp, 'dev2', repo)}/worktrees/{repo}/HEAD"),
            (f"git config fsmonitor in {repo}", f"git -C {repo} config core.fsmonitor 'touch {MARK}'"),
            (f"git config hooksPath in {repo}", f"git -C {repo} config core.hooksPath /tmp"),
            (f"append to {repo}'s private config", f"{monitor} >> {private}/config"),
            (f"write {repo}'s admin config.worktree", f"{monitor} > {admin}/config.worktree"),
            (f"plant a hook for {repo}", f"echo 'touch {MARK}' > {private}/hooks/post-checkout"),
            (f"redirect {repo}'s alternates", f"echo /tmp > {private}/objects/info/alternates"),
            (f"redirect {repo}'s commondir", f"echo {private}/evil > {admin}/commondir"),
            (f"repoint {repo}'s .git", f"echo 'gitdir: {private}/evil' > {repo}/.git"),
        ]
    lines = [f"cd {g.dev}", "root=$(git -C alpha rev-list --max-parents=0 HEAD)",
             "main=$(git -C alpha rev-parse main)",
             "evil=$(git -C alpha commit-tree -m evil $(git -C alpha rev-parse HEAD^{tree}))"]
    lines += [f"( {cmd} ) >/dev/null 2>&1" for cmd in private_only]
    lines += [f"if ( {cmd} ) >/dev/null 2>&1; then echo {shlex.quote('ESCAPED: ' + name)}; fi"
              for name, cmd in must_fail]
    # its own HEAD at the integration branch: a host-side commit there must not land on kms
    lines += ["git -C beta symbolic-ref HEAD refs/heads/kms", "echo ATTACKS-DONE"]
    return "\n".join(lines)


def shared_state(g) -> dict[str, str]:
    """Every shared store's refs (but the worktrees' own and chtop's), and a hash of its reflogs."""
    out = {}
    for repo in ("", "alpha", "beta"):
        top = g.toplevel / repo
        refs = g.git(top, "for-each-ref", "--format=%(refname) %(objectname)")
        out[f"{repo}:refs"] = "\n".join(line for line in refs.splitlines()
                                        if not line.startswith(("refs/heads/dev", "refs/chtop/")))
        digest = hashlib.sha256()
        for path in sorted((top / ".git" / "logs").rglob("*")):
            if path.is_file() and not path.name.startswith("dev") and "chtop" not in path.parts:
                digest.update(str(path).encode() + path.read_bytes())
        out[f"{repo}:logs"] = digest.hexdigest()
        out[f"{repo}:packed"] = (top / ".git" / "packed-refs").read_text()
    return out


def check_host_after_attacks(g, before, dev2_heads) -> None:
    assert shared_state(g) == before
    for repo in ("", "alpha", "beta"):
        top = g.toplevel / repo
        assert g.git(top, "fsck", "--no-dangling", "--no-progress") == ""
        assert g.git(top, "for-each-ref", "refs/replace", "refs/tags/evil-tag", "refs/tags/planted") == ""
    for repo, head in dev2_heads.items():
        assert (private_store(g.grouping, "dev2", repo) / "worktrees" / repo / "HEAD").read_text() == head
    assert not Path(MARK).exists()


def dev2_heads(g) -> dict[str, str]:
    return {repo: (private_store(g.grouping, "dev2", repo) / "worktrees" / repo / "HEAD").read_text()
            for repo in ("alpha", "beta")}


def host_commit_on_beta_lands_nowhere_shared(g, run_inv) -> None:
    """The agent pointed beta's HEAD at kms: a host-side commit goes to the private kms only."""
    kms = g.git(g.toplevel / "beta", "rev-parse", "kms")
    g.git(g.dev / "beta", "commit", "-q", "--allow-empty", "-m", "host-side commit")
    run_inv("git.status")
    assert g.git(g.toplevel / "beta", "rev-parse", "kms") == kms
    merge = run_inv("git.merge-up")
    assert merge.returncode == 3 and "expected branch 'dev'" in merge.stderr
    assert g.git(g.toplevel / "beta", "rev-parse", "kms") == kms
    g.git(g.dev / "beta", "checkout", "-q", "dev")


@pytest.fixture(scope="module")
def qg(remote_template):
    """dev and dev2, and ``old``: a worktree made the way chtop made them before private git state."""
    with user_group_cm(remote_template, extra_worktrees=("dev2",),
                       prepare=lambda group: make_legacy_worktree(group, "old")) as group:
        yield group


def _clear_mark():
    if os.path.exists(MARK):
        os.unlink(MARK)


@pytest.mark.podman
@pytest.mark.slow
def test_attacks_from_inside_change_nothing_shared(qg):
    g = qg
    _clear_mark()
    before, heads = shared_state(g), dev2_heads(g)
    proc = g.sbox(attack_script(g))
    assert "ATTACKS-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("ESCAPED")] == []
    status = g.inv("git.status")          # host-side: imports, runs git in every repo
    assert status.returncode == 0, status.stdout + status.stderr
    check_host_after_attacks(g, before, heads)
    host_commit_on_beta_lands_nowhere_shared(g, lambda *a: g.inv(*a))
    check_host_after_attacks(g, before, heads)


ALLOWED = r"""
set -e
cd {root}/alpha
git log --oneline main | grep -q 'upstream change'
echo a > a.txt && git add a.txt && git commit -qm 'work 1'
echo b >> a.txt && git commit -qam 'work 1, amended' --amend
git rebase -q main
git checkout -q -b side main && echo c > c.txt && git add c.txt && git commit -qm 'picked' && git checkout -q {name}
git cherry-pick side >/dev/null && git branch -D side >/dev/null
echo s > s.txt && git add s.txt && git stash -q && git stash list | grep -q WIP && git stash pop -q
git status --short | grep -q 's.txt'
git diff --cached --stat | grep -q s.txt
git log --oneline -3 | grep -q picked
git diff main... --stat | grep -q a.txt
echo ALLOWED-DONE
"""


@pytest.mark.podman
@pytest.mark.slow
def test_allowed_work_inside_is_visible_on_the_host_after_exit(qg):
    g = qg
    root, shared = g.grouping / "dev2", g.toplevel / "alpha"
    g.git(shared, "commit", "-q", "--allow-empty", "-m", "upstream change")
    upstream = g.git(shared, "rev-parse", "main")
    proc = g.inv("sbox.shell", cwd=root, input=ALLOWED.format(root=root, name="dev2"))   # exits, then imports
    assert "ALLOWED-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert g.git(shared, "log", "--format=%s", "main..dev2").splitlines() == ["picked", "work 1, amended"]
    assert g.git(shared, "merge-base", "--is-ancestor", upstream, "dev2") == ""
    # a person on the host sees the agent's branch and index
    assert g.git(root / "alpha", "rev-parse", "HEAD") == g.git(shared, "rev-parse", "dev2")
    assert "s.txt" in g.git(root / "alpha", "diff", "--cached", "--name-only")
    g.git(root / "alpha", "reset", "-q", "--hard")
    status = g.inv("git.status", cwd=root).stdout       # (worktree.list would convert ``old`` too early)
    assert "dev2/alpha is 2 commits ahead of top/alpha (main branch)" in status, status


@pytest.mark.podman
@pytest.mark.slow
def test_a_commit_destroyed_inside_after_an_import_survives(qg):
    g = qg
    root = g.grouping / "dev2"
    store = private_store(g.grouping, "dev2", "beta")
    script = (f"cd {root}/beta && echo d > d.txt && git add d.txt && git commit -qm doomed && "
              "git rev-parse HEAD && sleep 6 && git reset -q --hard HEAD~1 && "
              f"rm -rf {store}/objects/?? {store}/objects/pack/* && git reflog expire --expire=now --all && "
              "echo DESTROYED")
    shared = g.toplevel / "beta"
    proc = g.inv("sbox.run", "--", "sh", "-c", script, cwd=root, timeout=180)
    assert "DESTROYED" in proc.stdout, proc.stdout + proc.stderr
    doomed = proc.stdout.split()[0]
    assert g.git(shared, "cat-file", "-t", doomed) == "commit"        # imported while it slept
    assert g.git(shared, "rev-parse", f"refs/chtop/kept/dev2/{doomed}") == doomed
    assert g.git(shared, "rev-parse", "dev2") == g.git(shared, "rev-parse", "kms")
    assert g.git(shared, "fsck", "--no-dangling", "--no-progress") == ""


@pytest.mark.podman
@pytest.mark.slow
def test_an_old_worktree_converts_at_launch_and_works_inside(qg):
    g = qg
    old = g.grouping / "old"
    g.git(old / "alpha", "commit", "-q", "--allow-empty", "-m", "made before the change")
    proc = g.inv("sbox.run", "--", "sh", "-c",
                 "git -C alpha log -1 --format=%s && git -C alpha commit -q --allow-empty -m inside && "
                 f"if git --git-dir={g.toplevel}/alpha/.git update-ref refs/heads/old HEAD 2>/dev/null; "
                 "then echo ESCAPED; fi; echo INSIDE-DONE", cwd=old)
    assert "INSIDE-DONE" in proc.stdout and "ESCAPED" not in proc.stdout, proc.stdout + proc.stderr
    assert "made before the change" in proc.stdout
    assert "moved onto private git state" in proc.stderr
    assert read_gitdir_file(old / "alpha" / ".git").parent == private_store(g.grouping, "old", "alpha") / "worktrees"
    assert g.git(g.toplevel / "alpha", "log", "--format=%s", "-2", "old").splitlines() == [
        "inside", "made before the change"]


# -- rootful: the same attacks, launched as root ------------------------------------------------------


@pytest.fixture(scope="module")
def rootful_group(remote_template):
    """Its own workspace: a root-run proxy must not share a group with the test user's."""
    with user_group_cm(remote_template, extra_worktrees=("dev2",)) as group:
        yield group


@pytest.fixture
def root_env(tmp_path, rootful_group):
    """Rootful podman with its storage in tmp (never the machine's /var/lib/containers)."""
    return rootful_podman_env(tmp_path)


def inv_as_root(env, cwd, *args, input=None):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180, input=input,
                          stdin=subprocess.DEVNULL if input is None else None)


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_rootful_attacks_change_nothing_shared_and_commits_import(rootful_group, root_env):
    g = rootful_group
    _clear_mark()
    before, heads = shared_state(g), dev2_heads(g)
    script = attack_script(g) + (f"\ncd {g.dev}/alpha && git checkout -q dev 2>/dev/null; "
                                 "echo r > rootful.txt && git add rootful.txt && git commit -qm 'rootful work' "
                                 "&& echo COMMITTED")
    proc = inv_as_root(root_env, g.dev, "sbox.run", "--", "sh", "-c", script)
    assert "ATTACKS-DONE" in proc.stdout and "COMMITTED" in proc.stdout, proc.stdout + proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("ESCAPED")] == []
    assert "rootful podman with a user namespace" in proc.stderr
    # root does not run git in the owner's repos (git's own ownership rule): the owner's next task imports
    assert g.inv("git.status").returncode == 0
    check_host_after_attacks(g, before, heads)
    assert g.git(g.toplevel / "alpha", "log", "-1", "--format=%s", "dev") == "rootful work"


# -- submodules: their gitdirs live in the agent-writable admin dir ------------------------------------


def test_host_tasks_never_run_a_submodules_agent_written_config(group, tmp_path):
    from chtop_tasks.workspace.toplevel import init_toplevel
    from chtop_tasks.workspace.worktrees import create_worktree

    g = group
    seed = tmp_path / "alpha-seed"
    git(tmp_path, "clone", "-q", str(g.remotes / "alpha.git"), str(seed))
    git(seed, "-c", "protocol.file.allow=always", "submodule", "add", "-q", f"file://{g.remotes}/beta.git", "sub")
    git(seed, "commit", "-q", "-m", "add a submodule")
    git(seed, "push", "-q", "origin", "HEAD:main")
    init_toplevel(find_workspace(g.toplevel))
    create_worktree(find_workspace(g.toplevel), "dev")
    sub = g.path("dev", "alpha", "sub")
    sub_gitdir = read_gitdir_file(sub / ".git")
    assert sub_gitdir.is_relative_to(private_store(g.grouping, "dev", "alpha") / "worktrees")
    mark = tmp_path / "ran"
    # what an agent can do inside: its submodule's config is in its own admin dir
    git(sub, "config", "core.fsmonitor", f"touch {mark}")
    (sub / "beta.txt").write_text("changed inside the submodule\n")
    g.inv(g.path("dev"), "git.status")
    g.inv(g.path("dev"), "git.diff")
    g.inv(g.toplevel, "worktree.list")
    assert not mark.exists()
    subprocess.run(["git", "status"], cwd=g.path("dev", "alpha"), capture_output=True)
    assert mark.exists()     # the control: plain git recursing into the submodule does run it


def test_a_symlinked_branch_ref_is_never_imported_and_blocks_delete(with_dev, tmp_path):
    g = with_dev
    secret = tmp_path / "host-file"
    secret.write_text("0123456789abcdef0123456789abcdef01234567\n")
    ref = private_store(g.grouping, "dev", "alpha") / "refs" / "heads" / "dev"
    before = git(g.toplevel / "alpha", "rev-parse", "dev")
    ref.unlink()
    ref.symlink_to(secret)
    status = g.inv(g.path("dev"), "git.status", check=False)
    assert status.returncode == 2 and "is a symlink" in status.stderr and f"rm {ref}" in status.stderr
    assert git(g.toplevel / "alpha", "rev-parse", "dev") == before
    refused = g.inv(g.toplevel, "worktree.delete", "--name", "dev", "--force", check=False)
    assert refused.returncode == 2 and f"rm {ref}" in refused.stderr
    assert g.path("dev").is_dir()


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_rootful_allowed_work_imports_when_the_owner_runs_a_task(rootful_group, root_env):
    g = rootful_group
    root, shared = g.grouping / "dev2", g.toplevel / "alpha"
    g.git(shared, "commit", "-q", "--allow-empty", "-m", "upstream change")
    g.inv("git.status", cwd=root)           # the owner's task refreshes main inside (root's launch does not)
    proc = inv_as_root(root_env, root, "sbox.run", "--", "bash", "-c", ALLOWED.format(root=root, name="dev2"))
    assert "ALLOWED-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert g.git(shared, "log", "--format=%s", "main..dev2") == ""        # root imported nothing
    g.inv("git.status", cwd=root)
    assert g.git(shared, "log", "--format=%s", "main..dev2").splitlines() == ["picked", "work 1, amended"]


@pytest.fixture(scope="module")
def sub_template(remote_template, tmp_path_factory):
    """The remotes, with a submodule ``sub`` (beta's history) in alpha's main."""
    from conftest import hermetic_os_env

    base = tmp_path_factory.mktemp("sub-template")
    remotes = base / "remotes"
    subprocess.run(["cp", "-a", str(remote_template), str(remotes)], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
    with hermetic_os_env(base / "home"):
        seed = base / "alpha-seed"
        git(base, "clone", "-q", str(remotes / "alpha.git"), str(seed))
        git(seed, "-c", "protocol.file.allow=always", "submodule", "add", "-q", f"file://{remotes}/beta.git", "sub")
        git(seed, "commit", "-q", "-m", "add a submodule")
        git(seed, "push", "-q", "origin", "HEAD:main")
    return remotes


@pytest.mark.podman
@pytest.mark.slow
def test_submodules_work_inside_and_their_config_never_runs_on_the_host(sub_template):
    _clear_mark()
    with user_group_cm(sub_template) as g:
        script = (f"cd {g.dev}/alpha/sub && git config core.fsmonitor 'touch {MARK}' && "
                  "echo x > inside.txt && git add inside.txt && git commit -qm 'in the submodule' && "
                  "cd .. && git add sub && git commit -qm 'bump sub' && git status --short && echo SUB-DONE")
        proc = g.sbox(script)
        assert "SUB-DONE" in proc.stdout, proc.stdout + proc.stderr
        (g.dev / "alpha" / "sub" / "beta.txt").write_text("dirty\n")
        status = g.inv("git.status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert not Path(MARK).exists()
        shared = g.toplevel / "alpha"
        assert g.git(shared, "log", "-1", "--format=%s", "dev") == "bump sub"      # the gitlink, imported


NESTED_REPO = """
cd {alpha} && git init -q sub && cd sub && git commit -q --allow-empty -m nested &&
printf '#!/bin/sh\\ntouch {mark}\\n' > monitor.sh && chmod +x monitor.sh &&
git config core.fsmonitor {alpha}/sub/monitor.sh && cd .. && git add sub && git commit -qm 'a gitlink' &&
echo dirty > sub/dirty.txt && echo NESTED-DONE
"""

HOST_READERS = """
from pathlib import Path
from chtop_tasks.dash.model import take_snapshot, worktree_diff
from chtop_tasks.workspace.layout import find_workspace
from chtop_tasks.stores.quarantine import sync_worktree
from chtop_tasks.stores import exit_import
top, dev = find_workspace(Path({top!r})), find_workspace(Path({dev!r}))
snap = take_snapshot(top, sessions=lambda grouping: [])
print([r.cell("dev") for w in snap.worktrees for r in w.repos])
print(worktree_diff(dev)[:200], worktree_diff(dev, full=True)[:200])
sync_worktree(dev)
exit_import.main([{dev!r}])
print("READERS-DONE")
"""

# A stand-in agent (registered as data): the session's launch, its end and its import are real
STAND_IN_AGENT = "[standin]\ncommand = ['sh', '-c', 'echo STANDIN-RAN; sleep 4', 'standin']\n"

SESSION_READERS = """
from pathlib import Path
from chtop_tasks.dash.model import take_snapshot
from chtop_tasks.workspace.layout import find_workspace
snap = take_snapshot(find_workspace(Path({top!r})))          # the dashboard's own session listing
print([(w.name, (w.session or {{}}).get("state")) for w in snap.worktrees])
print("READERS-DONE")
"""


def run_a_session_to_its_end(g) -> str:
    """``inv session.start --agent standin`` in dev, the dashboard's snapshot while it runs, then
    ``session.list`` until it has exited; its log."""
    config = g.home / ".config" / "chtop"
    config.mkdir(parents=True, exist_ok=True)
    (config / "agents.toml").write_text(STAND_IN_AGENT)
    subprocess.run(["chown", "-R", f"{g.user.pw_uid}:{g.user.pw_gid}", str(g.home / ".config")], check=True)
    try:
        started = g.inv("session.start", "--agent", "standin", timeout=180)
        assert started.returncode == 0, started.stdout + started.stderr
        readers = as_owner_python(g, SESSION_READERS.format(top=str(g.toplevel)))
        assert "READERS-DONE" in readers.stdout, readers.stdout + readers.stderr
        eventually(lambda: "exited" in g.inv("session.list").stdout, "the session to exit", timeout=120, interval=1,
                   explain=lambda: g.inv("session.list").stdout)
        return g.inv("session.log").stdout
    finally:
        for sock in (g.base / "run").glob("chtop-*/*/tmux.sock"):
            g.run(["tmux", "-S", str(sock), "kill-server"], check=False)


@pytest.mark.podman
@pytest.mark.slow
def test_a_nested_repo_made_inside_never_runs_its_config_in_any_host_reader(remote_template):
    """``git init alpha/sub`` inside, its fsmonitor a script there, ``git add sub`` (a gitlink, no
    .gitmodules): no host-side reader -- the dashboard's refresh and diff pane, the import at exit
    and on the timer, git.*, worktree.list, the merge-up and rebase-down plans, ``chtop go``, a
    real session (its launch, the dashboard listing it, its end and import) -- starts git inside it."""
    with user_group_cm(remote_template) as g:
        mark = g.base / "nested-repo-config-ran"
        proc = g.sbox(NESTED_REPO.format(alpha=g.dev / "alpha", mark=mark))      # sbox.run imports at exit
        assert "NESTED-DONE" in proc.stdout, proc.stdout + proc.stderr
        assert g.git(g.toplevel / "alpha", "log", "-1", "--format=%s", "dev") == "a gitlink"
        for args, cwd in ((("git.status",), g.dev), (("git.diff",), g.dev), (("worktree.list",), g.toplevel),
                          (("git.merge-up", "--dry-run"), g.dev), (("git.rebase-down", "--dry-run"), g.dev)):
            g.inv(*args, cwd=cwd)
            assert not mark.exists(), args
        readers = as_owner_python(g, HOST_READERS.format(top=str(g.toplevel), dev=str(g.dev)), timeout=120)
        assert "READERS-DONE" in readers.stdout, readers.stdout + readers.stderr
        assert not mark.exists(), readers.stdout
        go = as_user(g.user, [str(g.venv / "bin" / "python"), "-m", "chtop_tasks.cli.chtop", "go", "--print-dir", "dev"],
                     dict(g.env, PYTHONPATH=str(g.toplevel)), g.toplevel, check=False)
        assert go.stdout.strip() == str(g.dev), go.stdout + go.stderr
        assert not mark.exists()
        assert "STANDIN-RAN" in run_a_session_to_its_end(g)      # a real session: launch, end, import
        assert not mark.exists()
        g.run(["git", "status"], cwd=g.dev / "alpha", check=False)
        assert mark.exists()      # the control: plain git descends into the nested repo and runs it


@pytest.mark.podman
@pytest.mark.slow
def test_sbox_run_waits_to_import_but_a_sigterm_still_ends_the_sandbox(qg):
    g = qg
    started = time.monotonic()
    script = (f"{g.venv}/bin/python -m invoke sbox.run -- sleep 100 & pid=$!; sleep 8; "
              "kill -TERM $pid; wait $pid; echo rc=$?")           # the signal to chtop's process only
    proc = as_user(g.user, ["sh", "-c", script], g.env, g.dev, check=False, timeout=90)
    assert "rc=143" in proc.stdout and time.monotonic() - started < 60, proc.stdout + proc.stderr
    left = g.run(["podman", "ps", "--filter", "label=chtop.worktree=dev", "--format", "{{.Names}}"]).stdout
    assert left.strip() == ""


# -- agent-written files: read without following, blocking or trusting (FIFOs, links, junk refs) -----------


@pytest.fixture(scope="module")
def fifo_group(remote_template):
    """dev (its stores get FIFOs), dev2 (a junk ref), dev3 (untouched: its imports must go on)."""
    with user_group_cm(remote_template, extra_worktrees=("dev2", "dev3")) as group:
        yield group


SNAPSHOT = """
from pathlib import Path
from chtop_tasks.dash.model import take_snapshot
from chtop_tasks.workspace.layout import find_workspace
snap = take_snapshot(find_workspace(Path({top!r})), sessions=lambda grouping: [])
for wt in snap.worktrees:
    print(wt.name, wt.problem, [r.problem for r in wt.repos])
print("SNAPSHOT-DONE")
"""

TIMER = """
import fcntl, time, subprocess
from pathlib import Path
from chtop_tasks.stores.quarantine import ImportTimer, group_git_dir
held = open(group_git_dir(Path({grp!r})) / "dev2" / ".lock", "a")     # a task hung on dev2 holds its lock
fcntl.flock(held, fcntl.LOCK_EX)
notes = []
timer = ImportTimer(Path({grp!r}), notes.append, interval=0.2, timeout=3)
deadline = time.monotonic() + 60
imported = False
while time.monotonic() < deadline and not (imported and any("dev2" in note for note in notes)):
    got = subprocess.run(["git", "-C", {shared!r}, "rev-parse", "dev3"], capture_output=True, text=True).stdout.strip()
    if got == {sha!r} and not imported:
        imported = True
        print("TIMER-IMPORTED")
    time.sleep(0.1)
print("\\n".join(notes))
"""


@pytest.mark.podman
@pytest.mark.slow
def test_fifos_links_and_junk_refs_planted_inside_never_hang_or_break_host_tasks(fifo_group):
    g = fifo_group
    alpha, beta, top = (private_store(g.grouping, "dev", r) for r in ("alpha", "beta", ""))
    script = (f"cd {g.dev} && git -C alpha pack-refs --all && rm {alpha}/packed-refs && "
              f"mkfifo {alpha}/packed-refs && rm {beta}/worktrees/beta/HEAD && mkfifo {beta}/worktrees/beta/HEAD && "
              f"rm -f {top}/HEAD && ln -s /etc/passwd {top}/HEAD && echo PLANTED")
    proc = g.sbox(script, timeout=180)
    assert "PLANTED" in proc.stdout, proc.stdout + proc.stderr        # and sbox.run itself returned
    dev2 = g.grouping / "dev2"
    proc = g.inv("sbox.run", "--", "sh", "-c", f"echo junk > {private_store(g.grouping, 'dev2', '')}/refs/heads/dev2 "
                 "&& echo JUNK", cwd=dev2, timeout=180)
    assert "JUNK" in proc.stdout, proc.stdout + proc.stderr

    status = g.inv("git.status", timeout=90)
    assert status.returncode != 0
    assert f"{alpha}/packed-refs" in status.stderr and "FIFO" in status.stderr, status.stderr
    listing = g.inv("worktree.list", cwd=g.toplevel, timeout=90)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    lines = listing.stdout.splitlines()
    assert listing.stdout.startswith("dev: ") and "packed-refs is a FIFO" in listing.stdout, listing.stdout
    assert any(line.startswith("dev3  (") for line in lines), listing.stdout
    assert any(line.startswith("dev2  (") for line in lines), listing.stdout       # the junk ref: dev2 only
    snap = as_owner_python(g, SNAPSHOT.format(top=str(g.toplevel)), timeout=90)
    assert "SNAPSHOT-DONE" in snap.stdout, snap.stdout + snap.stderr
    assert "FIFO" in next(line for line in snap.stdout.splitlines() if line.startswith("dev ")), snap.stdout

    # the group's proxy (started by the launches above) imports on its own timer: stopped, so the
    # commit below is imported by the timer this test runs, past a dev2 hung on its lock
    stopped = g.inv("net.stop", "--force", cwd=g.toplevel, timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    dev3_alpha = g.grouping / "dev3" / "alpha"
    g.run(["sh", "-c", f"cd {dev3_alpha} && echo t > t.txt && git add t.txt && git commit -qm 'while dev hangs'"])
    sha = g.git(dev3_alpha, "rev-parse", "HEAD")
    timer = as_owner_python(g, TIMER.format(grp=str(g.grouping), shared=str(g.toplevel / "alpha"), sha=sha),
                            timeout=90)
    assert "TIMER-IMPORTED" in timer.stdout, timer.stdout + timer.stderr
    assert "import of worktree dev2 still running after 3s" in timer.stdout, timer.stdout
    assert "Traceback" not in timer.stdout + timer.stderr, timer.stdout + timer.stderr


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_as_root_a_fifo_planted_inside_never_hangs_a_host_task(with_dev, tmp_path):
    """A root-owned workspace launched by root: the FIFO packed-refs, made inside, is named by
    git.status and worktree.list at once, and sbox.run itself returns."""
    from chtop_tasks.proxy import stop_proxy

    g, dev = with_dev, with_dev.path("dev")
    alpha = private_store(g.grouping, "dev", "alpha")
    script = (f"git -C alpha pack-refs --all && rm {alpha}/packed-refs && mkfifo {alpha}/packed-refs && "
              "echo PLANTED")
    try:
        proc = g.inv(dev, "sbox.run", "--", "sh", "-c", script, env=rootful_podman_env(tmp_path), check=False,
                     timeout=180)
        assert "PLANTED" in proc.stdout, proc.stdout + proc.stderr
        status = g.inv(dev, "git.status", check=False, timeout=90)
        assert status.returncode == 2 and f"{alpha}/packed-refs is a FIFO" in status.stderr, status.stderr
        listing = g.inv(g.toplevel, "worktree.list", timeout=90)
        assert "packed-refs is a FIFO" in listing.stdout, listing.stdout
    finally:
        stop_proxy(g.grouping)


@pytest.mark.podman
@pytest.mark.slow
def test_a_directory_made_unreadable_inside_hides_no_fifo_from_host_git(remote_template):
    """The agent commits, puts a FIFO where its commit's loose object was, and takes the read bit off
    that object directory (``chmod 311``): a listing of it fails on the host (rootless, the owner's
    own mode bits apply), while git, which opens the object by name, would still reach the FIFO and
    block.  An unreadable directory of a private store is refused by name, as a FIFO is: sbox.run's
    exit import and git.status return, naming it, and say how to fix it."""
    with user_group_cm(remote_template) as g:
        store = private_store(g.grouping, "dev", "alpha")
        script = (f"cd {g.dev}/alpha && git commit -q --allow-empty -m inside && obj=$(git rev-parse HEAD) && "
                  f"d={store}/objects/$(echo $obj | cut -c1-2) && f=$d/$(echo $obj | cut -c3-) && "
                  "rm -f $f && mkfifo $f && chmod 311 $d && echo PLANTED $d")
        proc = g.sbox(script, timeout=180)
        assert "PLANTED" in proc.stdout, proc.stdout + proc.stderr                # and sbox.run returned
        planted = proc.stdout.split("PLANTED ", 1)[1].split()[0]
        assert f"{planted} is an unreadable directory" in proc.stderr, proc.stderr   # the exit import
        status = g.inv("git.status", timeout=90)
        assert status.returncode != 0, status.stdout + status.stderr
        assert f"{planted} is an unreadable directory" in status.stderr and f"chmod u+rwx {planted}" in status.stderr, \
            status.stderr
