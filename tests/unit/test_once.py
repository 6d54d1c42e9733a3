"""Advice said once per group (a marker in <group>/.chtop/said/), everything under CHTOP_VERBOSE."""

from __future__ import annotations

import types

from chtop_tasks.sandbox.launcher import LIMITS_NOT_ENFORCED, LaunchRequest, say_request
from chtop_tasks.sandbox.once import first_time
from chtop_tasks.workspace.targets import Target


def test_first_time_per_group_and_text(tmp_path, monkeypatch):
    monkeypatch.delenv("CHTOP_VERBOSE", raising=False)
    one, two = tmp_path / "one", tmp_path / "two"
    assert first_time(one, "advice") and not first_time(one, "advice")
    assert first_time(one, "other advice")              # another text: new
    assert first_time(two, "advice")                    # another group: new
    monkeypatch.setenv("CHTOP_VERBOSE", "1")
    assert first_time(one, "advice")


def test_a_launch_says_the_token_advice_and_the_limits_warning_once(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CHTOP_VERBOSE", raising=False)
    target = Target("dir", tmp_path, None, tmp_path, tmp_path / "group", tmp_path / "claude", note="here")
    request = LaunchRequest(target, ["claude"], notes=("claude: no CLAUDE_CODE_OAUTH_TOKEN; /login once",))
    plan = types.SimpleNamespace(warnings=[f"{LIMITS_NOT_ENFORCED} (pids 8192): cgroup v1", "open egress"])
    say_request(request, plan)
    first = capsys.readouterr().err
    assert "/login once" in first and LIMITS_NOT_ENFORCED in first and "open egress" in first
    say_request(request, plan)
    again = capsys.readouterr().err
    assert "/login once" not in again and LIMITS_NOT_ENFORCED not in again
    assert "chtop: here" in again and "warning: open egress" in again      # the rest, every time
    monkeypatch.setenv("CHTOP_VERBOSE", "1")
    say_request(request, plan)
    assert "/login once" in capsys.readouterr().err


def test_the_short_launch_line_shows_a_long_word_by_its_length(monkeypatch):
    """A venv build's command carries its whole plan as one JSON word: the launch line stays one
    short line, and CHTOP_VERBOSE=1 shows the whole command."""
    from chtop_tasks.sandbox import podman
    from chtop_tasks.sandbox.launcher import LaunchPlan, launch_line

    plan_json = '{"root": "/w/dev", "steps": [' + ", ".join(['{"kind": "install"}'] * 300) + "]}"
    argv = ["podman", "run", "--network=none", "--volume=/a:/a:ro", podman.ENTRY, "x", "y", "env", "python3",
            "-m", "chtop_tasks.venv.build_inside", plan_json]
    monkeypatch.delenv("CHTOP_VERBOSE", raising=False)
    line = launch_line(LaunchPlan(argv, "chtop-dev-1", {}))
    assert len(line) < 300 and "\n" not in line, line
    assert f"<{len(plan_json)} characters: " in line and "build_inside" in line
    monkeypatch.setenv("CHTOP_VERBOSE", "1")
    assert plan_json.replace('"', "") in launch_line(LaunchPlan(argv, "chtop-dev-1", {})).replace('"', "").replace("'", "")
