"""The process in a session's tmux pane: ``python -m chtop_tasks.sessions.pane GROUP WORKTREE SESSION_ID``.

It runs the agent's sandbox (podman) on the pane's terminal, so the agent
is interactive and the user sees it on attach; meanwhile a thread watches
the agent's state (its hooks, else its screen), writes each change into
the host-side record and notifies on ``waiting``; when the agent ends it
records the exit status, notifies ``exited`` and ends the pane.

Its environment is the one ``session.start`` (or ``session.restore``) ran
with, handed over in a 0600 file in the group's state dir (never mounted in
a sandbox) that is deleted once read: the tmux server's own environment is
whatever the shell that first started it had.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from ..core.atomic import write_atomic
from ..core.errors import ChtopError
from ..notify import waiting
from ..proxy.control import hold_session_lease
from ..sandbox.agent_settings import HOOKED_AGENTS
from . import agent_state, notify, records, tmux

POLL_SECONDS = 1.0
KEEP_FROM_TMUX = ("TERM", "TMUX", "TMUX_PANE", "COLORTERM")


def adopt_environment(group: Path, worktree: str) -> None:
    """Take the starter's environment (keeping tmux's terminal variables), then delete the file."""
    path = records.env_path(group, worktree)
    try:
        env = json.loads(path.read_text())
    finally:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    kept = {k: os.environ[k] for k in KEEP_FROM_TMUX if k in os.environ}
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    os.environ.update(kept)


class Watcher(threading.Thread):
    """Polls the agent's state; records and announces each change."""

    def __init__(self, group: Path, record: records.Record):
        super().__init__(daemon=True)
        self.group = group
        self.record = record
        self.stopping = threading.Event()
        self.screen = agent_state.ScreenActivity()
        self.last = record.state
        self.state_file = agent_state.hook_state_path(Path(record.agent_home), record.session_id)
        self.socket = Path(record.tmux_socket)
        self.phone = waiting.for_session(record.worktree, record.agent)    # None without notify.toml

    def run(self) -> None:
        while not self.stopping.wait(POLL_SECONDS):
            try:
                self.step(time.time())
            except Exception as exc:  # noqa: BLE001 - watching must never end the agent
                print(f"chtop: state watcher: {exc}", file=sys.stderr, flush=True)

    def step(self, now: float) -> None:
        reported = agent_state.read_reported(self.state_file)
        text = tmux.capture_pane(self.socket, self.record.tmux_session)
        screen = self.screen.observe(text, now)
        state = agent_state.current_state(reported, self.record.started_at, screen,
                                          hooked=self.record.agent in HOOKED_AGENTS)
        if self.phone is not None:
            self.phone.observe(state, now, text)
        if state == "exited":        # the agent said it is ending; the host records the exit itself
            return
        if state != self.last:
            self.last = state
            records.update(self.group, self.record.worktree, self.record.session_id, state=state, since=now)
            save_screen(self.group, self.record)
            if state in notify.NOTIFY_STATES:
                notify.notify(self.socket, self.record.worktree, state, pane_fd=sys.stdout.fileno())


def save_screen(group: Path, record: records.Record) -> None:
    """Keep what the screen shows now (tmux's rendering, scrollback included) for session.log."""
    text = tmux.capture_history(Path(record.tmux_socket), record.tmux_session)
    if text is not None:
        write_atomic(records.screen_path(group, record.worktree), text, mode=0o600)


def finish(group: Path, record: records.Record, code: int, error: str = "") -> None:
    save_screen(group, record)
    records.update(group, record.worktree, record.session_id, status="exited", state="exited",
                   since=time.time(), exit_status=code, error=error)
    thread = notify.notify(Path(record.tmux_socket), record.worktree, "exited", code, pane_fd=sys.stdout.fileno())
    if thread is not None:
        thread.join(notify.NOTIFY_TIMEOUT)


def run(group: Path, worktree: str, session_id: str) -> int:
    from ..agents.registry import agent_request
    from ..sandbox import launch

    record = records.load(group, worktree)
    if record is None or record.session_id != session_id:
        print(f"chtop: no record of session {session_id} for {worktree}", file=sys.stderr)
        return 1
    try:
        adopt_environment(group, worktree)
    except (OSError, ValueError) as exc:
        message = f"the environment handed over by session.start is missing or broken ({exc})"
        print(f"error: {message}", file=sys.stderr, flush=True)
        finish(group, record, 1, message)
        return 1
    try:
        request = agent_request(record.agent, record.args, Path(record.root), interactive=True,
                                continue_=record.continue_, session=session_id)
    except ChtopError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        finish(group, record, exc.exit_code, str(exc))
        return exc.exit_code
    watcher = Watcher(group, record)

    def started(plan) -> None:
        records.update(group, worktree, session_id, container=plan.container_name, pane_pid=os.getpid())
        watcher.start()

    try:
        code = launch(request, before_run=started)
    except ChtopError as exc:
        code, error = exc.exit_code, str(exc)
    else:
        error = ""
    watcher.stopping.set()
    if watcher.is_alive():
        watcher.join(5)
    finish(group, record, code, error)
    return code


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m chtop_tasks.sessions.pane GROUP WORKTREE SESSION_ID", file=sys.stderr)
        return 2
    with hold_session_lease(Path(argv[0])):    # the group's proxy stays up while this runs
        return run(Path(argv[0]), argv[1], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
