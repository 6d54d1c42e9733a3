"""The toplevel: clone the manifest's repos into it, idempotently."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..core.errors import Refused
from ..core.gitprobe import head_branch
from ..core.gitrun import git
from ..core.term import say, warn
from .dotfiles import refresh_workspace_files
from .layout import Workspace, verify_git_dirs
from .manifest import Repo
from .worktrees import init_submodules


def clone_repo(ws: Workspace, repo: Repo) -> None:
    target = ws.toplevel / repo.name
    git(ws.toplevel, ["clone", "--branch", repo.branch, repo.url, str(target)], quiet=False, toplevel_only=True)
    if repo.submodules:
        init_submodules(target, repo.name)


def commit_graph_written(repo_dir: Path) -> bool:
    """The clone's commit-graph, written when it has none (else a file check, no process): whether
    it was written.  Every import of a worktree's branch is a fetch whose negotiation, pack and
    connectivity check walk commits, and so are the ahead/behind counts of every git task; with the
    graph (the private stores read it through their alternates) git reads no commit object for
    that.  Commits made later
    are walked as before until ``git gc`` (which rewrites it) or ``git commit-graph write``."""
    info = repo_dir / ".git" / "objects" / "info"
    if (info / "commit-graph").exists() or (info / "commit-graphs").exists() or not (repo_dir / ".git").is_dir():
        return False
    return git(repo_dir, ["commit-graph", "write", "--reachable"], check=False, quiet=False,
               toplevel_only=True).ok


def check_existing(ws: Workspace, repo: Repo) -> str:
    """Report on a clone that is already there; leave it alone."""
    path = ws.toplevel / repo.name
    branch = head_branch(path)
    if branch != repo.branch:
        warn(f"{repo.name}: on {branch or 'a detached HEAD'}, not the manifest's {repo.branch!r}; "
             f"leaving it alone (git -C {path} checkout {repo.branch} if that was not intended)")
        return "left alone (other branch)"
    if repo.submodules and (path / ".gitmodules").exists():
        status = git(path, ["submodule", "status", "--recursive"], toplevel_only=True).stdout
        if any(line.startswith("-") for line in status.splitlines()):
            init_submodules(path, repo.name)
            return "submodules initialised"
    return "present"


def refuse_stray_targets(ws: Workspace) -> None:
    """Before any clone: every repo's target is a clone, absent, or an empty dir; else refuse,
    naming each (a stray non-git ``top/pirate`` would stop the init half-way)."""
    stray = []
    for repo in ws.manifest.repos:
        path = ws.toplevel / repo.name
        if (path / ".git").exists():
            continue
        if path.is_symlink() or (path.exists() and (not path.is_dir() or any(path.iterdir()))):
            stray.append(str(path))
    if stray:
        raise Refused("toplevel.init cloned nothing: these exist but are not git clones:\n  " + "\n  ".join(stray)
                      + "\nMove them away and run toplevel.init again.")


def init_toplevel(ws: Workspace, build_venv=None) -> list[str]:
    """Clone missing repos, render dotfiles (said as it goes), build the venv; what changed."""
    if not ws.is_toplevel:
        raise Refused(f"toplevel.init runs in the toplevel ({ws.toplevel}), not in worktree {ws.root}")
    refuse_stray_targets(ws)
    changes = []
    for repo in ws.manifest.repos:
        path = ws.toplevel / repo.name
        if (path / ".git").exists():
            verify_git_dirs(ws, [repo.name])
            state = check_existing(ws, repo)
            if state != "present":
                changes.append(f"{repo.name}: {state}")
            continue
        clone_repo(ws, repo)
        changes.append(f"{repo.name}: cloned ({repo.branch})")
    for repo_dir in (ws.toplevel, *(ws.toplevel / repo.name for repo in ws.manifest.repos)):
        if commit_graph_written(repo_dir):
            changes.append(f"{ws.display(repo_dir)}: wrote its commit-graph")
    written = refresh_workspace_files(ws)
    changes += [f"wrote {p}" for p in written]
    summarize(ws, changes)
    if build_venv is not None:
        build_venv(ws)
    if ws.toplevel / ".envrc" in written:
        say(direnv_allow_hint(ws.toplevel))
    return changes


def direnv_allow_hint(checkout: Path) -> str:
    """The last line of a task that wrote ``checkout``'s ``.envrc``.  Approving it is yours to do, as
    for any ``.envrc`` (direnv's guard on what runs in your shell): chtop does not approve on your behalf."""
    return (f"next: direnv allow {shlex.quote(str(checkout))}    # approves the .envrc just written; until then your shell's "
            f"direnv says it is blocked")


def summarize(ws: Workspace, changes: list[str]) -> None:
    for line in changes:
        say(line)
    if not changes:
        say(f"toplevel {ws.toplevel}: nothing to do; all {len(ws.manifest.repos)} repos present and dotfiles current")
