"""Rebase-downs that stopped on a conflict, recorded on the host, so that the branch the user then
finishes by hand (``git rebase --continue``, as the conflict message says) is imported as the host's
own rewrite: no "rewritten inside" warning, no kept old tip.

A marker ``<group>/.chtop/rebases/<worktree>/<repo>.json`` (the group's state dir, never mounted in a
sandbox: the agent cannot write one) holds the branch's tip before the rebase and the integration
tip it was rebasing onto.  The rewrite the next import finds counts as that rebase finished when it
replaces exactly that old tip, descends from that integration tip, and carries the same series of
commits (author and subject, in order): a conflict's resolution changes a commit's content, never
which commits there are.  One that drops, adds or reorders a commit is no finished rebase, and its
old tip is kept as any other rewrite's.
"""

from __future__ import annotations

from pathlib import Path

from ..core import agentfile, atomic
from ..core.gitrun import git
from ..core.places import state_dir

SERIES_FORMAT = "%an%x00%ae%x00%s"


def marker_path(grouping: Path, worktree: str, repo: str) -> Path:
    return state_dir(grouping) / "rebases" / worktree / f"{repo or '@container'}.json"


def record_stopped(grouping: Path, worktree: str, repo: str, old: str | None, onto: str | None) -> None:
    """Remember that the rebase of ``worktree``'s branch in ``repo`` from ``old`` onto ``onto`` stopped."""
    import json

    if not old or not onto:
        return
    path = marker_path(grouping, worktree, repo)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic.write_atomic(path, json.dumps({"old": old, "onto": onto}) + "\n", mode=0o600)


def stopped_rebase(grouping: Path, worktree: str, repo: str) -> tuple[str, str] | None:
    """(old tip, integration tip) of the recorded stopped rebase, or None."""
    import json

    text = agentfile.read_text(marker_path(grouping, worktree, repo), limit=4096)
    try:
        data = json.loads(text) if text else None
        return (str(data["old"]), str(data["onto"])) if data else None
    except (ValueError, KeyError, TypeError):
        return None


def forget(grouping: Path, worktree: str, repo: str) -> None:
    marker_path(grouping, worktree, repo).unlink(missing_ok=True)


def finishes(shared: Path, old: str, got: str, stopped: tuple[str, str] | None) -> bool:
    """Whether ``got`` (a commit expression in ``shared``) replacing ``old`` is the recorded stopped
    rebase, finished: the same old tip, onto that integration tip, the same series of commits."""
    if stopped is None or stopped[0] != old:
        return False
    onto = stopped[1]
    if not git(shared, ["merge-base", "--is-ancestor", onto, got], check=False).ok:
        return False
    series = [git(shared, ["log", "--reverse", f"--format={SERIES_FORMAT}", tip, f"^{onto}"], check=False)
              for tip in (old, got)]
    return all(s.ok for s in series) and series[0].stdout == series[1].stdout
