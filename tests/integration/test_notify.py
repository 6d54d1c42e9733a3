"""Phone notifications through ntfy: the config, the one-time codes, the client against a local
stand-in of ntfy's HTTP API, and the notifier beside the real proxy answering held requests."""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import eventually
from ntfy_standin import NtfyStandin
from proxy_helpers import EchoServer, connect_in_thread, echo, proxy  # noqa: F401
from test_approvals import wait_held

from chtop_tasks.core.errors import PolicyError, UsageError
from chtop_tasks.core.places import notify_config_path
from chtop_tasks.notify import codes, config, held, ntfy, waiting
from chtop_tasks.proxy import approvals, control

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def standin():
    server = NtfyStandin()
    yield server
    server.stop()


CLONE_NEWNET = 0x40000000
GLOBAL_ADDRESS = "1.2.3.4"       # a public address; it exists only inside the test's own network namespace


@pytest.fixture
def own_network():
    """This test's thread (and all it starts: proxy, notifier, stand-in, clients) in a network
    namespace of its own whose loopback also carries GLOBAL_ADDRESS.  The proxy refuses to
    connect to non-public addresses unless the allow entry says ``private``, which the phone
    never writes: this lets a real upstream be reached at a public address, with the proxy's
    check untouched.  Skipped where a network namespace cannot be made (not root)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make a network namespace")
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    if libc.unshare(CLONE_NEWNET) != 0:
        os.close(home)
        pytest.skip(f"cannot make a network namespace: {os.strerror(ctypes.get_errno())}")
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "addr", "add", f"{GLOBAL_ADDRESS}/32", "dev", "lo"], check=True)
        yield GLOBAL_ADDRESS
    finally:
        assert libc.setns(home, CLONE_NEWNET) == 0, os.strerror(ctypes.get_errno())
        os.close(home)


@pytest.fixture
def public_echo(own_network, proxy):
    """An echo server at a public address, which the proxy's test hosts file names echo.example.test."""
    server = EchoServer(own_network)
    proxy.hosts_file.write_text(f"{own_network} echo.example.test\n")
    yield server
    server.close()


def _cfg(standin) -> config.NotifyConfig:
    return config.setup(server=standin.url, held_after=0, waiting_after=5)


# -- config ---------------------------------------------------------------------------------------

def test_setup_writes_a_private_file_with_random_topics_and_keeps_them():
    cfg = config.setup()
    path = notify_config_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert cfg.server == "https://ntfy.sh" and cfg.topic != cfg.reply_topic
    assert cfg.topic.startswith("chtop-") and len(cfg.topic) == 30 and len(cfg.secret) == 64
    again = config.setup(server="https://ntfy.example.org/", held_after=0)
    assert (again.topic, again.reply_topic, again.secret) == (cfg.topic, cfg.reply_topic, cfg.secret)
    assert again.server == "https://ntfy.example.org" and again.held_after == 0
    assert config.load() == again
    fresh = config.setup(new=True)
    assert fresh.topic != cfg.topic and fresh.secret != cfg.secret


def test_a_config_others_may_read_or_a_link_is_refused(tmp_path):
    config.setup()
    path = notify_config_path()
    os.chmod(path, 0o644)
    with pytest.raises(PolicyError, match=r"others may read it: run `chmod 600"):
        config.load()
    os.chmod(path, 0o600)
    elsewhere = tmp_path / "planted.toml"
    elsewhere.write_text(path.read_text())
    os.chmod(elsewhere, 0o600)
    path.unlink()
    path.symlink_to(elsewhere)
    with pytest.raises(PolicyError, match="plain file"):
        config.load()


@pytest.mark.parametrize("line, error", [
    ('buttons = ["once", "deny", "once"]', "each once"),
    ('buttons = []', "buttons must list"),
    ('buttons = ["sudo"]', "buttons must list"),
    ('topic = "has space"', "topic must be"),
    ('held_after = -1', "held_after must be"),
    ('server = "ftp://x"', "bad ntfy server"),
])
def test_a_bad_setting_is_named(line, error):
    config.setup()
    path = notify_config_path()
    key = line.split(" ")[0]
    text = "".join(raw + "\n" for raw in path.read_text().splitlines() if not raw.startswith(key + " "))
    path.write_text(text + line + "\n")
    with pytest.raises(PolicyError, match=error):
        config.load()


def test_up_to_three_buttons_fit_one_message_and_all_four_show_two_and_more():
    """ntfy takes three action buttons a message: the fourth choice comes behind "More…"."""
    assert config.button_layout(("once", "1h", "deny")) == (("once", "1h", "deny"), ())
    assert config.button_layout(config.DEFAULT_BUTTONS) == (("once", "deny"), ("1h", "always"))
    assert set(config.DEFAULT_BUTTONS) == set(config.BUTTONS)


def test_setup_refuses_a_bad_server_and_writes_nothing():
    with pytest.raises(UsageError, match="bad ntfy server"):
        config.setup(server="not a url")
    assert not notify_config_path().exists()


# -- codes ------------------------------------------------------------------------------------------

def test_a_code_stands_for_its_offer_and_decision_once_and_until_its_expiry():
    offers = codes.Offers("ab" * 32)
    now = 1000.0
    one = offers.make("github.com", "dev", ("once", "1h", "deny"), now + 60)
    other = offers.make("pypi.org", None, ("once", "deny"), now + 60)
    assert len(set(one.codes.values()) | set(other.codes.values())) == 5
    with pytest.raises(codes.Refusal, match="unknown"):
        offers.redeem("0" * 32, now)
    with pytest.raises(codes.Refusal, match="unknown"):
        offers.redeem("deny", now)                           # a reply naming a decision is no code
    assert offers.redeem(one.codes["deny"], now) == (one, "deny")
    for code in one.codes.values():                          # answered: every button of it is spent
        with pytest.raises(codes.Refusal, match="reused"):
            offers.redeem(code, now)
    with pytest.raises(codes.Refusal, match="expired"):
        offers.redeem(other.codes["once"], now + 61)
    # "More…" asks for the other choices once, and decides nothing: the offer stays open
    fourth = offers.make("more.example", "dev", ("once", "deny", "1h", "always", codes.MORE), now + 60)
    assert offers.redeem(fourth.codes[codes.MORE], now) == (fourth, codes.MORE)
    with pytest.raises(codes.Refusal, match="reused"):
        offers.redeem(fourth.codes[codes.MORE], now)
    assert offers.live("more.example", "dev", now) is fourth
    assert offers.redeem(fourth.codes["always"], now) == (fourth, "always")
    third = offers.make("files.example", "dev", ("once", "deny"), now + 60)
    assert offers.live("files.example", "dev", now) is third
    offers.end("files.example", "dev")                       # the proxy says its hold ended
    assert offers.live("files.example", "dev", now) is None
    with pytest.raises(codes.Refusal, match="expired"):
        offers.redeem(third.codes["deny"], now)
    # the code is the HMAC of the offer's fields: another secret makes other codes
    assert codes.sign("cd" * 32, one.offer_id, "github.com", "dev", "deny", one.expires) != one.codes["deny"]


def test_a_topic_reader_can_answer_only_the_offer_a_code_was_made_for_once():
    """What a code read off the publish topic can do: answer its own offer (that domain, that
    worktree, one of the decisions offered) once, before it expires; never another offer, domain or
    worktree, never ``private``, and no code for anything else can be made without the secret."""
    offers = codes.Offers("ab" * 32)
    now = 1000.0
    seen = offers.make("github.com", "dev", ("once", "always", "deny"), now + 60)
    other_wt = offers.make("github.com", "dev2", ("once", "always", "deny"), now + 60)
    other_domain = offers.make("pypi.org", "dev", ("once", "always", "deny"), now + 60)
    offer, decision = offers.redeem(seen.codes["always"], now)
    assert (offer.domain, offer.worktree, decision) == ("github.com", "dev", "always")
    with pytest.raises(codes.Refusal, match="reused"):                # replayed: spent
        offers.redeem(seen.codes["always"], now)
    assert offers.live("github.com", "dev2", now) is other_wt           # the others are untouched
    assert offers.live("pypi.org", "dev", now) is other_domain
    for domain, worktree in (("evil.example", "dev"), ("github.com", "dev2"), ("pypi.org", "dev")):
        forged = codes.sign("cd" * 32, seen.offer_id, domain, worktree, "always", seen.expires)
        with pytest.raises(codes.Refusal, match="unknown"):            # without the secret: no code
            offers.redeem(forged, now)
    with pytest.raises(codes.Refusal, match="expired"):
        offers.redeem(other_wt.codes["once"], now + 61)
    for button in ("once", "1h", "always"):                            # a phone's allow is never private
        assert not held.plan_for_button("github.com", "dev", button).private


# -- the client against the stand-in ------------------------------------------------------------------

def test_publish_with_buttons_and_subscribe_to_the_reply_stream(standin):
    cfg = _cfg(standin)
    action = ntfy.http_action(cfg, "Allow once", "c0de")
    ntfy.publish(cfg, "dev wants github.com", "held", [action])
    [msg] = standin.published(cfg.topic)
    assert msg["title"] == "dev wants github.com"
    assert msg["actions"] == [{"action": "http", "label": "Allow once", "url": f"{standin.url}/{cfg.reply_topic}",
                               "method": "POST", "body": "c0de", "clear": True}]
    standin.tap(msg["actions"][0])
    events = ntfy.subscribe(cfg, cfg.reply_topic, since="all")
    assert next(events)["event"] == "open"
    assert next(e for e in events if e["event"] == "message")["message"] == "c0de"


def test_the_token_is_sent_and_a_refusal_is_an_error():
    standin = NtfyStandin(token="tk_secret")
    try:
        cfg = config.setup(server=standin.url)
        with pytest.raises(ntfy.NtfyError, match="401"):
            ntfy.publish(cfg, "t", "m")
        cfg = config.setup(token="tk_secret")
        action = ntfy.http_action(cfg, "Deny", "c0de")
        assert action["headers"] == {"Authorization": "Bearer tk_secret"}   # the phone needs it too
        ntfy.publish(cfg, "t", "m", [action])
        standin.tap(standin.published(cfg.topic)[0]["actions"][0])
        assert [m["message"] for m in standin.published(cfg.reply_topic)] == ["c0de"]
    finally:
        standin.stop()


# -- a waiting agent ------------------------------------------------------------------------------------

def test_a_waiting_session_sends_exactly_one_message(standin):
    cfg = _cfg(standin)
    alert = waiting.WaitingAlert(cfg, "dev", "claude")
    screen = "old line\n" * 20 + "\x1b[31mDo you want to proceed?\x1b[0m\n 1. Yes\n 2. No\n\n\n"
    t0 = 1000.0
    assert alert.observe("working", t0, screen) is None
    assert alert.observe("waiting", t0 + 1, screen) is None
    assert alert.observe("waiting", t0 + 5.5, screen) is None        # not yet waiting_after (5 s)
    thread = alert.observe("waiting", t0 + 6.5, screen)
    thread.join(10)
    for later in (7, 30, 300):
        assert alert.observe("waiting", t0 + later, screen) is None
    [msg] = standin.wait_published(cfg.topic, 1)
    assert msg["title"] == "dev: claude waits for you" and "actions" not in msg
    body = msg["message"]
    assert "\\x1b[31mDo you want to proceed?\\x1b[0m" in body and "\x1b" not in body
    assert body.count("old line") == 8 - 3 and len(body) < 1000
    assert "inv session.attach --name dev" in body
    # it worked, then waits again: one more message
    alert.observe("working", t0 + 400, screen)
    alert.observe("waiting", t0 + 401, screen)
    alert.observe("waiting", t0 + 410, screen).join(10)
    assert len(standin.wait_published(cfg.topic, 2)) == 2


def test_no_config_no_alert_and_a_bad_one_is_said():
    assert waiting.for_session("dev", "claude") is None
    config.setup()
    os.chmod(notify_config_path(), 0o644)
    assert waiting.for_session("dev", "claude") is None


# -- the notifier beside the real proxy -------------------------------------------------------------------

def _start(proxy, standin, monkeypatch, hold: float) -> config.NotifyConfig:
    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", str(hold))
    cfg = _cfg(standin)
    proxy.start()
    standin.wait_subscribed(cfg.reply_topic)
    eventually(lambda: control.status(proxy.group)["watchers"] >= 1, "the notifier to attach to the proxy", timeout=20)
    return cfg


def _notify_log(proxy) -> str:
    path = proxy.group / ".chtop" / "net" / "notify.log"
    return path.read_text() if path.exists() else ""


def _wait_log(proxy, text: str, timeout: float = 20.0, count: int = 1) -> str:
    eventually(lambda: _notify_log(proxy).count(text) >= count, f"{text!r} in notify.log", timeout,
               explain=lambda: _notify_log(proxy))
    return _notify_log(proxy)


def _pushes_running() -> list[threading.Thread]:
    """The threads of this process still pushing a waiting message."""
    return [t for t in threading.enumerate() if t.name.endswith(f"({waiting.WaitingAlert._push.__name__})")]


def _button(msg: dict, label: str) -> dict:
    return next(a for a in msg["actions"] if a["label"] == label)


def _post(standin, cfg, body: str) -> None:
    """A stranger who knows the reply topic publishes to it."""
    urllib.request.urlopen(urllib.request.Request(cfg.reply_url, data=body.encode(), method="POST"), timeout=10)


@pytest.mark.slow
def test_allow_once_from_the_phone_releases_the_held_request_and_the_next_is_held_again(
        public_echo, proxy, standin, monkeypatch):
    cfg = _start(proxy, standin, monkeypatch, hold=30)
    target = f"echo.example.test:{public_echo.port}"
    t, result = connect_in_thread(proxy, target)
    [msg] = standin.wait_published(cfg.topic, 1)
    assert msg["title"] == "a sandbox wants echo.example.test"
    assert [a["label"] for a in msg["actions"]] == ["Allow once", "Deny", "More…"]
    assert cfg.secret not in json.dumps(msg)
    assert {a["url"] for a in msg["actions"]} == {f"{standin.url}/{cfg.reply_topic}"}
    once = _button(msg, "Allow once")
    standin.tap(once)
    t.join(20)
    # released as "allowed once": it goes through to the upstream, and is echoed
    assert result == {"status": 200, "echo": b"ping\n"}
    rec = proxy.wait_record(lambda r: r.get("host") == "echo.example.test")
    assert rec["rule"].startswith("allowed once") and rec["upstream"] == GLOBAL_ADDRESS
    assert public_echo.accepted == 1
    assert [(d["scope"], d["via"], d["domain"]) for d in approvals.read_decisions(proxy.group)] == [
        ("once", "phone", target)]
    assert "echo.example.test" not in (proxy.policy / "net-allow.txt").read_text()
    # the next request is held again, and pushed again (a fresh offer)
    t2, result2 = connect_in_thread(proxy, target)
    wait_held(proxy, "echo.example.test")
    second = standin.wait_published(cfg.topic, 2)[1]
    assert _button(second, "Allow once")["body"] != once["body"]
    # the first notification's buttons are spent; a forged code, or a reply naming a decision, is no code
    standin.tap(once)
    standin.tap(_button(msg, "Deny"))
    _post(standin, cfg, "0" * 32)
    _post(standin, cfg, "deny")
    _post(standin, cfg, json.dumps({"decision": "always", "domain": "echo.example.test"}))
    log = _wait_log(proxy, "unknown code '{\"decision\"")
    assert log.count("ignored a reply: reused") == 2 and log.count("ignored a reply: unknown") == 3
    assert wait_held(proxy, "echo.example.test")[0]["waiting"] == 1          # still held, nothing decided
    assert len(approvals.read_decisions(proxy.group)) == 1
    # Deny on the second: 403 at once, and denied for good
    standin.tap(_button(second, "Deny"))
    t2.join(20)
    assert result2["status"] == 403
    assert "echo.example.test" in (proxy.policy / "net-deny.txt").read_text()
    assert [(d["scope"], d["via"]) for d in approvals.read_decisions(proxy.group)] == [
        ("once", "phone"), ("deny", "phone")]
    rec = proxy.wait_record(lambda r: r.get("host") == "echo.example.test" and r.get("decision") == "denied")
    assert rec["status"] == 403


@pytest.mark.slow
def test_allow_behind_more_lets_this_request_and_the_next_through(public_echo, proxy, standin, monkeypatch):
    cfg = _start(proxy, standin, monkeypatch, hold=30)
    target = f"echo.example.test:{public_echo.port}"
    t, result = connect_in_thread(proxy, target)
    [msg] = standin.wait_published(cfg.topic, 1)
    standin.tap(_button(msg, "More…"))
    more = standin.wait_published(cfg.topic, 2)[1]
    standin.tap(_button(more, "Allow"))
    t.join(20)
    assert result == {"status": 200, "echo": b"ping\n"}
    # allowed for good, as `inv net.allow echo.example.test:PORT` writes it (never `private`)
    assert f"\n{target}\n" in (proxy.policy / "net-allow.txt").read_text()
    assert [(d["scope"], d["via"], d["domain"], d["private"]) for d in approvals.read_decisions(proxy.group)] == [
        ("group", "phone", target, False)]
    t, result = connect_in_thread(proxy, target)           # the next one is not held: it is allowed
    t.join(20)
    assert result == {"status": 200, "echo": b"ping\n"} and len(standin.published(cfg.topic)) == 2


@pytest.mark.slow
def test_an_expired_code_changes_nothing(proxy, echo, standin, monkeypatch):
    cfg = _start(proxy, standin, monkeypatch, hold=2)
    dev = proxy.start("dev")                              # worktree dev's own socket
    t, result = connect_in_thread(dev.socket_path, f"echo.example.test:{echo.port}")
    [msg] = standin.wait_published(cfg.topic, 1)
    assert msg["title"] == "dev wants echo.example.test"
    t.join(20)
    assert result["status"] == 403                       # the hold ran out
    _wait_log(proxy, "hold ended: echo.example.test [dev] (its time ran out)")
    standin.tap(_button(msg, "More…"))
    _wait_log(proxy, "ignored a reply: expired")
    standin.tap(_button(msg, "Allow once"))
    _wait_log(proxy, "ignored a reply: expired", count=2)
    assert len(standin.published(cfg.topic)) == 1          # no other choices pushed for it
    assert approvals.read_decisions(proxy.group) == []
    assert not (proxy.group / ".chtop" / "net" / "allow-timed.jsonl").exists() or \
        "echo.example.test" not in (proxy.group / ".chtop" / "net" / "allow-timed.jsonl").read_text()


@pytest.mark.slow
def test_the_notifier_survives_the_server_going_away_and_coming_back(proxy, echo, standin, monkeypatch):
    cfg = _start(proxy, standin, monkeypatch, hold=8)
    standin.stop()
    _wait_log(proxy, "reply stream:")
    t, result = connect_in_thread(proxy, f"echo.example.test:{echo.port}")     # held while it is away
    _wait_log(proxy, "could not push a sandbox wants echo.example.test")
    t.join(30)
    assert result["status"] == 403
    standin.start()
    standin.wait_subscribed(cfg.reply_topic, timeout=40)     # reconnected (with backoff)
    t, result = connect_in_thread(proxy, f"echo.example.test:{echo.port}")
    [msg] = standin.wait_published(cfg.topic, 1)
    standin.tap(_button(msg, "More…"))                 # all four choices: the other two come next
    more = standin.wait_published(cfg.topic, 2)[1]
    assert more["title"] == msg["title"] and [a["label"] for a in more["actions"]] == ["Allow 1h", "Allow"]
    assert _button(msg, "More…")["clear"] is False and _button(more, "Allow")["clear"] is True
    standin.tap(_button(msg, "More…"))                 # asked once
    _wait_log(proxy, "ignored a reply: reused")
    standin.tap(_button(more, "Allow 1h"))
    t.join(20)
    standin.tap(_button(msg, "Deny"))                  # answered: the first message's buttons are spent
    _wait_log(proxy, "ignored a reply: reused", count=2)
    assert [(d["scope"], d["ttl"], d["via"]) for d in approvals.read_decisions(proxy.group)] == [
        ("for", 3600.0, "phone")]
    assert result["status"] == 403                  # allowed for 1h; refused only for the 127.0.0.1 address
    rec = proxy.wait_record(lambda r: r.get("host") == "echo.example.test" and "allowed for a while" in r["rule"])
    assert "non-public address" in rec["reason"]


@pytest.mark.slow
def test_a_tap_that_reached_the_server_while_the_notifier_was_cut_off_is_caught_up_once(
        public_echo, proxy, standin, monkeypatch):
    cfg = _start(proxy, standin, monkeypatch, hold=90)       # time enough for the reconnect's backoff under load
    t, result = connect_in_thread(proxy, f"echo.example.test:{public_echo.port}", timeout=100)
    [msg] = standin.wait_published(cfg.topic, 1)
    standin.stop()                                     # the notifier's stream is cut ...
    _wait_log(proxy, "reply stream")
    standin.broker.publish(cfg.reply_topic, {"message": _button(msg, "Allow once")["body"]})   # ... the tap lands
    standin.start()
    t.join(100)                                        # reconnected, caught up from the last message seen
    assert result == {"status": 200, "echo": b"ping\n"}
    assert [(d["scope"], d["via"]) for d in approvals.read_decisions(proxy.group)] == [("once", "phone")]
    standin.stop()                                     # again: nothing is applied twice on catching up
    standin.start()
    standin.wait_subscribed(cfg.reply_topic, timeout=40)
    standin.tap(_button(msg, "Deny"))
    log = _wait_log(proxy, "ignored a reply: reused")
    assert log.count("phone: Allow once") == 1 and log.count("ignored a reply") == 1     # the Deny alone
    assert len(approvals.read_decisions(proxy.group)) == 1


@pytest.mark.slow
def test_one_notifier_per_group_and_it_ends_with_the_proxy(proxy, standin, monkeypatch):
    _start(proxy, standin, monkeypatch, hold=30)
    assert control.notifier_running(proxy.group)
    proxy.start()                                      # a second ensure_proxy starts no second one
    code = ("import sys; from chtop_tasks.notify.held import main; "
            "sys.exit(main(['--group-dir', sys.argv[1], '--policy-dir', sys.argv[2]]))")
    extra = subprocess.run([sys.executable, "-c", code, str(proxy.group), str(proxy.policy)], cwd=REPO,
                           capture_output=True, text=True, timeout=30)
    assert extra.returncode == 0 and control.status(proxy.group)["watchers"] == 1
    control.stop_proxy(proxy.group)
    eventually(lambda: not control.notifier_running(proxy.group), "the notifier to end with its proxy", timeout=20)
    assert "the proxy stopped" in _notify_log(proxy)


def test_a_session_turning_waiting_pushes_once_through_its_pane_watcher(standin, tmp_path):
    """The pane process's state watcher on a real tmux pane; the agent reports ``waiting`` through
    its hook file (as claude does); one message with the pane's last lines, after waiting_after."""
    from chtop_tasks.sessions import agent_state, pane, records, tmux

    cfg = _cfg(standin)
    group, config_dir = tmp_path / "grp", tmp_path / "agents"
    sock = tmp_path / "tmux.sock"
    session = tmux.session_name("dev")
    subprocess.run([tmux.tmux_binary(), "-S", str(sock), "new-session", "-d", "-s", session, "-x", "80",
                    "-y", "20", "printf 'Allow this edit?\\033]0;title\\007 [y/n]\\n'; sleep 120"], check=True)
    try:
        record = records.Record("dev", str(tmp_path), str(group), str(tmp_path), "claude", [], False,
                                "abcdefgh1234", str(sock), session, time.time(), str(config_dir))
        records.save(group, record)
        state_file = agent_state.hook_state_path(config_dir, record.session_id)
        state_file.parent.mkdir(parents=True)
        state_file.write_text("waiting\n")
        watcher = pane.Watcher(group, record)
        assert watcher.phone is not None
        eventually(lambda: "Allow this edit?" in (tmux.capture_pane(sock, session) or ""), "the prompt on the pane",
                   timeout=10)
        t0 = time.time()
        for later in (0, 1, 4):                                   # waiting, not yet for 5 s
            watcher.step(t0 + later)
        assert records.load(group, "dev").state == "waiting" and standin.published(cfg.topic) == []
        for later in (5.5, 6, 30, 300):
            watcher.step(t0 + later)
        [msg] = standin.wait_published(cfg.topic, 1)
        eventually(lambda: not _pushes_running(), "the pushes to end")      # every message sent is in
        assert len(standin.published(cfg.topic)) == 1
        assert msg["title"] == "dev: claude waits for you" and "Allow this edit? [y/n]" in msg["message"]
        assert "actions" not in msg and "\x1b" not in msg["message"]
    finally:
        subprocess.run([tmux.tmux_binary(), "-S", str(sock), "kill-server"], check=False)


def test_the_notify_tasks_as_a_user_runs_them(standin, tmp_path):
    from test_cli import chtop

    done = chtop(tmp_path, "notify.setup", "--server", standin.url, "--held-after", "0")
    assert done.returncode == 0, done.stderr
    cfg = config.load()
    assert f"{standin.url}/{cfg.topic}" in done.stdout and cfg.secret not in done.stdout
    before = notify_config_path().read_text()
    bad = chtop(tmp_path, "notify.setup", "--held-after", "soon")
    assert bad.returncode == 2 and "--held-after 'soon'" in bad.stderr
    bad = chtop(tmp_path, "notify.setup", "--server", "ntfy.sh")
    assert bad.returncode == 2 and "bad ntfy server" in bad.stderr
    assert notify_config_path().read_text() == before
    shown = chtop(tmp_path, "notify.status")
    assert shown.returncode == 0 and cfg.topic in shown.stdout and cfg.secret not in shown.stdout
    sent = chtop(tmp_path, "notify.test")
    assert sent.returncode == 0, sent.stderr
    assert [m["title"] for m in standin.published(cfg.topic)] == ["chtop test"]
    standin.stop()
    down = chtop(tmp_path, "notify.test")
    assert down.returncode == 1 and "Connection refused" in down.stderr
    standin.start()


def test_the_client_goes_to_the_configured_server_only(standin):
    """Proxy variables are ignored (the host's own egress, never the agents' proxy), and a redirect
    to anywhere else is refused before anything is sent there."""
    import http.server
    import threading

    elsewhere = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            if self.server is other:
                elsewhere.append(self.path)
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{other.server_address[1]}/")
            self.send_header("Content-Length", "0")
            self.end_headers()

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    redirecting = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    for server in (other, redirecting):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = _cfg(standin)
        dead = "http://127.0.0.1:9"                             # nothing listens there
        env = dict(os.environ, http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead, HTTPS_PROXY=dead, no_proxy="")
        code = "from chtop_tasks.notify import config, ntfy; ntfy.publish(config.load(), 't', 'm')"
        subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, timeout=30)
        assert len(standin.published(cfg.topic)) == 1
        moved = config.setup(server=f"http://127.0.0.1:{redirecting.server_address[1]}")
        with pytest.raises(ntfy.NtfyError, match="refusing a redirect"):
            ntfy.publish(moved, "t", "m")
        assert elsewhere == []
    finally:
        for server in (other, redirecting):
            server.shutdown()
            server.server_close()


@pytest.mark.slow
def test_an_agent_asking_for_many_domains_does_not_flood_the_phone(proxy, standin, monkeypatch):
    from test_approvals import attach_watcher

    from chtop_tasks.notify import held

    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", "30")
    # more prompts than one source may hold by default: the notifier's own cap is what is tested here
    monkeypatch.setenv("CHTOP_PROXY_MAX_PROMPTS_PER_WORKTREE", "64")
    monkeypatch.setenv("CHTOP_PROXY_MAX_HELD_PER_WORKTREE", "64")
    cfg = _cfg(standin)
    monkeypatch.setattr(control, "ensure_notifier", lambda *a: None)    # this test drives one in-process
    proxy.start()
    watcher = attach_watcher(proxy)
    try:
        hosts = [f"h{i}.example.org" for i in range(held.MAX_UNANSWERED + 2)]
        threads = [connect_in_thread(proxy, f"{h}:443")[0] for h in hosts]
        for h in hosts:
            wait_held(proxy, h)
        notifier = held.Notifier(proxy.group, proxy.policy, cfg)
        now = time.time()
        for h in hosts:
            notifier.on_event({"event": "blocked", "host": h, "port": 443, "worktree": None, "hold": 30}, now)
        notifier.push_due(now)
        assert len(standin.published(cfg.topic)) == held.MAX_UNANSWERED
        assert _notify_log(proxy).count("not pushed:") == 2
    finally:
        watcher.close()
        control.stop_proxy(proxy.group)       # the held requests' connections close (not a client timeout)
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
