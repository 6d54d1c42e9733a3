"""The dashboard's other hosts: one background poller per host, and what its rows show.

Each recorded host gets its own thread that asks the host's chtop, over ssh, for its worktrees
(``worktree.list --json``), sessions (``session.list --json``) and pending requests
(``net.pending --json``), every answer checked against its schema (``hosts.answers``), each
call bounded by the host timeout (``host_timeout`` in ``config.toml``).  A host that does not
answer, or answers nonsense, is marked so (its rows greyed out, the reason shown) and asked
again later; the other hosts and this machine's rows keep refreshing, since no host waits for
another.  A second thread per host keeps a watcher attached to its proxy (``net.hold``), so the
requests blocked there are held open until a key here answers them (``net.allow`` there).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ..core.errors import ChtopError
from ..hosts import approvals as host_approvals
from ..hosts import fleet
from ..hosts.answers import BadAnswer
from ..hosts.records import Host
from ..hosts.ssh import Unreachable
from . import model

POLL_SECONDS = 2.0           # between one host's answers
RETRY_SECONDS = 5.0          # after a host failed to answer (or its net.hold failed)


@dataclass
class RemoteState:
    """One host as last asked: its worktrees, sessions and pending requests, or why not."""
    host: Host
    asked: bool = False           # False until the first answer (or failure) came back
    error: str = ""               # "did not answer within ...", "refused its answer: ..." or "its chtop failed: ..."
    worktrees: list = field(default_factory=list)
    sessions: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    took: float = 0.0
    at: float = 0.0

    @property
    def reachable(self) -> bool:
        return self.asked and not self.error


def poll_host(host: Host) -> RemoteState:
    """Ask ``host`` once (its three questions at once); a failure of any part keeps nothing of its
    answers (only why)."""
    t0 = time.perf_counter()
    state = RemoteState(host, asked=True)
    asks = (lambda: fleet.ask_worktrees(host, quiet=True), lambda: fleet.ask_sessions(host, quiet=True),
            lambda: host_approvals.ask_pending(host, quiet=True))
    try:                              # at once, over the host's one shared connection
        state.worktrees, state.sessions, pending = ask_at_once(asks)
        state.pending = [dict(item, remote=host.name) for item in pending]
    except BadAnswer as exc:
        state = RemoteState(host, asked=True, error=f"refused its answer: {str(exc).splitlines()[0]}")
    except Unreachable as exc:        # "did not answer within 5 s (ssh gpu1: ...)": the row names the host
        state = RemoteState(host, asked=True, error=str(exc).splitlines()[0].removeprefix(f"{host.name}: "))
    except ChtopError as exc:         # a command failed there
        state = RemoteState(host, asked=True, error=f"its chtop failed: {str(exc).splitlines()[0]}")
    state.took, state.at = time.perf_counter() - t0, time.time()
    return state


def ask_at_once(asks) -> list:
    """Each of ``asks`` called in its own thread (they wait on the host, not on our CPUs: a pool
    of the CPU count would run a third one after the first two, and a host that does not answer
    would take twice its bound); their results in order, the first failure in order raised."""
    with ThreadPoolExecutor(max_workers=len(asks), thread_name_prefix="chtop-dash-ask") as pool:
        futures = [pool.submit(ask) for ask in asks]
        return [f.result() for f in futures]


class HostPoller:
    """A thread asking one host every ``interval`` seconds, ``on_update`` called with each state."""

    def __init__(self, host: Host, on_update: Callable[[RemoteState], None], interval: float = POLL_SECONDS,
                 hold: bool = True):
        self.host, self.on_update, self.interval, self.hold = host, on_update, interval, hold
        self.state = RemoteState(host)
        self._stop, self._now = threading.Event(), threading.Event()
        self._threads = [threading.Thread(target=self._poll, name=f"chtop-dash-{host.name}", daemon=True)]
        if hold:
            self._threads.append(threading.Thread(target=self._hold, name=f"chtop-dash-hold-{host.name}",
                                                  daemon=True))

    def start(self) -> "HostPoller":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._now.set()

    def poke(self) -> None:
        """Ask again now (after a decision), not at the next interval."""
        self._now.set()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.state = poll_host(self.host)
            if self._stop.is_set():
                return
            self.on_update(self.state)
            self._now.wait(self.interval if self.state.reachable else RETRY_SECONDS)
            self._now.clear()

    def _hold(self) -> None:
        while not self._stop.is_set():
            try:
                host_approvals.hold_there(self.host)
            except ChtopError:             # no proxy there (yet), or the host is away: try again later
                self._stop.wait(RETRY_SECONDS)


class Fleet:
    """Every host's poller; ``states()`` is what the tables show of the other hosts."""

    def __init__(self, hosts: list[Host], on_update: Callable[[RemoteState], None],
                 interval: float = POLL_SECONDS, hold: bool = True):
        self.pollers = {h.name: HostPoller(h, on_update, interval, hold) for h in hosts}

    def start(self) -> "Fleet":
        for poller in self.pollers.values():
            poller.start()
        return self

    def stop(self) -> None:
        for poller in self.pollers.values():
            poller.stop()

    def poke(self, name: str) -> None:
        if name in self.pollers:
            self.pollers[name].poke()

    def states(self) -> list[RemoteState]:
        return [p.state for p in self.pollers.values()]


# -- rows --------------------------------------------------------------------------------------

@dataclass
class RemoteRow:
    """A selected row of another host: what its keys act on (there, through the host's own tasks)."""
    host: Host
    worktree: str                 # "" on the row that says why the host did not answer
    session: dict | None = None   # its latest session, as the host answered
    error: str = ""               # why the host has no rows now


def row_of(state: RemoteState, worktree: str) -> RemoteRow:
    """The row ``HOST:worktree`` of ``state`` (its session from the host's last answer)."""
    if not state.reachable:
        return RemoteRow(state.host, "", error=state.error or "not asked yet")
    known = {wt["name"] for wt in state.worktrees}
    if worktree not in known:
        return RemoteRow(state.host, "", error=f"no worktree {worktree!r} in its last answer")
    return RemoteRow(state.host, worktree, model.latest_sessions(state.sessions).get(worktree))


def repo_cell(repo: dict, expected: str) -> str:
    """A host's repo record as the local cells show one (``RepoState.cell``)."""
    return model.RepoState(repo["repo"], repo["branch"], repo["integration"], repo["ahead"], repo["behind"],
                           int(repo["dirty"]), problem=repo["problem"]).cell(expected)


def worktree_rows(state: RemoteState, labels: list[str], now: float) -> list[tuple[str, list[str]]]:
    """(key, cells) per worktree of the host: host, name, a cell per repo label, agent, req, cpu, mem;
    one row saying why when the host is unreachable or not yet asked."""
    name = state.host.name
    blank = [""] * len(labels)
    if not state.asked:
        return [(f"{name}:", [name, "(asking ...)", *blank, "", "", "", ""])]
    if state.error:
        return [(f"{name}:", [name, state.error, *blank, "", "", "", ""])]
    sessions = model.latest_sessions(state.sessions)
    rows = []
    for wt in state.worktrees:
        by_repo = {r["repo"]: repo_cell(r, wt["name"]) for r in wt["repos"]}
        cells = [f"! {wt['problem']}"] + blank[1:] if wt["problem"] else [by_repo.get(label, "") for label in labels]
        agent = " ".join(filter(None, model.describe_session(sessions.get(wt["name"]), now)))
        pending = sum(1 for p in state.pending if p["worktree"] == wt["name"])
        rows.append((f"{name}:{wt['name']}", [name, model.name_cell(wt["name"], wt["venv"]), *cells, agent, str(pending or ""), "", ""]))
    return rows


def status_part(state: RemoteState) -> str:
    if not state.asked:
        return f"{state.host.name} asking"
    return f"{state.host.name} {'UNREACHABLE' if state.error.startswith('did not answer') else 'BAD ANSWER'}" \
        if state.error else f"{state.host.name} {state.took * 1000:.0f} ms"
