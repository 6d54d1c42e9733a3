"""inv dash at the unit level: the data layer on a real workspace, and the app under Textual's pilot."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest
from proxy_helpers import EchoServer, free_port, read_head
from textual.widgets import DataTable

from chtop_tasks.dash import model
from chtop_tasks.dash.app import DashApp
from chtop_tasks.proxy import approvals, control
from chtop_tasks.workspace.layout import find_workspace
from chtop_tasks.workspace.worktrees import create_worktree


class FakeSessions:
    """The one stand-in: a sessions provider (chtop_tasks.sessions is not in this branch)."""

    def __init__(self, sessions):
        self.sessions = sessions
        self.calls = 0

    def __call__(self, group_dir):
        self.calls += 1
        return list(self.sessions)


@pytest.fixture
def busy_group(with_dev):
    """dev: alpha 1 ahead, beta 1 behind; feat: dirty alpha (a tracked file changed, which
    rebase-down refuses)."""
    g = with_dev
    create_worktree(find_workspace(g.toplevel), "feat")
    g.commit(g.path("dev", "alpha"), "feature.txt", "the dev feature\n", "dev: add feature.txt")
    g.push_upstream_commit("beta", "upstream.txt", "moved on\n")
    (g.path("feat", "alpha", "alpha.txt")).write_text("line 1\nwip\n")
    return g


def top_of(g):
    return find_workspace(g.toplevel)


def test_snapshot_has_the_branch_relations_and_session_states(busy_group):
    g = busy_group
    now = time.time()
    fake = FakeSessions([
        {"worktree": "dev", "agent": "claude", "state": "exited", "since": now - 900, "exit_status": 1, "pending": 0},
        {"worktree": "dev", "agent": "claude", "state": "waiting", "since": now - 125, "exit_status": None,
         "pending": 1},
    ])
    snap = model.take_snapshot(top_of(g), fake)
    assert [w.name for w in snap.worktrees] == ["dev", "feat"]
    assert snap.repo_labels == ["(container)", "alpha", "beta"]
    dev, feat = snap.worktrees
    cells = {r.label: r.cell("dev") for r in dev.repos}
    assert cells == {"(container)": "+0/-0", "alpha": "+1/-0", "beta": "+0/-1"}
    assert [r.dirty for r in feat.repos] == [0, 1, 0]
    assert feat.repos[1].cell("feat") == "+0/-0 *1"
    assert model.describe_session(dev.session, now) == ("waiting", "2m")      # the live one wins
    assert feat.session is None and model.describe_session(None) == ("-", "")
    assert snap.sessions_available and fake.calls == 1


def test_snapshot_sees_a_rebase_in_progress_and_an_unexpected_branch(busy_group):
    g = busy_group
    alpha = g.path("dev", "alpha")
    g.commit(g.toplevel / "alpha", "feature.txt", "conflicting\n", "upstream: feature.txt too")
    from conftest import git

    from chtop_tasks.stores.quarantine import sync_worktree
    sync_worktree(find_workspace(g.path("dev")))   # dev's own copy of main, refreshed as every task does
    git(alpha, "rebase", "main", check=False)                                # stops on the conflict
    git(g.path("feat", "beta"), "checkout", "-q", "-b", "side")
    snap = model.take_snapshot(top_of(g), FakeSessions([]))
    dev, feat = snap.worktrees
    assert dev.repos[1].busy == "rebase" and "REBASE" in dev.repos[1].cell("dev")
    assert feat.repos[2].cell("feat").startswith("side ")


def test_snapshot_sees_a_cherry_pick_halfway_and_shows_a_planted_marker_as_a_problem(busy_group):
    g = busy_group
    from conftest import git

    beta_gd = Path(git(g.path("feat", "beta"), "rev-parse", "--absolute-git-dir").strip())
    (beta_gd / "CHERRY_PICK_HEAD").write_text("0" * 40 + "\n")
    alpha_gd = Path(git(g.path("dev", "alpha"), "rev-parse", "--absolute-git-dir").strip())
    (alpha_gd / "rebase-merge").symlink_to(g.base / "nowhere")       # the agent's link, dangling
    dev, feat = model.take_snapshot(top_of(g), FakeSessions([])).worktrees
    assert feat.repos[2].busy == "cherry-pick"
    assert dev.repos[1].problem.endswith("rebase-merge")               # shown as the agent's link, not followed


def test_diff_preview_shows_the_committed_change(busy_group):
    dev = find_workspace(busy_group.path("dev"))
    stat = model.worktree_diff(dev)
    assert "==== alpha  (vs main)" in stat and "feature.txt | 1 +" in stat
    assert "==== beta  (vs kms)\n(no changes)" in stat                        # behind is not a change
    assert "+the dev feature" in model.worktree_diff(dev, full=True)


async def wait_for(pilot, condition, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


def cell_texts(table) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


@contextlib.asynccontextmanager
async def dash_with_rows(g, sessions=None, size=(180, 45)):
    """The dash on ``g``'s toplevel (sessions from ``sessions``, else none; no request holds, no sandbox
    load), once its worktrees table shows both worktrees: (app, pilot, table)."""
    app = DashApp(top_of(g), sessions=sessions if sessions is not None else FakeSessions([]), refresh_seconds=0.5,
                  hold_requests=False, sandbox_load=False)
    async with app.run_test(size=size) as pilot:
        table = app.query_one("#worktrees")
        await wait_for(pilot, lambda: table.row_count == 2, what="two rows")
        yield app, pilot, table


def test_app_shows_rows_sessions_and_diff(busy_group):
    g = busy_group
    fake = FakeSessions([{"worktree": "feat", "agent": "claude", "state": "working", "since": time.time() - 30,
                          "exit_status": None, "pending": 0}])

    async def scenario():
        async with dash_with_rows(g, sessions=fake) as (app, pilot, table):
            rows = cell_texts(table)
            assert rows[0][:4] == ["dev", "+0/-0", "+1/-0", "+0/-1"]
            assert rows[1][0] == "feat" and rows[1][4].startswith("working ") and rows[1][4].endswith("s")
            diff = app.query_one("#diff")
            await wait_for(pilot, lambda: "feature.txt" in str(diff.render()), what="the diff of dev")
            await pilot.press("f")
            await wait_for(pilot, lambda: "+the dev feature" in str(diff.render()), what="the full diff")
            await pilot.press("down")
            await wait_for(pilot, lambda: "feature.txt" not in str(diff.render())
                           and "feat" in str(app.query_one("#diff-title").render()), what="feat's diff")
            app.save_screenshot("pilot.svg", str(g.base))
        assert (g.base / "pilot.svg").read_text().startswith("<svg")

    asyncio.run(scenario())


def test_a_worktree_whose_venv_build_did_not_finish_is_marked_with_the_command_that_rebuilds_it(busy_group):
    """A venv with a python but no completion stamp (a build interrupted by Ctrl-C, or one that failed)
    is marked in its row; the pane names the command that builds it.  No venv at all (``--no-venv``)
    is the user's choice: its row and pane stay plain."""
    g = busy_group
    venv_bin = g.path("dev", ".venv", "bin")
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to("/usr/bin/python3")
    snap = model.take_snapshot(top_of(g), FakeSessions([]))
    assert [w.venv for w in snap.worktrees] == ["incomplete", "missing"]

    async def scenario():
        async with dash_with_rows(g) as (app, pilot, table):
            assert [row[0] for row in cell_texts(table)] == ["dev !venv", "feat"]
            diff = app.query_one("#diff")
            await wait_for(pilot, lambda: "feature.txt" in str(diff.render()), what="the diff of dev")
            shown = str(diff.render())
            assert "venv incomplete" in shown and f"inv venv.build --workdir {g.path('dev')}" in shown
            await pilot.press("down")
            await wait_for(pilot, lambda: "feat" in str(app.query_one("#diff-title").render()), what="feat's diff")
            assert "venv" not in str(diff.render())

    asyncio.run(scenario())


def test_an_older_slower_diff_answer_never_overwrites_the_newer_one(busy_group, monkeypatch):
    """The stat diff asked for first answers only after ``f`` asked for the full one and it is shown:
    the pane keeps the full diff (a thread worker is not stopped by a newer request)."""
    g = busy_group
    stat_may_answer, real_diff = threading.Event(), model.worktree_diff

    def diff_with_a_slow_stat(ws, full=False):
        if not full:
            assert stat_may_answer.wait(60), "the test never let the stat diff answer"
        return real_diff(ws, full)

    monkeypatch.setattr(model, "worktree_diff", diff_with_a_slow_stat)

    async def scenario():
        app = DashApp(top_of(g), sessions=FakeSessions([]), refresh_seconds=0.5, hold_requests=False,
                      sandbox_load=False)
        answers = []
        shown = app.show_diff
        app.show_diff = lambda *args: (answers.append(args), shown(*args))
        async with app.run_test(size=(180, 45)) as pilot:
            table = app.query_one("#worktrees")
            await wait_for(pilot, lambda: table.row_count == 2, what="two rows")
            await pilot.press("f")
            diff = app.query_one("#diff")
            await wait_for(pilot, lambda: "+the dev feature" in str(diff.render()), what="the full diff")
            stat_may_answer.set()
            await wait_for(pilot, lambda: len(answers) >= 2, what="the stat diff's late answer")
            await pilot.pause(0.2)
            assert "+the dev feature" in str(diff.render()), f"the late stat answer replaced the full diff:\n{diff.render()}"

    try:
        asyncio.run(scenario())
    finally:
        stat_may_answer.set()


def test_answers_that_come_back_while_the_app_closes_fill_nothing_and_fail_no_worker(busy_group):
    """A refresh, load or diff answer that a worker hands over after the app's widgets are gone
    (the app closing: a full run once saw NoMatches('#worktrees') fail the refresh worker)."""
    g = busy_group

    async def scenario():
        async with dash_with_rows(g) as (app, pilot, table):
            snap, asked = app.snapshot, app._diff_asked
            for widget in list(app.screen.children):
                await widget.remove()
            assert not app.query("#worktrees")
            app.show_snapshot(snap)             # none of these may raise now
            app.show_load(model.sandbox_load(top_of(g).grouping))
            app.show_diff("dev", "late text", asked)
            app.say("late message")
            assert app.selected_name() is None

    asyncio.run(scenario())


def unseen_parts(app) -> list[str]:
    """What of the screen is cut: a widget past the screen's edge, a table wider than its pane (its
    columns scrolled off), a text taller than its widget."""
    screen = app.screen.region
    cut = []
    for widget in app.screen.query("DataTable, Static"):
        if not widget.display or not widget.parent.display:
            continue
        if not screen.contains_region(widget.region):
            cut.append(f"#{widget.id} at {widget.region} is off the screen {screen}")
        if isinstance(widget, DataTable) and widget.virtual_size.width > widget.scrollable_content_region.width:
            cut.append(f"#{widget.id} is {widget.virtual_size.width} wide in {widget.scrollable_content_region.width}")
        if widget.id in ("keys", "message", "alert", "status", "pending-title", "load-note") and \
                widget.get_content_height(widget.size, widget.size, widget.size.width) > widget.content_size.height:
            cut.append(f"#{widget.id}'s text is cut: {widget.render()}")
    return cut


def test_at_80x24_every_column_and_key_shows_and_the_footer_names_tab(busy_group):
    g = busy_group
    fake = FakeSessions([{"worktree": "feat", "agent": "claude", "state": "exited", "since": time.time() - 4000,
                          "exit_status": 1, "pending": 0}])

    async def scenario():
        async with dash_with_rows(g, sessions=fake, size=(80, 24)) as (app, pilot, table):
            await wait_for(pilot, lambda: "feature.txt" in str(app.query_one("#diff").render()), what="dev's diff")
            app.show_load(model.SandboxLoad({"dev": ("n/a", "n/a")}, model.no_stats_reason(
                "stats is not supported in rootless mode without cgroups v2")))     # podman's words (see below)
            app.refresh_data()
            await wait_for(pilot, lambda: cell_texts(table)[0][-2:] == ["n/a", "n/a"], what="dev's n/a load")
            note = str(app.query_one("#load-note").render())
            assert note.startswith("cpu/mem n/a: podman stats failed (stats is not supported") and "cgroup v2" in note
            app.say("no request for a-rather-long-host-name.example.org on worktree dev's socket is held right now, "
                    "so there is nothing to allow once. The proxy holds blocked requests only while net.watch or "
                    "the dash is attached")
            await pilot.pause(0.3)
            assert unseen_parts(app) == [], "\n".join(unseen_parts(app))
            assert [str(c.label) for c in table.columns.values()] == [
                "worktree", "(container)", "alpha", "beta", "agent", "req", "cpu", "mem"]
            assert cell_texts(table)[1][4] == "exited (1) 1h"
            keys = str(app.query_one("#keys").render())
            assert "Up/Down: worktrees  Tab: requests" in keys and "q quit" in keys
            assert app.focused.id == "worktrees"
            await pilot.press("tab")
            await wait_for(pilot, lambda: "Up/Down: requests  Tab: worktrees" in str(app.query_one("#keys").render()),
                           what="the key line after Tab")
            assert app.focused.id == "pending"
            assert [app.query_one("#pending").styles.border_left[0], table.styles.border_left[0]] == [
                "tall", "blank"]                                           # the focused table's edge shows
    asyncio.run(scenario())


def test_at_80x24_the_shipped_manifests_repos_fit_dropping_columns_in_the_stated_order(tmp_path):
    """With the shipped manifest's repos (pipmake, ksgpu, pirate) and worktrees a bit behind, the
    worktrees table fits 80 columns without a sideways scrollbar: mem, then cpu, then req give way,
    never a repo or the agent; at 200x50 every column shows; the status line fits either way."""
    from conftest import build_group, git, make_sub_remote

    from chtop_tasks.workspace.toplevel import init_toplevel

    repos = [("pipmake", "main"), ("ksgpu", "kms"), ("pirate", "kms")]
    template = tmp_path / "template"
    template.mkdir()
    for name, branch in repos:
        make_sub_remote(template, name, branch)
    g = build_group(tmp_path / "work", template, repos)
    init_toplevel(find_workspace(g.toplevel))
    for name in ("feature-one", "feature-two"):
        create_worktree(find_workspace(g.toplevel), name)
    for repo, _ in repos:
        for n in range(12):
            g.push_upstream_commit(repo, f"up{n}.txt", f"{n}\n")
        (g.path("feature-one", repo, f"wip-{repo}.txt")).write_text("wip\n")
        git(g.path("feature-one", repo), "add", f"wip-{repo}.txt")
    fake = FakeSessions([{"worktree": "feature-two", "agent": "claude", "state": "waiting", "since": time.time() - 4000,
                          "pending": 3}])

    async def scenario(size):
        async with dash_with_rows(g, sessions=fake, size=size) as (app, pilot, table):
            app.show_load(model.SandboxLoad({"feature-two": ("12.5%", "1.2GiB / 24GiB")}, ""))
            app.refresh_data()
            await pilot.pause(0.5)
            assert unseen_parts(app) == [], "\n".join(unseen_parts(app))
            return [str(c.label) for c in table.columns.values()]

    narrow = asyncio.run(scenario((80, 24)))
    assert narrow[:5] == ["worktree", "(container)", "pipmake", "ksgpu", "pirate"] and "agent" in narrow, narrow
    dropped = [c for c in ("mem", "cpu", "req") if c not in narrow]
    assert dropped and dropped == ["mem", "cpu", "req"][:len(dropped)], narrow      # in the stated order
    assert asyncio.run(scenario((200, 50)))[-4:] == ["agent", "req", "cpu", "mem"]


@pytest.mark.podman
@pytest.mark.slow
def test_sandbox_load_of_a_real_rootless_sandbox_has_numbers_or_says_why_not(remote_template):
    """The dash's podman probe as the workspace's (unprivileged) owner, one sandbox running in dev:
    cpu/mem numbers where podman has them (cgroup v2), else n/a and podman's reason (rootless on v1)."""
    from sandbox_helpers import as_owner_python, user_group_cm
    from test_first_hour_sandbox import inv_argv, kill_sandboxes, start_in_background, wait_listed

    with user_group_cm(remote_template) as g:
        bg = start_in_background(g, inv_argv(g, "sbox.run", "--", "sleep", "120"), g.dev)
        try:
            wait_listed(g, inv_argv(g, "sbox.ps"), g.toplevel, "chtop-dev-run-", timeout=120)
            probe = as_owner_python(g, "import json; from pathlib import Path; from chtop_tasks.dash import "
                                       f"model; load = model.sandbox_load(Path({str(g.grouping)!r})); "
                                       "print(json.dumps([load.by_worktree, load.unavailable]))\n"
                                       "import os; print(os.path.exists('/sys/fs/cgroup/cgroup.controllers'))")
        finally:
            bg.kill()
            bg.wait()
            kill_sandboxes(g, "chtop.worktree=dev")
    assert probe.returncode == 0, probe.stderr
    first, second = probe.stdout.splitlines()
    by_worktree, unavailable = json.loads(first)
    if second == "False":                                   # cgroup v1 (these machines): no stats rootless
        assert by_worktree == {"dev": ["n/a", "n/a"]}
        assert unavailable.startswith("cpu/mem n/a: podman stats failed (") and "cgroup v2" in unavailable
    else:
        assert unavailable == "" and by_worktree["dev"][0].endswith("%"), (by_worktree, unavailable)


def holding_proxy(g, monkeypatch, names: list[str], hold_seconds: int) -> int:
    """The group's real proxy on a free port, ``names`` resolving to 127.0.0.1, holding blocked
    requests up to ``hold_seconds`` while a watcher (the dash) is attached; its port."""
    port = free_port()
    hosts = g.base / "hosts"
    hosts.write_text("".join(f"127.0.0.1 {name}\n" for name in names))
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(port))
    monkeypatch.setenv("CHTOP_PROXY_HOSTS_FILE", str(hosts))
    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", str(hold_seconds))
    control.ensure_proxy(g.grouping, g.toplevel / "sandbox")
    return port


@pytest.mark.slow
def test_pending_pane_allow_once_lets_the_held_request_through(busy_group, monkeypatch):
    g = busy_group
    echo = EchoServer()
    port = holding_proxy(g, monkeypatch, ["echo.example.test"], 12)   # time enough to answer on a busy machine
    results = []

    def client():
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(f"CONNECT echo.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode())
            status, _ = read_head(s)
            if status == 200:
                s.sendall(b"ping\n")
                results.append((status, s.recv(5)))
            else:
                results.append((status, b""))

    async def scenario():
        app = DashApp(top_of(g), sessions=FakeSessions([]), refresh_seconds=0.5, sandbox_load=False)
        async with app.run_test(size=(180, 45)) as pilot:
            await wait_for(pilot, lambda: app.watcher.attached, what="the watcher")
            loop = asyncio.get_running_loop()
            first = loop.run_in_executor(None, client)
            pending = app.query_one("#pending")
            await wait_for(pilot, lambda: pending.row_count == 1 and "HELD" in cell_texts(pending)[0],
                           what="the held request in the pending pane")
            assert cell_texts(pending)[0][:2] == [f"echo.example.test:{echo.port}", "(group)"]
            await pilot.press("p", "o")
            await first
            assert results == [(200, b"ping\n")]
            t0 = time.monotonic()
            await loop.run_in_executor(None, client)            # the next one: held again, then refused
            assert results[-1][0] == 403 and time.monotonic() - t0 >= 11.8
            await wait_for(pilot, lambda: "allow once" in app.message, what="the message")
    try:
        asyncio.run(scenario())
    finally:
        control.stop_proxy(g.grouping)
        echo.close()
    recs = approvals.read_decisions(g.grouping)
    assert [(r["domain"], r["scope"], r["via"], r["private"]) for r in recs] == [
        (f"echo.example.test:{echo.port}", "once", "dash", True)]             # as net.watch audits it


@pytest.mark.slow
def test_a_newly_held_request_is_selected_and_the_selection_then_stays_on_it(busy_group, monkeypatch):
    """An older blocked (not held) row is selected when a request is held: the held one gets the
    cursor; a second held request above it leaves the cursor where it was; o lets that one through."""
    g = busy_group
    echo = EchoServer()
    port = holding_proxy(g, monkeypatch, [f"{n}.example.test" for n in ("old", "first", "second")], 30)
    results = {}

    def client(name):
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(f"CONNECT {name}.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode())
            status, _ = read_head(s)
            if status == 200:
                s.sendall(b"ping\n")
            results[name] = (status, s.recv(5) if status == 200 else b"")

    client("old")                                          # no watcher yet: refused at once, not held
    assert results["old"][0] == 403

    async def scenario():
        app = DashApp(top_of(g), sessions=FakeSessions([]), refresh_seconds=0.5, sandbox_load=False)
        async with app.run_test(size=(180, 45)) as pilot:
            pending = app.query_one("#pending")
            await wait_for(pilot, lambda: app.watcher.attached and pending.row_count == 1, what="the old row")
            loop = asyncio.get_running_loop()
            first = loop.run_in_executor(None, client, "first")
            await wait_for(pilot, lambda: pending.row_count == 2 and "HELD" in cell_texts(pending)[0],
                           what="the first held request")
            assert app.selected_pending()["host"] == "first.example.test"
            second = loop.run_in_executor(None, client, "second")
            await wait_for(pilot, lambda: pending.row_count == 3 and cell_texts(pending)[0][0].startswith("second"),
                           what="the second held request, above the first")
            await pilot.pause(1.5)                          # more refreshes: the cursor stays
            assert app.selected_pending()["host"] == "first.example.test"
            await pilot.press("p", "o")
            await first
            assert results["first"] == (200, b"ping\n")
            assert "second" not in results                  # still held
            control.stop_proxy(g.grouping)
            await second
    try:
        asyncio.run(scenario())
    finally:
        control.stop_proxy(g.grouping)
        echo.close()


@pytest.mark.slow
def test_an_allow_the_proxy_then_refuses_anyway_is_shown(busy_group, monkeypatch):
    """o on a held request whose host resolves to a private address (p is off): the request is
    still refused (403), and the dash says so, with the proxy's reason and what to press."""
    g = busy_group
    echo = EchoServer()
    port = holding_proxy(g, monkeypatch, ["inside.example.test"], 30)

    def client():
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(f"CONNECT inside.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode())
            return read_head(s)

    async def scenario():
        app = DashApp(top_of(g), sessions=FakeSessions([]), refresh_seconds=0.5, sandbox_load=False)
        async with app.run_test(size=(180, 45)) as pilot:
            await wait_for(pilot, lambda: app.watcher.attached, what="the watcher")
            answer = asyncio.get_running_loop().run_in_executor(None, client)
            pending = app.query_one("#pending")
            await wait_for(pilot, lambda: pending.row_count == 1 and "HELD" in cell_texts(pending)[0],
                           what="the held request")
            await pilot.press("o")
            status, body = await answer
            assert status == 403 and b"non-public address" in body
            alert = app.query_one("#alert")
            await wait_for(pilot, lambda: "refused the request anyway" in str(alert.render()), what="the refusal")
            await wait_for(pilot, lambda: "allow once" in app.message, what="the decision's own message")
            shown = str(alert.render())
            assert "inside.example.test" in shown and "resolves to non-public address 127.0.0.1" in shown
            assert "press p" in shown and alert.display
            await pilot.press("d")                          # the next decision takes it down
            await wait_for(pilot, lambda: not alert.display, what="the refusal taken down")
    try:
        asyncio.run(scenario())
    finally:
        control.stop_proxy(g.grouping)
        echo.close()


def test_blocked_tail_reads_only_new_lines_and_follows_a_rotation(tmp_path):
    from chtop_tasks.proxy.logs import JSONL, net_dir

    log = net_dir(tmp_path) / JSONL
    log.parent.mkdir(parents=True)

    def rec(host, when, decision="blocked", worktree=None):
        return ('{"time": %s, "host": "%s", "worktree": %s, "decision": "%s"}\n'
                % (when, host, f'"{worktree}"' if worktree else "null", decision))
    log.write_text(rec("a.example.org", 1) + rec("a.example.org", 2) + rec("b.example.org", 3, "allowed"))
    tail = model.BlockedTail(tmp_path)
    assert [(i["host"], i["count"], i["last"]) for i in tail.read()] == [("a.example.org", 2, 2)]
    with open(log, "a") as fh:
        fh.write(rec("c.example.org", 4, worktree="dev") + '{"time": 5, "host": "a.exa')   # half a line
    assert sorted((i["host"], i["worktree"], i["count"]) for i in tail.read()) == [
        ("a.example.org", None, 2), ("c.example.org", "dev", 1)]
    with open(log, "a") as fh:
        fh.write('mple.org", "worktree": null, "decision": "blocked"}\n')
    assert {i["host"]: i["count"] for i in tail.read()}["a.example.org"] == 3
    log.rename(log.with_name(JSONL + ".1"))                                       # the proxy rotates
    log.write_text(rec("d.example.org", 6))
    assert sorted(i["host"] for i in tail.read()) == ["a.example.org", "c.example.org", "d.example.org"]


def test_blocked_tail_keeps_one_item_per_host_and_port(tmp_path):
    """An allow entry allows 443 and 80 unless it names a port: example.org on 8443 is its own request."""
    from chtop_tasks.proxy.logs import JSONL, net_dir

    log = net_dir(tmp_path) / JSONL
    log.parent.mkdir(parents=True)
    log.write_text("".join('{"time": %d, "host": "a.example.org", "port": %d, "worktree": null, '
                           '"decision": "blocked"}\n' % (t, port) for t, port in enumerate((443, 8443, 80, 8443))))
    items = sorted(model.BlockedTail(tmp_path).read(), key=lambda i: i["spec"])
    assert [(i["spec"], i["count"]) for i in items] == [("a.example.org", 2),        # 443 and 80: one entry
                                                        ("a.example.org:8443", 2)]


def blocked_on_dev_socket(g, monkeypatch, targets: list[str]) -> None:
    """A real proxy (no watcher: nothing held) refuses a CONNECT to each ``host:port`` from dev's socket,
    in that order (the pane shows the newest first); the hosts resolve to 127.0.0.1."""
    hosts = g.base / "hosts"
    hosts.write_text("".join(f"127.0.0.1 {t.rsplit(':', 1)[0]}\n" for t in targets))
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(free_port()))
    monkeypatch.setenv("CHTOP_PROXY_HOSTS_FILE", str(hosts))
    control.ensure_proxy(g.grouping, g.toplevel / "sandbox")
    dev_socket = control.ensure_proxy(g.grouping, g.toplevel / "sandbox", "dev").socket_path
    for target in targets:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(dev_socket))
            s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            assert read_head(s)[0] == 403
        time.sleep(0.05)


@pytest.mark.slow
def test_pending_pane_keys_allow_for_a_worktree_for_a_while_and_deny(busy_group, monkeypatch):
    g = busy_group
    blocked_on_dev_socket(g, monkeypatch, [f"{n}.example.test:443" for n in ("bad", "timed", "wt")])

    async def scenario():
        app = DashApp(top_of(g), sessions=FakeSessions([]), refresh_seconds=0.3, hold_requests=False,
                      sandbox_load=False)
        async with app.run_test(size=(180, 45)) as pilot:
            pending = app.query_one("#pending")
            table = app.query_one("#worktrees")
            await wait_for(pilot, lambda: pending.row_count == 3, what="three pending rows")
            assert [r[:3] for r in cell_texts(pending)] == [["wt.example.test", "dev", "1"],
                                                            ["timed.example.test", "dev", "1"],
                                                            ["bad.example.test", "dev", "1"]]
            assert cell_texts(table)[0][5] == "3"             # dev's pending (req) column
            await pilot.press("w")
            await wait_for(pilot, lambda: pending.row_count == 2, what="wt allowed for dev")
            await pilot.press("t")
            await wait_for(pilot, lambda: app.screen.query("#answer"), what="the duration prompt")
            await pilot.press("ctrl+u", *"2h", "enter")
            await wait_for(pilot, lambda: pending.row_count == 1, what="timed allowed for 2h")
            await pilot.press("d")
            await wait_for(pilot, lambda: pending.row_count == 0, what="bad denied")
    try:
        asyncio.run(scenario())
    finally:
        control.stop_proxy(g.grouping)
    assert (g.toplevel / "sandbox" / "worktrees" / "dev" / "net-allow.txt").read_text() == "wt.example.test\n"
    assert "bad.example.test" in (g.toplevel / "sandbox" / "net-deny.txt").read_text()
    recs = approvals.read_decisions(g.grouping)
    assert [(r["domain"], r["scope"], r["worktree"], r["ttl"], r["via"]) for r in recs] == [
        ("wt.example.test", "worktree", "dev", None, "dash"),
        ("timed.example.test", "for", None, 7200.0, "dash"),
        ("bad.example.test", "deny", None, None, "dash")]


@pytest.mark.slow
def test_pending_pane_keeps_ports_apart_and_allows_the_selected_port(busy_group, monkeypatch):
    """Blocked on 443 and on 8443: two rows; w on the 8443 one allows exactly host:8443 for dev."""
    g = busy_group
    blocked_on_dev_socket(g, monkeypatch, ["ports.example.test:443", "ports.example.test:8443"])

    async def scenario():
        app = DashApp(top_of(g), sessions=FakeSessions([]), refresh_seconds=0.3, hold_requests=False,
                      sandbox_load=False)
        async with app.run_test(size=(180, 45)) as pilot:
            pending = app.query_one("#pending")
            await wait_for(pilot, lambda: pending.row_count == 2, what="two pending rows")
            assert [r[:3] for r in cell_texts(pending)] == [["ports.example.test:8443", "dev", "1"],
                                                            ["ports.example.test", "dev", "1"]]
            await pilot.press("w")
            await wait_for(pilot, lambda: pending.row_count == 1, what="8443 allowed for dev")
            assert cell_texts(pending)[0][0] == "ports.example.test"          # 443 still waits
    try:
        asyncio.run(scenario())
    finally:
        control.stop_proxy(g.grouping)
    assert (g.toplevel / "sandbox" / "worktrees" / "dev" / "net-allow.txt").read_text() == \
        "ports.example.test:8443\n"
    policy = approvals.policy_for(g.grouping, g.toplevel / "sandbox")
    assert [policy.judge("ports.example.test", "dev", port).decision for port in (8443, 443)] == [
        "allowed", "blocked"]


def test_dash_needs_a_terminal(with_dev):
    r = with_dev.inv(with_dev.toplevel, "dash", check=False)
    assert r.returncode == 2 and "inv dash needs a terminal" in r.stderr


def test_session_keys_without_the_sessions_package_say_so(busy_group):
    from chtop_tasks.dash import sessions_adapter

    if sessions_adapter.available():
        pytest.skip("chtop_tasks.sessions is installed: the keys are covered by tests/sandbox/test_dash_tmux.py")

    async def scenario():
        app = DashApp(top_of(busy_group), refresh_seconds=0.5, hold_requests=False, sandbox_load=False)
        async with app.run_test(size=(180, 45)) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None, what="a snapshot")
            assert "sessions: not available" in str(app.query_one("#status").render())
            await pilot.press("s")
            await wait_for(pilot, lambda: "agent sessions are not available" in app.message, what="start refused")
            await pilot.press("a")
            await wait_for(pilot, lambda: "no live agent session in dev" in app.message, what="attach refused")
    asyncio.run(scenario())


def test_the_dry_run_shown_for_confirmation_names_the_key_not_the_flag(with_dev):
    """The task's footer says "run again without --dry-run"; in the dash the key is y."""
    from conftest import git

    from chtop_tasks.dash import actions

    g = with_dev
    g.push_upstream_commit("alpha", "up.txt", "u\n")
    text, ok = actions.dry_run(g.path("dev"), "git.rebase-down")
    assert ok and "press y to run it" in text and "--dry-run)" not in text, text
    assert actions.CLI_RUN_HINT in g.inv(g.path("dev"), "git.rebase-down", "--dry-run").stdout   # the CLI keeps it
    g.commit(g.path("dev", "beta"), "feature.txt", "the dev feature\n", "dev: add feature.txt")   # alpha is behind
    text, ok = actions.dry_run(g.path("dev"), "git.merge-up")
    assert ok and "y lands exactly these tips: inv git.merge-up --expect beta=" in text, text
    assert actions.CLI_EXPECT_HINT not in text and actions.CLI_RUN_HINT not in text
    tip = git(g.path("dev", "beta"), "rev-parse", "HEAD")
    assert actions.confirmed_argv("git.merge-up", text)[-2:] == ["--expect", f"beta={tip}"]


def test_a_hosts_merge_up_plan_gives_the_confirmed_run_its_tips():
    """``m`` on another host's row: the dry run here (``merge-up --host H --name N``) names its tips
    with ``--host``/``--name`` in the line; the confirmed run lands exactly those, or refuses."""
    from chtop_tasks.dash import actions

    sha = "a" * 40
    plan = ("merge-up from gpu1:dev into /ch/top (dry run: nothing will be changed):\n"
            f"{actions.CLI_EXPECT_HINT} inv git.merge-up --host gpu1 --name dev --expect alpha={sha}\n")
    argv = actions.confirmed_argv("git.merge-up", plan, "--host", "gpu1", "--name", "dev")
    assert argv[-6:] == ["--host", "gpu1", "--name", "dev", "--expect", f"alpha={sha}"]
    assert actions.confirmed_argv("git.merge-up", "nothing to land\n")[-2:] == ["--expect", ""]
