"""The one runner: a streamed command (its output not captured, or shown inert) ends when the child
does, and one that runs past its timeout is killed and reported."""

from __future__ import annotations

import os
import sys
import time

import pytest
from conftest import eventually

from chtop_tasks.core import runner
from chtop_tasks.core.errors import CommandFailed


@pytest.mark.parametrize("shown_inert", [False, True])
def test_a_streamed_command_past_its_timeout_is_killed_and_reported(tmp_path, shown_inert):
    pidfile = tmp_path / "pid"
    script = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    started = time.monotonic()
    with pytest.raises(CommandFailed, match=r"timed out after 0.5s"):
        runner.run([sys.executable, "-c", script], capture=False, shown_inert=shown_inert, quiet=True, timeout=0.5)
    assert time.monotonic() - started < 30
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):      # killed and reaped: no such process any more
        os.kill(pid, 0)


@pytest.mark.parametrize("shown_inert", [False, True])
def test_a_streamed_command_gives_its_exit_status_and_its_output(capfd, shown_inert):
    result = runner.run([sys.executable, "-c", "print('out \\x1b[2Jhere'); raise SystemExit(3)"], capture=False,
                        shown_inert=shown_inert, quiet=True, check=False, timeout=30)
    assert result.returncode == 3
    out = capfd.readouterr().out
    assert "out" in out and "here" in out
    assert ("\x1b[2J" in out) != shown_inert          # shown inert: the escape made visible, not sent


def test_a_failed_streamed_command_raises_when_checked():
    with pytest.raises(CommandFailed, match="exit 2"):
        runner.run([sys.executable, "-c", "raise SystemExit(2)"], capture=False, quiet=True, timeout=30)


def test_waiting_does_not_poll(monkeypatch):
    """One blocking wait, no sleeping in steps (Popen.wait with a timeout sleeps between polls)."""
    def no_sleep(seconds):
        raise AssertionError(f"slept {seconds}s while waiting")
    monkeypatch.setattr(time, "sleep", no_sleep)
    assert runner.run([sys.executable, "-c", "import os; os.times()"], capture=False, quiet=True, timeout=30).ok


def test_a_pipeline_streams_the_first_into_the_second_and_reports_whichever_failed(capsys):
    ok = runner.run_pipeline([sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"],
                             ["tr", "A", "B"], input=b"aaa\n")
    assert ok.ok and ok.stdout == "BBB\n"
    assert "| tr A B" in capsys.readouterr().err          # echoed as one line
    failed = runner.run_pipeline([sys.executable, "-c", "import sys; sys.exit('no input for me')"], ["cat"],
                                 check=False, quiet=True)
    assert failed.returncode == 1 and "no input for me" in failed.stderr
    with pytest.raises(CommandFailed, match="exit 3"):
        runner.run_pipeline(["cat"], ["sh", "-c", "exit 3"], input=b"x", quiet=True)


def test_a_pipeline_can_choose_its_second_command_from_the_first_bytes():
    big = 1 << 20                                        # more than a pipe holds: the relay streams it
    writer = [sys.executable, "-c", f"import sys; sys.stdout.write('HEAD' + 'x' * {big})"]
    seen = []

    def taker(start: bytes):
        seen.append(start)
        return ["wc", "-c"] if start == b"HEAD" else None
    counted = runner.run_pipeline(writer, taker, head=4, quiet=True)
    assert seen == [b"HEAD"] and counted.stdout.strip() == str(big)
    # a second command that stops reading at once: the first is drained, both end
    stopped = runner.run_pipeline(writer, lambda start: ["true"], head=4, quiet=True, timeout=30)
    assert stopped.ok
    nothing = runner.run_pipeline([sys.executable, "-c", "pass"], taker, head=4, quiet=True)
    assert nothing.ok and nothing.stdout == "" and seen[-1] == b""


def test_a_started_command_runs_while_the_caller_goes_on_and_answers_as_run_does(tmp_path, capfd):
    """``runner.start``: echoed, running before ``result()`` is asked (the caller's own work goes on
    meanwhile), its output and status then; a failure raises when checked; one past its timeout is
    killed; a missing command says so at once."""
    marker = tmp_path / "ran"
    script = f"import sys; open({str(marker)!r}, 'w').close(); print('out'); print('err', file=sys.stderr); sys.exit(4)"
    started = runner.start([sys.executable, "-c", script], cwd=tmp_path, check=False)
    assert "$ " in capfd.readouterr().err                      # echoed when started
    eventually(marker.exists, "the command to run before anyone waits for it", timeout=30, interval=0.01)
    result = started.result()
    assert (result.returncode, result.stdout, result.stderr) == (4, "out\n", "err\n")
    assert started.result() is not None                       # asked again: the same answer
    with pytest.raises(CommandFailed, match="exit 4"):
        runner.start([sys.executable, "-c", script], quiet=True).result()
    pidfile = tmp_path / "pid"
    slow = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    begun = time.monotonic()
    with pytest.raises(CommandFailed, match=r"timed out after 0.5s"):
        runner.start([sys.executable, "-c", slow], quiet=True, timeout=0.5).result()
    assert time.monotonic() - begun < 30
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)
    with pytest.raises(CommandFailed, match="command not found"):
        runner.start(["no-such-command-chtop"], quiet=True)
