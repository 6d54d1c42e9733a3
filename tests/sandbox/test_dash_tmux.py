"""inv dash end to end in a real terminal: tmux runs it, send-keys types, capture-pane reads the screen.

A real workspace, the real proxy and curl through it: rows show the branch
relations, a blocked request is held and shown, the allow-once key lets
that request through while the next one is blocked again, the diff pane
shows a committed change, a key hands the terminal to a task and the
dashboard comes back after, and (where chtop_tasks.sessions exists)
attaching an agent's session returns to the dashboard on detach.
"""

# ruff: noqa: F811  (pytest fixtures imported from other test modules are redefined as arguments)
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import eventually, require_tool
from proxy_helpers import HTTPSServer, free_port
from test_dash import busy_group  # noqa: F401  (fixture)

from chtop_tasks.dash import sessions_adapter
from chtop_tasks.proxy import approvals, control

pytestmark = pytest.mark.slow


SIZE = (200, 50)
HOLD_SECONDS = 15


class Tmux:
    """One private tmux server (its own socket, no config file) with one session of a fixed size.

    tmux's size for a detached session differs between versions and machines (its default-size, a
    resize just after the command starts): the window is set to SIZE by hand, and the command is
    let go only once tmux reports that size, so the program under test starts in a known terminal."""

    def __init__(self, base: Path, cwd: Path, command: str, size: tuple[int, int] = SIZE):
        require_tool("tmux")
        self.sock = str(base / "tmux.sock")
        go = base / "tmux.go"
        width, height = size
        self.run("new-session", "-d", "-s", "dash", "-x", str(width), "-y", str(height), "-c", str(cwd),
                 f"while [ ! -e {go} ]; do sleep 0.05; done; {command}")
        self.run("set-option", "-t", "dash", "-w", "window-size", "manual")
        self.run("resize-window", "-t", "dash", "-x", str(width), "-y", str(height))
        size = self.run("display-message", "-p", "-t", "dash", "#{window_width}x#{window_height}").strip()
        assert size == f"{width}x{height}", f"tmux made the window {size}, not {width}x{height}"
        go.touch()

    def run(self, *args) -> str:
        return subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", *args], capture_output=True,
                              text=True, check=True, stdin=subprocess.DEVNULL, timeout=30).stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "dash", *keys)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "dash")

    def wait(self, predicate, what: str, timeout: float = 120.0) -> str:
        def matching_screen():
            text = self.screen()
            return text if predicate(text) else None
        return eventually(matching_screen, what, timeout, interval=0.1, explain=lambda: f"the screen:\n{self.screen()}")

    def wait_text(self, text: str, timeout: float = 120.0) -> str:
        return self.wait(lambda s: text in s, repr(text), timeout)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", "kill-server"], capture_output=True, timeout=30)


def row(screen: str, name: str) -> str:
    return next((line for line in screen.splitlines() if line.strip().startswith(name + " ")
                 or f" {name} " in line[:30]), "")


def repo_cells(screen: str, name: str) -> list[str]:
    """The three repo cells of worktree ``name``'s row (clean ones: +ahead/-behind alone)."""
    words = row(screen, name).split()
    return words[words.index(name) + 1:][:3] if name in words else []


def curl_through(proxy_port: int, url: str) -> subprocess.Popen:
    return subprocess.Popen(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "--max-time", "60",
                             "-x", f"http://127.0.0.1:{proxy_port}", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def dash_env(busy_group, tmp_path, monkeypatch):
    g = busy_group
    require_tool("curl")
    www = tmp_path / "www"
    www.mkdir()
    (www / "hello.txt").write_text("hello through the proxy\n")
    server = HTTPSServer(www, {}, tls=False)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 plain.example.test\n")
    port = free_port()
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(port))
    monkeypatch.setenv("CHTOP_PROXY_HOSTS_FILE", str(hosts))
    # long enough that a slow screen still answers the first held request in time; the second one
    # waits all of it out
    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", str(HOLD_SECONDS))
    control.ensure_proxy(g.grouping, g.toplevel / "sandbox")
    env = " ".join(f"{k}={v}" for k, v in (("TERM", "xterm-256color"), ("COLORTERM", "truecolor")))
    tmux = Tmux(tmp_path, g.toplevel, f"env {env} {sys.executable} -m invoke dash --interval 0.5; sleep 600")
    try:
        yield g, tmux, port, server
    finally:
        tmux.close()
        control.stop_proxy(g.grouping)
        server.close()


def test_dash_in_tmux_rows_pending_allow_once_diff_and_a_task(dash_env):
    g, tmux, port, server = dash_env
    screen = tmux.wait(lambda s: "+1/-0" in row(s, "dev") and "*1" in row(s, "feat"), "the worktree rows")
    assert "+0/-1" in row(screen, "dev")                       # beta is behind kms
    tmux.wait_text("feature.txt")                              # dev is selected: its diff
    url = f"http://plain.example.test:{server.port}/hello.txt"
    first = curl_through(port, url)
    tmux.wait(lambda s: "plain.example.test" in s and "HELD" in s, "the held request")
    tmux.keys("p")
    tmux.wait_text("private ON")
    tmux.keys("o")
    out, err = first.communicate(timeout=30)
    assert out.endswith("\n200") and "hello through the proxy" in out, (out, err)
    tmux.wait_text("allow once")
    t0 = time.monotonic()
    out, _ = curl_through(port, url).communicate(timeout=30)     # the next one: held, then refused
    assert out.endswith("\n403") and "not on the allowlist" in out, out
    assert time.monotonic() - t0 >= HOLD_SECONDS - 0.5
    assert [(r["scope"], r["via"]) for r in approvals.read_decisions(g.grouping)] == [("once", "dash")]
    # full diff of the selected worktree
    tmux.keys("f")
    tmux.wait_text("+the dev feature")
    # rebase-down of the selected worktree (dev): the task's plan, confirmed, run, and back
    tmux.keys("r")
    plan = tmux.wait_text("run it? [y/N]")
    assert "rebase-down in" in plan and "1 new commit(s) on kms" in plan and "alpha: nothing to rebase" in plan
    tmux.keys("y")
    tmux.wait_text("press Enter to return to the dashboard", timeout=240)
    tmux.keys("Enter")
    tmux.wait(lambda s: repo_cells(s, "dev")[1:] == ["+1/-0", "+0/-0"], "dev rebased onto kms")
    # feat is dirty: the task's own refusal is shown, nothing runs
    tmux.keys("Down", "r")
    refusal = tmux.wait_text("refused (nothing was changed)")
    assert "uncommitted changes" in refusal and "alpha.txt" in refusal
    tmux.keys("n")
    tmux.wait(lambda s: "refused" not in s and "not run" in s, "the refusal dismissed")
    # a key that hands the terminal to a task (worktree.create), and back to the dashboard after
    tmux.keys("n")
    tmux.wait_text("new worktree name")
    tmux.keys("third", "Enter")
    done = tmux.wait_text("press Enter to return to the dashboard", timeout=240)
    assert "Worktree ready" in done and "git.rebase-down" not in done      # a clean screen for each task
    tmux.keys("Enter")
    tmux.wait(lambda s: row(s, "third") and "pending requests" in s, "the dashboard with the new row")
    assert (g.path("third", "alpha") / ".git").is_file()


def test_dash_in_tmux_at_80x24_shows_every_column_and_key(busy_group, tmp_path):
    """A real 80x24 terminal: every column header, the whole key line (naming Tab) and both panes."""
    g = busy_group
    tmux = Tmux(tmp_path, g.toplevel, f"env TERM=xterm-256color {sys.executable} -m invoke dash --interval 0.5; "
                                      "sleep 600", size=(80, 24))
    try:
        screen = tmux.wait(lambda s: "+1/-0" in row(s, "dev") and "feature.txt" in s, "the dev row and its diff")
        header = next(line for line in screen.splitlines() if "worktree" in line and "(container)" in line)
        assert header.split() == ["▊", "worktree", "(container)", "alpha", "beta", "agent", "req", "cpu", "mem"], header
        assert repo_cells(screen, "dev") == ["+0/-0", "+1/-0", "+0/-1"] and "*1" in row(screen, "feat")
        assert "pending requests" in screen and "diff of dev" in screen
        keys = " ".join(screen.split())
        assert "Up/Down: worktrees Tab: requests" in keys and "q quit" in keys and "f stat/full" in keys, screen
        tmux.keys("Tab")
        assert "▊ domain" not in screen                                  # the focused table's edge only
        after = tmux.wait(lambda s: "Up/Down: requests Tab: worktrees" in " ".join(s.split()), "the key line after Tab")
        assert "▊ domain" in after and "▊ worktree" not in after
        assert len(after.splitlines()) <= 24 and max(map(len, after.splitlines())) <= 80
    finally:
        tmux.close()


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return found


@pytest.mark.podman
def test_dash_in_tmux_attach_and_return(dash_env):
    """With the real sessions package: start the selected worktree's agent, attach, detach, and be back."""
    if not sessions_adapter.available():
        pytest.skip("chtop_tasks.sessions is not in this checkout (the dashboard shows no sessions without it)")
    g, tmux, _, _ = dash_env
    tmux.wait(lambda s: "+1/-0" in row(s, "dev"), "the dev row")
    tmux.keys("s")
    tmux.wait(lambda s: any(st in row(s, "dev") for st in sessions_adapter.LIVE_STATES), "a live session",
              timeout=300)
    session = sessions_adapter.session_of(g.grouping, "dev")
    argv = sessions_adapter.attach_argv(g.grouping, sessions_adapter.session_name(session))
    tmux.keys("a")
    tmux.wait(lambda s: "pending requests" not in s, "the attached session")
    pane_pid = int(tmux.run("display-message", "-p", "-t", "dash", "#{pane_pid}").strip())
    attached = [p for p in _descendants(pane_pid)
                if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[:len(argv)] == [a.encode() for a in argv]]
    assert attached, f"no process runs {argv}"
    os.kill(attached[0], 1)                                     # the attach client goes away: a detach
    tmux.wait(lambda s: "pending requests" in s and any(st in row(s, "dev")
                                                             for st in sessions_adapter.LIVE_STATES),
              "the dashboard again, the session still live")
    sessions_adapter.stop_session(g.grouping, sessions_adapter.session_name(session))
