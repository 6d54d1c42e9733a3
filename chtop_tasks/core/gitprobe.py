"""Git probes: read-only questions about one checkout or store, asked with the one host git runner.

The cross-repo fan-out (gitloop), worktree create/delete (worktrees), the
dashboard and the quarantine's import ask these; nothing here changes a repo.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import agentfile
from .gitrun import git

# In a feature worktree, submodule gitdirs live in the agent-writable admin dir:
# host-side status/diff never start a git inside them (changed submodule commits
# still show; files changed inside a submodule do not).
WORKTREE_SUBMODULES = "--ignore-submodules=dirty"
# A worktree's .gitattributes is the agent's: its diff= lines could route files through a textconv
# or external diff command your git config defines. Host-side diffs of a worktree run neither.
WORKTREE_DIFF_DRIVERS_OFF = ("--no-ext-diff", "--no-textconv")
# The review of a worktree's work (git.diff --integration, the dashboard's diff pane) shows every
# file's content as text, whatever its attributes say (``-diff``, ``binary``: "Binary files differ"
# would hide what lands); the user's own attribute files are not read either.  Shown inert.
REVIEW_GIT_OPTS = ("-c", "core.attributesFile=/dev/null")
REVIEW_DIFF_OPTS = ("--text",)
REVIEW_ENV = {"GIT_ATTR_NOSYSTEM": "1"}


SHA_HEX = frozenset("0123456789abcdef")


def git_dir_as_data(checkout_dir: Path) -> Path | None:
    """The checkout's git dir read from its ``.git`` (a dir, or a ``gitdir:`` file read as data:
    agent-writable, so no link followed), or None when it is neither (the caller asks git)."""
    dot_git = checkout_dir / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        return dot_git
    text = agentfile.read_text(dot_git, limit=4096)
    if text is None or not text.startswith("gitdir:") or "\n" in text.strip():
        return None
    target = Path(text[len("gitdir:"):].strip())
    gitdir = Path(os.path.normpath(target if target.is_absolute() else checkout_dir / target))
    return gitdir if gitdir.is_dir() and not gitdir.is_symlink() else None


def head_branch_as_data(checkout_dir: Path) -> tuple[bool, str | None]:
    """(known, branch) from the HEAD file: a plain ``ref: refs/heads/X`` or a detached sha; anything
    else (no such file, a reftable stub, another kind of ref) is not known."""
    gitdir = git_dir_as_data(checkout_dir)
    text = None if gitdir is None else agentfile.read_text(gitdir / "HEAD", limit=4096)
    if text is None:
        return False, None
    text = text.strip()
    if text.startswith("ref: refs/heads/"):
        name = text[len("ref: refs/heads/"):]
        if name and name != ".invalid" and name.isprintable() and " " not in name:
            return True, name
        return False, None
    if len(text) in (40, 64) and set(text) <= SHA_HEX:
        return True, None
    return False, None


def head_branch(checkout_dir: Path) -> str | None:
    """The branch checked out in ``checkout_dir``, None when detached (the HEAD file read as data
    where it is plain; else git is asked)."""
    known, branch = head_branch_as_data(checkout_dir)
    if known and (branch is None or not ambiguous_short_name(checkout_dir, branch)):
        return branch
    result = git(checkout_dir, ["symbolic-ref", "--quiet", "--short", "HEAD"], check=False)
    return result.stdout.strip() if result.ok else None


def ambiguous_short_name(checkout_dir: Path, branch: str) -> bool:
    """Whether git's ``--short`` might not shorten ``refs/heads/BRANCH`` to BRANCH: another ref its
    rules read BRANCH as (a tag, a remote, ``refs/BRANCH``, a file of that name in the git dir),
    loose or packed, exists; then git is asked."""
    gitdir = git_dir_as_data(checkout_dir)
    common = gitdir
    if gitdir is not None:
        pointer = agentfile.read_text(gitdir / "commondir", limit=4096)
        if pointer is not None:
            common = Path(os.path.normpath(gitdir / pointer.strip()))
    if common is None:
        return True
    others = (branch, f"refs/{branch}", f"refs/tags/{branch}", f"refs/remotes/{branch}", f"refs/remotes/{branch}/HEAD")
    if any(os.path.lexists(base / name) for base in {gitdir, common} for name in others):
        return True
    packed = agentfile.read_text(common / "packed-refs", limit=64 << 20) or ""
    return any(line.endswith(tuple(f" {name}" for name in others[1:])) for line in packed.splitlines())


def ahead_behind(checkout_dir: Path, base: str, tip: str = "HEAD") -> tuple[int, int]:
    """Commits (ahead, behind): in ``tip`` not ``base``, in ``base`` not ``tip``."""
    result = git(checkout_dir, ["rev-list", "--left-right", "--count", f"{base}...{tip}"])
    behind, ahead = (int(x) for x in result.stdout.split())
    return ahead, behind


# How long a listing of many worktrees (worktree.list, the dashboard) waits on one repo's git
# status: a FIFO the agent planted deep in its checkout then fails that repo's line, not the list.
LISTING_TIMEOUT = 20


def dirty_paths(checkout_dir: Path, untracked: bool = True, toplevel: bool = False,
                timeout: float = 300) -> list[str]:
    """Uncommitted tracked changes and (unless not ``untracked``: git then walks no directory for
    them) untracked, non-ignored files.  Without git's optional locks: this check writes no
    refreshed index, so it never holds ``index.lock`` while the agent (or you) run git there.
    ``toplevel``: a toplevel checkout (no sandbox writes it, and merge-up lands there): git may
    write back the index it refreshed, as your own ``git status`` does.  Otherwise an index written
    in the same second as its files (a fresh clone or checkout) stays "racily clean", and every
    status would read all of its files again.  ``timeout``: seconds before git is stopped (CommandFailed)."""
    locks = [] if toplevel else ["--no-optional-locks"]
    out = git(checkout_dir, [*locks, "status", WORKTREE_SUBMODULES, "--porcelain",
                             "--untracked-files=all" if untracked else "--untracked-files=no"], timeout=timeout).stdout
    return [line for line in out.splitlines() if line.strip()]


def operation_in_progress(checkout_dir: Path, gitdir: Path | None = None) -> str | None:
    """The git operation that stopped halfway there and has a ``--continue`` (rebase, merge,
    cherry-pick, revert, am), or None.  ``gitdir``: the checkout's (``git rev-parse
    --absolute-git-dir``), when the caller has it already."""
    found = operation_state(checkout_dir, gitdir)
    return found.name if found and found.name != "bisect" else None


@dataclass(frozen=True)
class Operation:
    """A git operation stopped halfway in a checkout: ``name`` (``rebase``, ``merge``, ``cherry-pick``,
    ``revert``, ``am``, ``bisect``), ``branch`` (the branch a rebase rewrites, when its state says)."""

    name: str
    branch: str | None = None

    def commands(self, checkout_dir: Path) -> tuple[str, ...]:
        """The commands that end it: go on, then back out (a bisect only ends)."""
        if self.name == "bisect":
            return (f"git -C {checkout_dir} bisect reset",)
        return tuple(f"git -C {checkout_dir} {self.name} --{verb}" for verb in ("continue", "abort"))


# The files git's own status reads to say which operation is in progress (wt-status.c), in its order.
OPERATION_MARKERS = (("rebase-merge", "rebase"), ("rebase-apply/applying", "am"), ("rebase-apply", "rebase"),
                     ("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick"), ("REVERT_HEAD", "revert"),
                     ("BISECT_LOG", "bisect"))


def operation_state(checkout_dir: Path, gitdir: Path | None = None) -> Operation | None:
    """The operation stopped halfway in ``checkout_dir``, or None.  Its git dir may be the agent's:
    markers are looked at without following a link, the rebased branch read as data."""
    if gitdir is None:
        gitdir = git_dir_as_data(checkout_dir)
    if gitdir is None:
        gitdir = Path(git(checkout_dir, ["rev-parse", "--absolute-git-dir"]).stdout.strip())
    for marker, name in OPERATION_MARKERS:
        if os.path.lexists(gitdir / marker):
            branch = rebased_branch(gitdir / marker) if name == "rebase" else None
            return Operation(name, branch)
    return None


def rebased_branch(state_dir: Path) -> str | None:
    """The branch a rebase rewrites, from its ``head-name`` (read as data), or None."""
    text = (agentfile.read_text(state_dir / "head-name", limit=4096) or "").strip()
    name = text[len("refs/heads/"):] if text.startswith("refs/heads/") else ""
    return name if name and name.isprintable() and " " not in name else None


def untracked_in_the_way(checkout_dir: Path, ref: str, dirty: list[str] | None = None) -> list[str]:
    """Untracked files that ``ref``'s tree also has: checking ``ref`` out would overwrite them
    (``dirty``: ``dirty_paths(checkout_dir)``, when the caller has it already).

    Other untracked files do not stop a rebase (git leaves them alone), so they are not refused.
    """
    dirty = dirty_paths(checkout_dir) if dirty is None else dirty
    untracked = {d[3:] for d in dirty if d.startswith("??")}
    if not untracked:
        return []
    in_ref = git(checkout_dir, ["ls-tree", "-r", "--name-only", ref]).stdout.splitlines()
    return sorted(untracked.intersection(in_ref))


def branch_exists(repo_dir: Path, branch: str) -> bool:
    return git(repo_dir, ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], check=False).ok


def rev(repo_dir: Path, ref: str) -> str:
    return git(repo_dir, ["rev-parse", "--verify", f"{ref}^{{commit}}"]).stdout.strip()


def local_branches(repo_dir: Path) -> dict[str, str]:
    """Every local branch of the repo and its commit, in one git call."""
    out = git(repo_dir, ["for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads"]).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines() if line)


def commits_missing_from(repo_dir: Path, tip: str, bases: list[str]) -> list[str]:
    """The commits of ``tip`` that none of ``bases`` has, by id or by patch-id (``git cherry``):
    empty when every change of ``tip`` is already in some base."""
    missing: set[str] | None = None
    for base in bases:
        out = git(repo_dir, ["cherry", base, tip]).stdout
        plus = {line[2:].strip() for line in out.splitlines() if line.startswith("+ ")}
        missing = plus if missing is None else missing & plus
        if not missing:
            break               # every change is in some base already: no other base can add one
    return sorted(missing or ())
