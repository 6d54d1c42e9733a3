"""What the dashboard shows, gathered without any widget: worktrees, repos, sessions, sandboxes, requests.

``take_snapshot`` runs every repo probe of every worktree in ONE bounded
pool (the pool of ``git.status``), two git processes per repo (status and
ahead/behind; the branch and a rebase in progress are read from files), so
one refresh costs less than one ``inv worktree.list``.  It is called off the
UI thread (a Textual worker).  Sessions come from a provider (the sessions
package through ``sessions_adapter`` by default), sandbox load from podman
in ``sandbox_load`` (slower, refreshed less often).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core import agentfile, gitrun, runner
from ..core.errors import ChtopError
from ..core.fanout import fan_out
from ..core.gitprobe import (
    LISTING_TIMEOUT,
    REVIEW_DIFF_OPTS,
    REVIEW_ENV,
    REVIEW_GIT_OPTS,
    WORKTREE_DIFF_DRIVERS_OFF,
    WORKTREE_SUBMODULES,
    operation_in_progress,
)
from ..core.places import group_id
from ..gitloop.landing import review_marks
from ..proxy import approvals
from ..proxy.control import status as proxy_status
from ..proxy.logs import JSONL, net_dir, pending_item
from ..stores.quarantine import sync_worktree
from ..workspace.layout import Checkout, Workspace, checkout_problem, find_workspace
from ..workspace.venvstamp import venv_state
from ..workspace.worktrees import venv_note, worktree_roots
from . import sessions_adapter

SessionsProvider = Callable[[Path], list]


@dataclass
class RepoState:
    label: str                    # "(container)" or the repo's name
    branch: str | None            # None: detached HEAD
    integration: str
    ahead: int = 0
    behind: int = 0
    dirty: int = 0                # changed or untracked paths
    busy: str | None = None       # "rebase" or "merge" in progress
    problem: str | None = None    # missing checkout, git failure

    def cell(self, expected: str) -> str:
        """One table cell: the branch (when unexpected), +ahead/-behind, dirty (nothing when clean: four
        repos fit in 80 columns), rebase."""
        if self.problem:
            return f"! {self.problem}"
        parts = [] if self.branch == expected else [self.branch or "(detached)"]
        parts.append(f"+{self.ahead}/-{self.behind}")
        if self.dirty:
            parts.append(f"*{self.dirty}")
        if self.busy:
            parts.append(self.busy.upper())
        return " ".join(parts)


@dataclass
class WorktreeState:
    name: str
    root: Path
    repos: list[RepoState] = field(default_factory=list)
    session: dict | None = None
    pending: int = 0              # blocked requests from its socket waiting for a decision
    cpu: str = ""
    mem: str = ""
    problem: str | None = None
    venv: str = "complete"        # "incomplete": its build did not finish; "missing": none (--no-venv)
    venv_note: str = ""           # incomplete: what worktree.list says of it, with the command that builds it

    def name_cell(self) -> str:
        return name_cell(self.name, self.venv)


def name_cell(name: str, venv: str) -> str:
    """A worktree's name as its row shows it: marked ``!venv`` when its venv's build did not finish
    (a venv missing by choice, ``--no-venv``, is not marked)."""
    return f"{name} !venv" if venv == "incomplete" else name


@dataclass
class Snapshot:
    taken: float
    worktrees: list[WorktreeState]
    pending: list[dict]
    proxy_running: bool
    sessions_available: bool
    repo_labels: list[str]
    took: float = 0.0

    def worktree(self, name: str) -> WorktreeState | None:
        return next((w for w in self.worktrees if w.name == name), None)


# -- one repo, cheaply -----------------------------------------------------------------------------

def git_dir_of(checkout_dir: Path) -> Path:
    """The git dir of a checkout, read from its ``.git`` (a dir, or a ``gitdir:`` file): no process."""
    dot = checkout_dir / ".git"
    if dot.is_dir() and not dot.is_symlink():
        return dot
    text = (agentfile.read_text(dot, limit=4096) or "").strip()
    if not text.startswith("gitdir:"):
        raise ChtopError(f"{dot}: not a gitdir pointer")
    path = Path(text[len("gitdir:"):].strip())
    return path if path.is_absolute() else (checkout_dir / path).resolve()


def head_of(git_dir: Path) -> str | None:
    """The branch ``git_dir``'s HEAD names; None when detached (or HEAD is not a small regular file)."""
    head = (agentfile.read_text(git_dir / "HEAD", limit=4096) or "").strip()
    return head[len("ref: refs/heads/"):] if head.startswith("ref: refs/heads/") else None


def _git(checkout_dir: Path, args: list[str], timeout: float = 60, env: dict | None = None) -> runner.Result:
    """Host git through the one guarded runner (an agent's nested repo or submodule config never runs)."""
    return gitrun.git(checkout_dir, args, check=False, timeout=timeout, env=env)


def review_marks_of(ws: Workspace, checkout: Checkout) -> list[str]:
    """The diff pane's warning lines for what the branch changes (``landing.review_marks``); none
    where git cannot say (the pane shows git's own error below)."""
    try:
        return review_marks(ws.main_checkout_dir(checkout), ws.integration_branch(checkout),
                            f"refs/heads/{ws.name}", not checkout.name)
    except ChtopError:
        return []


def probe_repo(ws: Workspace, checkout: Checkout) -> RepoState:
    integ = ws.integration_branch(checkout)
    state = RepoState(checkout.label, None, integ)
    if not checkout.path.exists():
        state.problem = "missing"
        return state
    unsafe = checkout_problem(ws, checkout)      # a planted FIFO would hang git; a repointed .git, worse
    if unsafe:
        state.problem = unsafe
        return state
    try:
        gd = git_dir_of(checkout.path)
        state.branch, state.busy = head_of(gd), operation_in_progress(checkout.path, gd)
    except (OSError, ChtopError) as exc:
        state.problem = f"unreadable .git: {exc}"
        return state
    # no optional locks: the dashboard's polls never hold index.lock while the agent runs git there
    try:        # a FIFO planted deeper than checkout_problem looks fails this repo's row, after a bounded wait
        status = _git(checkout.path, ["--no-optional-locks", "status", WORKTREE_SUBMODULES, "--porcelain",
                                      "--untracked-files=normal"], timeout=LISTING_TIMEOUT)
        counts = _git(checkout.path, ["rev-list", "--left-right", "--count", f"{integ}...HEAD"])
    except ChtopError as exc:
        state.problem = str(exc).splitlines()[0]
        return state
    if not status.ok or not counts.ok:
        state.problem = (status if not status.ok else counts).error_tail(1) or "git failed"
        return state
    state.dirty = sum(1 for line in status.stdout.splitlines() if line.strip())
    state.behind, state.ahead = (int(x) for x in counts.stdout.split())
    return state


# -- the whole group -----------------------------------------------------------------------------

def feature_worktrees(top: Workspace) -> tuple[list[Workspace], list[WorktreeState]]:
    """The group's feature worktrees (in `git worktree list` order), and rows for broken ones."""
    good, broken = [], []
    for root in worktree_roots(top):
        try:
            good.append(find_workspace(root))
        except ChtopError as exc:
            broken.append(WorktreeState(root.name, root, problem=str(exc).splitlines()[0]))
    return good, broken


def import_quietly(wt: Workspace) -> None:
    """The agent's latest commits into the shared stores and the integration branches into the
    worktree (as every git task does first); a failure shows in the next task, not on this screen."""
    try:
        sync_worktree(wt)
    except ChtopError:
        pass


def probe_all(worktrees: list[Workspace]) -> dict[str, list[RepoState]]:
    """Every repo of every worktree, in one pool; results per worktree in manifest order."""
    fan_out(import_quietly, worktrees)
    jobs = [(wt, c) for wt in worktrees for c in wt.checkouts()]
    results = fan_out(lambda job: probe_repo(*job), jobs)
    out: dict[str, list[RepoState]] = {wt.name: [] for wt in worktrees}
    for (wt, _), state in zip(jobs, results, strict=True):
        out[wt.name].append(state)
    return out


class BlockedTail:
    """The proxy's blocked requests per (host:port, worktree), read incrementally from requests.jsonl.

    Items are ``logs.pending_item``s: ``spec`` is what an allow names (the
    host, with the port when it is not 443 or 80), so ``example.org`` and
    ``example.org:8443`` stay two rows and two decisions.

    Each call reads only the lines added since the last one (the log grows
    to 20 MiB before it rotates; re-reading it every refresh would cost more
    than all the git probes).  A rotation (new inode, or a shorter file)
    starts over from the rotated file.
    """

    def __init__(self, group_dir: Path):
        self.path = net_dir(group_dir) / JSONL
        self.items: dict[tuple, dict] = {}
        self._inode = None
        self._offset = 0

    def read(self) -> list[dict]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return list(self.items.values())
        if st.st_ino != self._inode or st.st_size < self._offset:
            self.items, self._inode, self._offset = {}, st.st_ino, 0
            self._add_file(self.path.with_name(JSONL + ".1"), 0)
        self._offset = self._add_file(self.path, self._offset)
        return list(self.items.values())

    def _add_file(self, path: Path, offset: int) -> int:
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return offset
        end = data.rfind(b"\n") + 1           # a line still being written waits for the next read
        for line in data[:end].splitlines():
            if b'"blocked"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("decision") == "blocked" and rec.get("host"):
                fresh = pending_item(rec["host"], rec.get("port"), rec.get("worktree"))
                item = self.items.setdefault((fresh["spec"], fresh["worktree"]), fresh)
                item["count"] += 1
                item["last"] = max(item["last"], rec.get("time", 0))
        return offset + end


def take_snapshot(top: Workspace, sessions: SessionsProvider | None = None,
                  load: dict[str, tuple[str, str]] | None = None, blocked: BlockedTail | None = None) -> Snapshot:
    """Everything the dashboard shows of ``top``'s group (sandbox load passed in, it is slower)."""
    t0 = time.perf_counter()
    sessions_available = sessions is not None or sessions_adapter.available()
    sessions = sessions or sessions_adapter.list_sessions
    worktrees, broken = feature_worktrees(top)
    repos = probe_all(worktrees)
    info = proxy_status(top.grouping)
    pending = approvals.pending_requests(top.grouping, top.policy_dir, info or {},
                                         None if blocked is None else blocked.read())
    by_worktree = latest_sessions(sessions(top.grouping))
    rows = []
    for wt in worktrees:
        row = WorktreeState(wt.name, wt.root, repos[wt.name], by_worktree.get(wt.name))
        row.pending = sum(1 for p in pending if p["worktree"] == wt.name)
        row.cpu, row.mem = (load or {}).get(wt.name, ("", ""))
        row.venv = venv_state(wt.venv_dir)
        row.venv_note = venv_note(wt).strip() if row.venv == "incomplete" else ""
        rows.append(row)
    labels = [c.label for c in top.checkouts()]
    return Snapshot(time.time(), rows + broken, pending, info is not None, sessions_available, labels,
                    time.perf_counter() - t0)


def latest_sessions(sessions: list[dict]) -> dict[str, dict]:
    """Per worktree, its live session if any, else its newest one."""
    best: dict[str, dict] = {}
    for s in sessions:
        wt = s.get("worktree")
        if not wt:
            continue
        rank = (s.get("state") in sessions_adapter.LIVE_STATES, s.get("since") or 0)
        old = best.get(wt)
        if old is None or rank > (old.get("state") in sessions_adapter.LIVE_STATES, old.get("since") or 0):
            best[wt] = s
    return best


def describe_session(session: dict | None, now: float | None = None) -> tuple[str, str]:
    """(state, since) cells: ``waiting``, ``3m`` (exited shows its status)."""
    if not session:
        return "-", ""
    state = str(session.get("state", "?"))
    if state == "exited" and session.get("exit_status") is not None:
        state += f" ({session['exit_status']})"
    since = session.get("since")
    return state, age(since, now) if since else ""


def age(since: float, now: float | None = None) -> str:
    secs = max(0, int((now or time.time()) - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


# -- sandbox load (podman) -----------------------------------------------------------------------

LABEL = "chtop"


@dataclass
class SandboxLoad:
    """(CPU %, memory) per worktree with a running sandbox; ``unavailable``: why those cells say n/a."""

    by_worktree: dict[str, tuple[str, str]] = field(default_factory=dict)
    unavailable: str = ""


NO_STATS = "n/a"


def sandbox_load(group_dir: Path) -> SandboxLoad:
    """Per worktree: (CPU %, memory) of its running sandboxes, from one `podman ps` and one `podman stats`.

    Empty when podman is missing or no sandbox runs (blank cells); when
    ``podman stats`` fails (rootless podman on cgroup v1 has none) the
    running ones say n/a and ``unavailable`` says why.
    """
    if shutil.which("podman") is None:
        return SandboxLoad()
    ps, _ = _podman(["ps", "--filter", f"label={LABEL}.group_id={group_id(group_dir)}", "--format", "json"])
    worktree_of = {}
    for item in ps or []:
        labels = item.get("Labels") or {}
        worktree_of[item.get("Id", "")[:12]] = labels.get(f"{LABEL}.worktree", "?")
    if not worktree_of:
        return SandboxLoad()
    stats, error = _podman(["stats", "--no-stream", "--format", "json", *worktree_of])
    if stats is None:
        return SandboxLoad({wt: (NO_STATS, NO_STATS) for wt in worktree_of.values()}, no_stats_reason(error))
    out: dict[str, tuple[str, str]] = {}
    for item in stats:
        key = str(_field(item, "id", "ID", "ContainerID"))[:12]
        wt = worktree_of.get(key)
        if wt is not None:
            out[wt] = (str(_field(item, "cpu_percent", "CPU", "CPUPerc")),
                       str(_field(item, "mem_usage", "MemUsage")).split("/")[0].strip())
    return SandboxLoad(out)


def no_stats_reason(error: str) -> str:
    """Why cpu/mem say n/a: podman's own words, and what they mean where they are the cgroup v1 ones."""
    why = f"cpu/mem n/a: podman stats failed ({error or 'no output'})"
    if "cgroups v2" in error or "cgroupv2" in error:
        why += "; rootless podman measures sandboxes only on cgroup v2 (this host has v1), they run all the same"
    return why


def _field(item: dict, *names):
    for name in names:
        if name in item:
            return item[name]
    return ""


def _podman(args: list[str]) -> tuple[list | None, str]:
    """podman's JSON, or None and its last error line."""
    try:
        result = runner.run(["podman", *args], check=False, quiet=True, timeout=20)
    except ChtopError as exc:
        return None, str(exc).splitlines()[0]
    if not result.ok:
        return None, result.error_tail(1).removeprefix("Error: ")
    try:
        return json.loads(result.stdout or "[]"), ""
    except ValueError:
        return None, "its output is not JSON"


# -- the diff preview ----------------------------------------------------------------------------

def worktree_diff(ws: Workspace, full: bool = False) -> str:
    """Per repo: its changes against the integration branch it forked from (committed and not)."""
    def one(checkout: Checkout) -> str:
        if not checkout.path.exists():
            return f"==== {checkout.label}: missing"
        integ = ws.integration_branch(checkout)
        args = [*REVIEW_GIT_OPTS, "diff", WORKTREE_SUBMODULES, *WORKTREE_DIFF_DRIVERS_OFF, *REVIEW_DIFF_OPTS,
                "--merge-base", integ] + ([] if full else ["--stat"])
        result = _git(checkout.path, args, env=REVIEW_ENV)
        body = (result.stdout if result.ok else result.error_tail(3)).rstrip()
        marks = "".join(f"{line}\n" for line in review_marks_of(ws, checkout))
        return f"==== {checkout.label}  (vs {integ})\n{marks}{body or '(no changes)'}"
    return "\n\n".join(fan_out(one, ws.checkouts()))
