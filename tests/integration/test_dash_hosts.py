"""One dashboard across hosts: another host's worktrees and pending requests in ``inv dash``.

The second host is the test's real sshd (tests/ssh_helpers.py).  The host's chtop is a stand-in
script (its recorded python) that answers ``worktree.list``, ``session.list`` and ``net.pending``
with the JSON the test wrote, as a host whose chtop one of its agents rewrote would: hostile
strings, a malformed answer.  Every answer goes through the real ssh path (ControlMaster, the
host timeout), the real schema check and the real app under Textual's pilot.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest
from conftest import git
from test_dash import FakeSessions, cell_texts, top_of, wait_for
from test_hosts import close_masters, fleet_config, remote_base, sshd  # noqa: F401 - fixtures
from textual.widgets import DataTable

from chtop_tasks.dash import remote
from chtop_tasks.dash.app import DashApp, pending_key
from chtop_tasks.hosts import answers, records
from chtop_tasks.hosts import approvals as host_approvals

ESC = "\x1b"
HOSTILE = f"[bold]loud[/bold] {ESC}]2;pwned{ESC}\\ {ESC}[2J\nforged line"

STANDIN = """#!/bin/sh
# the host's chtop, as one of its agents could have rewritten it: answers what the test wrote
case "$3" in
  worktree.list) cat "{dir}/worktrees.json" ;;
  session.list) cat "{dir}/sessions.json" ;;
  net.pending) cat "{dir}/pending.json" ;;
  net.allow|net.deny) echo "$@" >> "{dir}/decisions.txt"; echo "$4: allowed there" ;;
  net.hold) sleep 5; exit 3 ;;
  *) exit 2 ;;
esac
"""


def repo(**overrides):
    rec = {"repo": "alpha", "branch": "dev", "integration": "main", "ahead": 2, "behind": 0, "dirty": False,
           "problem": None}
    return dict(rec, **overrides)


def pending_item(**overrides):
    item = {"host": "gpu.example.org", "port": 8443, "spec": "gpu.example.org:8443", "worktree": "dev",
            "count": 3, "last": time.time(), "held": True, "waiting": 1}
    return dict(item, **overrides)


class StandinHost:
    """The recorded host ``gpu1``: the test's sshd, running the stand-in chtop in ``base``."""

    def __init__(self, server, base):
        self.sshd, self.base = server, base
        (base / "top").mkdir()
        git(base / "top", "init", "-q")
        script = base / "standin-python"
        script.write_text(STANDIN.replace("{dir}", str(base)))
        script.chmod(0o755)
        self.answer(worktrees=[{"name": "dev", "root": f"{base}/dev", "venv": "missing", "problem": None,
                                "repos": [repo()]}], sessions=[], pending=[])
        self.host = records.Host("gpu1", server.alias, f"{base}/top", str(script))
        records.record_host(self.host)

    def answer(self, **files) -> None:
        for name, value in files.items():
            text = value if isinstance(value, str) else json.dumps(value)
            (self.base / f"{name}.json").write_text(text)
        subprocess.run(["chown", "-R", f"{self.sshd.user.pw_uid}:{self.sshd.user.pw_gid}", str(self.base)],
                       check=True)

    def decisions(self) -> list[str]:
        path = self.base / "decisions.txt"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def gpu1(fleet_config, remote_base):  # noqa: F811 - the fixtures of test_hosts
    host = StandinHost(fleet_config, remote_base)
    yield host
    close_masters(None, fleet_config)


# -- the schema of a host's pending list ------------------------------------------------------------

@pytest.mark.parametrize("bad, why", [
    (pending_item(host=f"gpu{ESC}[2J.example"), "is not a host name"),
    (pending_item(spec="evil.example -oProxyCommand=x"), "is not a host or host:port"),
    (pending_item(spec="[bold]x[/bold]"), "is not a host or host:port"),
    (pending_item(worktree="../etc"), "not a worktree name"),
    (pending_item(held="yes"), "expected bool"),
    (pending_item(count=True), "got a boolean"),
    ({"host": "a.example"}, "is missing"),
])
def test_a_pending_answer_with_a_bad_field_is_refused_naming_it(bad, why):
    with pytest.raises(answers.BadAnswer, match=why):
        answers.parse_answer(json.dumps([bad]), host_approvals.PENDING, "host gpu1: net.pending")


def test_a_good_pending_answer_keeps_its_fields_and_a_decision_is_the_hosts_own_task():
    [item] = answers.parse_answer(json.dumps([dict(pending_item(), extra="dropped")]), host_approvals.PENDING, "t")
    assert "extra" not in item and item["spec"] == "gpu.example.org:8443" and item["held"] is True
    assert host_approvals.decision_args("gpu.example.org:8443", "once", "dev", private=True) == [
        "net.allow", "gpu.example.org:8443", "--worktree", "dev", "--once", "--private"]
    assert host_approvals.decision_args("gpu.example.org", "deny", "dev") == ["net.deny", "gpu.example.org"]
    assert host_approvals.decision_args("a.example", "for", ttl="2h") == ["net.allow", "a.example", "--for", "2h"]
    with pytest.raises(Exception, match="not a host"):
        host_approvals.decision_args("-oProxyCommand=x", "group")


# -- the app, with the sshd's host -------------------------------------------------------------------

def run_app(g, hosts, scenario, hold=False):
    async def main():
        app = DashApp(top_of(g), sessions=FakeSessions([]), refresh_seconds=0.3, sandbox_load=False,
                      hold_requests=hold, hosts=hosts, host_seconds=0.5)
        async with app.run_test(size=(200, 50)) as pilot:
            await scenario(app, pilot)
    asyncio.run(main())


def rows_of(app, table_id: str) -> dict[str, list[str]]:
    table = app.query_one(table_id, DataTable)
    keys = [str(k.value) for k in table.rows]
    return dict(zip(keys, cell_texts(table), strict=True))


def column(app, label: str) -> int:
    return [str(c.label) for c in app.query_one("#worktrees", DataTable).columns.values()].index(label)


def test_a_hosts_worktrees_and_held_request_show_with_its_host_and_an_allow_goes_to_that_host(with_dev, gpu1):
    g = with_dev
    gpu1.answer(pending=[pending_item()])

    async def scenario(app, pilot):
        await wait_for(pilot, lambda: "gpu1:dev" in rows_of(app, "#worktrees"), what="gpu1's worktree row")
        rows = rows_of(app, "#worktrees")
        assert rows["dev"][:2] == ["local", "dev"]
        assert rows["gpu1:dev"][:2] == ["gpu1", "dev"] and rows["gpu1:dev"][-3] == "1"
        assert rows["gpu1:dev"][column(app, "alpha")] == "+2/-0"
        await wait_for(pilot, lambda: "@gpu1|gpu.example.org:8443|dev" in rows_of(app, "#pending"),
                       what="gpu1's pending request")
        assert app.selected_pending()["remote"] == "gpu1"         # held: selected for its key
        assert rows_of(app, "#pending")["@gpu1|gpu.example.org:8443|dev"][:3] == [
            "gpu1", "gpu.example.org:8443", "dev"]
        assert "HELD" in rows_of(app, "#pending")["@gpu1|gpu.example.org:8443|dev"]
        await pilot.press("o")
        await wait_for(pilot, lambda: "allow once" in app.message, what="the decision's message")
        assert "gpu1: gpu.example.org:8443: allowed there" in app.message, app.message
        assert "hosts: gpu1 " in str(app.query_one("#status").render())

    run_app(g, [gpu1.host], scenario)
    assert gpu1.decisions() == ["-m invoke net.allow gpu.example.org:8443 --worktree dev --once"]


def test_a_hosts_hostile_strings_show_inert_and_a_malformed_answer_shows_nothing_of_it(with_dev, gpu1):
    g = with_dev
    gpu1.answer(worktrees=[{"name": "dev", "root": "/x", "venv": "missing", "problem": None,
                            "repos": [repo(problem=HOSTILE)]}],
                sessions=[{"worktree": "dev", "agent": "claude", "state": HOSTILE, "since": 0, "pending": 0}])

    async def scenario(app, pilot):
        await wait_for(pilot, lambda: "gpu1:dev" in rows_of(app, "#worktrees"), what="gpu1's worktree row")
        row = rows_of(app, "#worktrees")["gpu1:dev"]
        assert row[column(app, "alpha")] == "! [bold]loud[/bold] ^[]2;pwned^[\\ ^[[2J^Jforged line"      # as sent: inert, no markup
        assert row[-4].startswith("[bold]loud[/bold] ^[]2;pwned")
        table = app.query_one("#worktrees", DataTable)
        shown = table.get_row("gpu1:dev")
        assert all(ESC not in str(c) and "\n" not in str(c) for c in shown)
        assert all(not c.spans for c in shown)                  # Text, never parsed as markup

        gpu1.answer(pending=[pending_item(spec="evil.example;rm -rf ~")])      # malformed: refused whole
        await wait_for(pilot, lambda: "gpu1:" in rows_of(app, "#worktrees"), what="the refused answer's row")
        row = rows_of(app, "#worktrees")["gpu1:"]
        assert row[1].startswith("refused its answer: host gpu1: net.pending[0].spec: ") and \
            "is not a host or host:port" in row[1], row
        assert "gpu1:dev" not in rows_of(app, "#worktrees")
        assert not any(k.startswith("@gpu1") for k in rows_of(app, "#pending"))
        assert "gpu1 BAD ANSWER" in str(app.query_one("#status").render())
        assert all(c.style == "dim" for c in table.get_row("gpu1:"))

        gpu1.answer(pending="{not json")
        await wait_for(pilot, lambda: "not JSON" in rows_of(app, "#worktrees").get("gpu1:", ["", ""])[1],
                       what="the non-JSON answer's row")

    run_app(g, [gpu1.host], scenario)


@pytest.mark.slow
def test_a_frozen_host_greys_out_within_its_timeout_while_local_rows_keep_refreshing(with_dev, gpu1):
    g = with_dev
    config = records.hosts_path().parent / "config.toml"
    config.write_text(config.read_text().replace("host_timeout = 20", "host_timeout = 4"))

    async def scenario(app, pilot):
        await wait_for(pilot, lambda: "gpu1:dev" in rows_of(app, "#worktrees"), what="gpu1's worktree row")
        gpu1.sshd.freeze()                       # answers nothing at all: the bound, not a refusal
        frozen_at = time.monotonic()
        await wait_for(pilot, lambda: "gpu1:" in rows_of(app, "#worktrees"), timeout=30, what="gpu1 unreachable")
        took = time.monotonic() - frozen_at
        row = rows_of(app, "#worktrees")["gpu1:"]
        assert row[1].startswith("did not answer within 4 s (ssh gpu1: "), row
        # its next poll (within POLL_SECONDS), then 4 s of silence, and some slack for a loaded machine
        assert took < remote.POLL_SECONDS + 4 + 3, f"gpu1 marked unreachable {took:.1f}s after it froze"
        assert "gpu1 UNREACHABLE" in str(app.query_one("#status").render())
        assert all(c.style == "dim" for c in app.query_one("#worktrees", DataTable).get_row("gpu1:"))
        taken = app.snapshot.taken
        await wait_for(pilot, lambda: app.snapshot.taken > taken + 0.5, what="local refreshes")
        assert rows_of(app, "#worktrees")["dev"][:2] == ["local", "dev"]

    try:
        run_app(g, [gpu1.host], scenario)
    finally:
        gpu1.sshd.stop()


def test_poll_host_says_unreachable_when_the_sshd_is_gone(with_dev, gpu1):
    gpu1.sshd.stop()
    close_masters(None, gpu1.sshd)
    state = remote.poll_host(gpu1.host)
    assert not state.reachable and state.error.startswith("did not answer within 20 s (ssh gpu1: ") \
        and state.error.endswith("Connection refused)"), \
        state.error
    assert state.worktrees == [] and state.pending == []


# -- the whole loop: a real chtop and proxy on the host, a held request answered from here ----------

@pytest.mark.slow
def test_a_request_held_by_the_hosts_proxy_is_allowed_from_this_dash_and_goes_through(
        initialized, fleet_config, remote_base):  # noqa: F811 - the fixtures of test_hosts
    from proxy_helpers import EchoServer, free_port, read_head
    from ssh_helpers import remote_python

    g, server = initialized, fleet_config
    top = g.toplevel
    remote_top = remote_base / "grp" / "top"
    python = remote_python()
    echo = EchoServer()
    port = free_port()
    names = remote_base / "proxy-hosts"
    names.write_text("127.0.0.1 echo.example.test\n")
    subprocess.run(["chown", f"{server.user.pw_uid}:{server.user.pw_gid}", str(names)], check=True)
    results = []

    def client():
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(f"CONNECT echo.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode())
            status, _ = read_head(s)
            if status == 200:
                s.sendall(b"ping\n")
            results.append((status, s.recv(5) if status == 200 else b""))

    def remote_inv(*args):
        env = f"CHTOP_PROXY_PORT={port} CHTOP_PROXY_HOSTS_FILE={names} CHTOP_PROXY_HOLD_SECONDS=40"
        return server.ssh(f"cd {remote_top} && {env} {python} -m invoke {' '.join(args)}").stdout

    async def scenario(app, pilot):
        await wait_for(pilot, lambda: "1 watcher(s)" in remote_inv("net.status"), timeout=60,
                       what="this dash's net.hold attached to gpu1's proxy")
        loop = asyncio.get_running_loop()
        request = loop.run_in_executor(None, client)
        key = f"@gpu1|echo.example.test:{echo.port}|"
        await wait_for(pilot, lambda: "HELD" in rows_of(app, "#pending").get(key, []), timeout=60,
                       what="gpu1's held request in the pending pane")
        assert rows_of(app, "#pending")[key][:3] == ["gpu1", f"echo.example.test:{echo.port}", "(group)"]
        assert pending_key(app.selected_pending()) == key          # a newly held request is selected, any host's
        await pilot.press("p", "o")
        await request
        assert results == [(200, b"ping\n")], results
        await wait_for(pilot, lambda: "allow once" in app.message, what="the decision's message")
        assert "gpu1: " in app.message and "let through once" in app.message, app.message

    try:
        added = g.inv(top, "host.add", "gpu1", server.alias, "--group", str(remote_base / "grp"),
                      "--python", str(python))
        assert "added host gpu1" in added.stdout
        remote_inv("net.start")
        run_app(g, [records.get_host("gpu1")], scenario, hold=True)
        decisions = server.ssh(f"cat {remote_top}/../.chtop/net/decisions.jsonl").stdout
        assert '"scope":"once"' in decisions and '"via":"cli"' in decisions   # gpu1's own net.allow decided
    finally:
        try:
            remote_inv("net.stop", "--force")
        finally:
            echo.close()
            server.stop()
            close_masters(g, server)




# -- the tasks another machine runs here, and this side's --host -------------------------------------

def test_net_pending_json_is_what_the_schema_accepts(initialized):
    from chtop_tasks.proxy.logs import JSONL, net_dir

    g = initialized
    log = net_dir(g.grouping) / JSONL
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(json.dumps({"time": 1700000000.5, "decision": "blocked", "host": "x.example", "port": 8443,
                               "worktree": None}) + "\n")
    out = g.inv(g.toplevel, "net.pending", "--json").stdout
    [item] = answers.parse_answer(out, host_approvals.PENDING, "here: net.pending")
    assert (item["spec"], item["worktree"], item["count"], item["held"]) == ("x.example:8443", None, 1, False)


def test_net_allow_and_deny_with_host_run_the_hosts_own_task(initialized, gpu1):
    g = initialized
    allowed = g.inv(g.toplevel, "net.allow", "a.example", "--host", "gpu1", "--once", "--worktree", "dev")
    assert "$ ssh " in allowed.stderr and "net.allow" in allowed.stderr        # echoed, as every command
    g.inv(g.toplevel, "net.deny", "--host", "gpu1", "b.example", "--", "c.example")
    assert gpu1.decisions() == ["-m invoke net.allow --worktree dev --once -- a.example",
                                "-m invoke net.deny -- b.example c.example"]
