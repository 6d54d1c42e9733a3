"""The warm launcher (``chtop_tasks/warmstart/``): a launch handed to a server that has the launch's
modules imported, run by a forked child exactly as ``inv`` would have run it.

The wire format and when a launch may go warm, on their own; then, in a real rootless sandbox as
the test user through chtop's own ``inv`` on a pty: the first ``sbox.shell`` runs cold and leaves a
server, the next goes warm (its exit status, a resize and the shell itself all as before, and the
server's socket nowhere in the sandbox), a changed module sends the next launch back to cold and a
fresh server takes over, and ``CHTOP_WARM=0`` never goes warm; and as root, with rootful podman.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from sandbox_helpers import user_group  # noqa: F401

from chtop_tasks import invscript
from chtop_tasks.rundir import runtime_base_path
from chtop_tasks.warmstart import wire

WARM = "warm start: run by this checkout's warm launcher"


def test_a_request_round_trips_and_a_bad_one_is_refused():
    env = {"HOME": "/h", "A": "x=y", "EMPTY": ""}
    encoded = wire.encode_request("/g/dev", "/g/dev/alpha", "key\nline", ["inv", "sbox.claude", "--", "-p"], env)
    assert int.from_bytes(encoded[:4], "big") == len(encoded) - 4
    assert wire.decode_request(encoded[4:]) == {"root": "/g/dev", "cwd": "/g/dev/alpha", "key": "key\nline",
                                                "argv": ["inv", "sbox.claude", "--", "-p"], "env": env}
    with pytest.raises(ValueError):
        wire.decode_request(encoded[4:].replace(b"chtop-warm", b"chtop-cold"))
    with pytest.raises(ValueError):
        wire.decode_request(encoded[4:-len(b"EMPTY=\0")])       # one env entry short of its count


def test_a_launch_on_a_terminal_or_a_daily_git_task_of_a_worktree_goes_warm_never_from_the_server(monkeypatch, tmp_path):
    worktree, toplevel = tmp_path / "dev", tmp_path / "top"
    (worktree).mkdir()
    (worktree / ".git").write_text("gitdir: /elsewhere\n")        # a linked worktree's checkout
    (toplevel / ".git").mkdir(parents=True)
    monkeypatch.setattr(os, "isatty", lambda fd: True)
    assert wire.wanted(["sbox.claude"], {})
    assert wire.wanted(["sbox.shell", "--network", "host"], {"CHTOP_WARM": "1"})
    assert not wire.wanted(["git.status"], {})                    # no checkout root: cold
    assert not wire.wanted(["sbox.run", "--", "true"], {})
    assert not wire.wanted(["sbox.claude"], {"CHTOP_WARM": "0"})
    for argv in (["git.status"], ["git.diff", "--", "--stat"], ["git.merge-up", "--dry-run"], ["git.rebase-down"]):
        assert wire.wanted(argv, {}, str(worktree)), argv
        assert not wire.wanted(argv, {}, str(toplevel)), argv     # the toplevel's status asks every host
        assert not wire.wanted(argv, {"CHTOP_WARM": "0"}, str(worktree)), argv
    assert not wire.wanted(["git.pull"], {}, str(worktree))
    assert not wire.wanted(["git.merge-up", "--host", "gpu1", "--name", "dev"], {}, str(worktree))
    assert not wire.wanted(["git.diff", "--host=gpu1"], {}, str(worktree))
    assert not wire.wanted(["git.rebase-down", "--", "-i"], {}, str(worktree))
    monkeypatch.setattr(wire, "IN_SERVER", True)
    assert not wire.wanted(["sbox.claude"], {})
    assert not wire.wanted(["git.status"], {}, str(worktree))
    monkeypatch.setattr(wire, "IN_SERVER", False)
    monkeypatch.setattr(os, "isatty", lambda fd: False)
    assert not wire.wanted(["sbox.claude"], {})
    assert wire.wanted(["git.status"], {}, str(worktree))        # its output captured: no terminal needed


def test_a_spare_checks_the_checkouts_own_files_and_the_server_all_of_them(tmp_path):
    """The files a spare stamps at each request are the checkout's (its modules, tasks.py), found by
    real path; the server's own check covers the libraries too."""
    from chtop_tasks.warmstart import server

    repo = str(Path(__file__).resolve().parent.parent)
    files = server.module_files(repo)
    own = server.own_files(files, repo)
    assert os.path.join(repo, "tasks.py") in own and os.path.join(repo, "chtop_tasks", "places.py") in own
    assert os.__file__ in files and os.__file__ not in own
    link = tmp_path / "checkout"
    link.symlink_to(repo)                                   # the root named through a link: the same files
    assert server.own_files(files, str(link)) == own
    assert server.changed_module(own) is None


def test_the_start_key_is_the_same_for_bootstraps_inv_without_site_and_the_launcher_with_it():
    """bootstrap's ``inv`` runs ``python -S`` and starts the warm launcher with site as usual: the key
    a request carries must still be the launcher's own (else no launch would ever go warm), and any
    other flag must still change it."""
    repo = str(Path(__file__).resolve().parent.parent)
    code = "import sys; sys.path.insert(0, sys.argv[1]); from chtop_tasks.warmstart import wire; print(wire.start_key({}))"

    def key(*flags: str) -> str:
        return subprocess.run([sys.executable, *flags, "-c", code, repo], capture_output=True, text=True,
                              check=True).stdout

    assert key("-S") == key() != key("-O")


def test_the_socket_name_is_stable_and_differs_per_checkout():
    assert wire.socket_path("/run/x", "/g/dev") == wire.socket_path("/run/x", "/g/dev")
    assert wire.socket_path("/run/x", "/g/dev") != wire.socket_path("/run/x", "/g/dev2")
    assert wire.fnv64("") == "cbf29ce484222325"          # FNV-1a's offset basis: the empty input


# -- in a real sandbox -------------------------------------------------------------------------------

def chtop_inv(python: str, root) -> list[str]:
    """chtop's own ``inv`` as ./bootstrap writes it (``invscript.py``: ``python -S``, site's step only
    for invoke's program), with ``root``'s chtop_tasks; the warm launcher it starts runs site as usual."""
    return [python, "-S", "-c", invscript.script_text(python, str(root))]


def spawn_chtop_inv(g, *args, extra_env=None, dimensions=(40, 120)):
    """chtop's own ``inv ARGS`` (as bootstrap's script runs it) as the test user on a pty."""
    env = dict(g.env, TERM="xterm-256color", CHTOP_VERBOSE="1", **(extra_env or {}))
    argv = ["-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
            *chtop_inv(str(g.venv / "bin" / "python"), g.dev), *args]
    return pexpect.spawn("runuser", argv, cwd=str(g.dev), dimensions=dimensions, timeout=90,
                         encoding="utf-8", codec_errors="replace")


def servers_of(root: Path, *, spares: bool = False) -> list[int]:
    """The pids of the warm launchers serving ``root`` (with ``spares``, their spares and launches:
    forked, with the same command line, their parent one of them)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if any(b"chtop_tasks.warmstart.server" in a for a in argv) and os.fsencode(str(root)) in argv:
            parents[int(entry)] = parent
    return sorted(pid for pid, parent in parents.items() if spares or parent not in parents)


def socket_of(g) -> Path:
    base = os.path.join(g.env["XDG_RUNTIME_DIR"], f"chtop-{g.user.pw_uid}")
    if len(base) > 46:
        base = f"/tmp/chtop-{g.user.pw_uid}"
    return Path(wire.socket_path(base, str(g.dev)))


def wait_until(what, timeout=60):
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, f"timed out waiting for {what.__doc__ or what}"
        time.sleep(0.1)


def shell_session(g, status: int, *, extra_env=None, check=None) -> str:
    """``inv sbox.shell``: wait for its bash, run ``check(child)``, exit with ``status``; its output."""
    return finished_shell(started_shell(g, extra_env), status, check)


def started_shell(g, extra_env=None):
    child = spawn_chtop_inv(g, "sbox.shell", extra_env=extra_env)
    child.logfile_read = io.StringIO()
    return child


def finished_shell(child, status: int, check=None) -> str:
    try:
        child.expect(r"\(sbox\) .*# ")                   # bash's prompt: typed before it, readline drops it
        child.sendline("echo READY-$((40+2))")
        child.expect("READY-42")
        if check is not None:
            check(child)
        child.sendline(f"exit {status}")
        child.expect(pexpect.EOF)
        seen = child.logfile_read.getvalue()
    finally:
        child.close(force=True)
    assert (child.exitstatus, child.signalstatus) == (status, None), seen[-2000:]
    return seen


@pytest.mark.podman
@pytest.mark.slow
def test_the_second_launch_goes_warm_and_a_changed_module_sends_it_back_to_cold(user_group):  # noqa: F811
    g = user_group
    sock = socket_of(g)
    try:
        assert WARM not in shell_session(g, 3)                 # no server yet: cold, and one is started
        wait_until(sock.exists)
        first_server = servers_of(g.dev)
        assert len(first_server) == 1
        wait_until(lambda: len(servers_of(g.dev, spares=True)) == 2)      # it and its spare, forked ahead
        first_spare = set(servers_of(g.dev, spares=True)) - set(first_server)

        def resized_and_no_socket(child):
            child.sendline("stty size")
            child.expect("40 120")
            child.setwinsize(30, 90)                     # SIGWINCH: the client -> the warm child -> podman
            time.sleep(0.5)
            child.sendline("stty size")
            child.expect("30 90")
            # The runtime dir shows only as the path to the proxy's per-worktree dir mounted below it
            # (podman makes a mount point's parents): no warm launcher's socket is in it.
            assert any(name.startswith("warm-") for name in os.listdir(sock.parent))     # on the host it is
            child.sendline(f'echo "IN""-BASE:$(ls -A {sock.parent} | tr "\\n" " "):END"; '
                           f'echo "SEEN""-$(ls {sock} 2>/dev/null | wc -l)"')
            child.expect(r"IN-BASE:(.*?):END")
            assert "warm-" not in child.match.group(1)
            child.expect(r"SEEN-(\d+)")
            assert child.match.group(1) == "0"

        assert WARM in shell_session(g, 4, check=resized_and_no_socket)
        # two at once: the second arrives before the next spare is forked (a moment after one is
        # taken), waits on the socket for it, and goes warm too
        both = [started_shell(g), started_shell(g)]
        assert all(WARM in finished_shell(child, status) for child, status in zip(both, (7, 8), strict=True))
        assert WARM not in shell_session(g, 0, extra_env={"CHTOP_WARM": "0"})

        module = g.dev / "chtop_tasks" / "places.py"
        os.utime(module)                                  # as if edited: its stamp changed since loading
        assert WARM not in shell_session(g, 5)            # refused as stale: run cold, a new server started
        wait_until(lambda: servers_of(g.dev) and servers_of(g.dev) != first_server)
        wait_until(sock.exists)
        assert WARM in shell_session(g, 6)
        assert first_server[0] not in servers_of(g.dev)   # the stale one has gone
        assert not first_spare & set(servers_of(g.dev, spares=True))     # its spares have gone with it
        last_server = servers_of(g.dev)
    finally:
        for pid in servers_of(g.dev):
            os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not set(servers_of(g.dev, spares=True)) & set(last_server))
    wait_until(lambda: not servers_of(g.dev, spares=True))              # a server's spare leaves with it


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_as_root_the_second_launch_goes_warm(with_dev, tmp_path):
    """As root (rootful podman, a root-owned worktree): the first ``inv sbox.shell`` on a terminal
    runs cold and leaves root's own server; the second is handed to it, and its sandbox runs with
    the user namespace a cold one gets, the shell's status the command's."""

    from sandbox_helpers import rootful_podman_env

    from chtop_tasks.proxy import stop_proxy
    from chtop_tasks.rundir import runtime_base_path

    if os.geteuid() != 0:
        pytest.skip("as root only (the rootless path is the test above)")
    env = dict(rootful_podman_env(tmp_path), TERM="xterm-256color", CHTOP_VERBOSE="1")
    dev = with_dev.path("dev")

    def not_host_root(child) -> None:
        child.sendline('echo "UID""MAP $(head -1 /proc/self/uid_map)"')
        child.expect(r"UIDMAP\s+(\d+)\s+(\d+)\s+(\d+)")
        assert child.match.group(1) == "0" and child.match.group(2) != "0"     # not host root inside

    def session(status: int) -> str:
        python, *args = chtop_inv(sys.executable, dev)
        child = pexpect.spawn(python, [*args, "sbox.shell"], cwd=str(dev), env=env,
                              dimensions=(40, 120), timeout=90, encoding="utf-8", codec_errors="replace")
        child.logfile_read = io.StringIO()
        return finished_shell(child, status, not_host_root)

    try:
        assert WARM not in session(3)
        wait_until(lambda: servers_of(dev))
        sock = Path(wire.socket_path(runtime_base_path(), str(dev)))      # root's, as the test's env has it
        wait_until(sock.exists)
        assert WARM in session(4)
    finally:
        for pid in servers_of(dev):
            os.kill(pid, signal.SIGTERM)
        stop_proxy(with_dev.grouping)


def test_the_client_path_imports_neither_pathlib_nor_re_nor_enum():
    """What ``inv sbox.claude`` imports before it hands the launch over (the root's search and the
    client): none of the modules whose import is the cost the warm launcher saves.  Run with ``-S``:
    a site ``.pth`` of some machines imports them on its own."""
    repo = Path(__file__).resolve().parent.parent
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from chtop_tasks.inv import pinned_search_root; "
            "assert pinned_search_root(sys.argv[1]) == sys.argv[1]; import chtop_tasks.warmstart.client; "
            "print([m for m in ('pathlib', 're', 'enum', 'socket', 'signal', 'json', 'typing', '__future__') "
            "if m in sys.modules])")

    out = subprocess.run([sys.executable, "-S", "-c", code, str(repo)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["[]"], out.stdout + out.stderr


# -- the daily git tasks, warm -------------------------------------------------------------------

def inv_run(dev: Path, *args: str, env: dict, **popen) -> subprocess.CompletedProcess:
    """bootstrap's ``inv ARGS`` in worktree ``dev`` (its own chtop_tasks), output captured."""
    return subprocess.run([*chtop_inv(sys.executable, dev), *args], cwd=dev, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120, **popen)


def without_warm_line(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True) if WARM not in line)


def test_the_daily_git_tasks_go_warm_with_the_output_and_status_a_cold_run_gives(with_dev, tmp_path):
    """In a feature worktree, off a terminal: the first ``git.status`` runs cold and leaves a server
    (the git tasks' modules only); then ``git.status``, ``git.diff``, ``git.merge-up --dry-run``, one
    right after another, run warm with the stdout, stderr and exit status of a ``CHTOP_WARM=0`` run,
    a refusal too; and a Ctrl-C (SIGINT to the client's process group, as a terminal sends it)
    reaches the run's git as it reaches a cold run's."""
    g = with_dev
    dev = g.path("dev")
    env = dict(os.environ, CHTOP_VERBOSE="1")
    cold = dict(env, CHTOP_WARM="0")
    g.commit(dev / "alpha", "landing.txt", "x\n", "to land")
    try:
        first = inv_run(dev, "git.status", env=env)
        assert first.returncode == 0 and WARM not in first.stderr, first.stderr
        wait_until(lambda: servers_of(dev))
        sock = Path(wire.socket_path(str(runtime_base_path()), str(dev)))
        wait_until(sock.exists)
        for args in (["git.status"], ["git.diff", "--", "--stat"], ["git.merge-up", "--dry-run"]):
            warm, reference = inv_run(dev, *args, env=env), inv_run(dev, *args, env=cold)
            assert WARM in warm.stderr and WARM not in reference.stderr, (args, warm.stderr)
            assert (warm.returncode, warm.stdout, without_warm_line(warm.stderr)) == \
                (reference.returncode, reference.stdout, reference.stderr), args
        back_to_back = [inv_run(dev, "git.status", env=env) for _ in range(3)]
        assert all(WARM in run.stderr and run.returncode == 0 for run in back_to_back)

        (dev / "alpha" / "landing.txt").write_text("changed, not committed\n")
        warm, reference = inv_run(dev, "git.merge-up", "--dry-run", env=env), inv_run(dev, "git.merge-up",
                                                                                      "--dry-run", env=cold)
        assert warm.returncode == reference.returncode == 3, warm.stderr
        assert WARM in warm.stderr and "uncommitted changes" in warm.stderr
        assert (warm.stdout, without_warm_line(warm.stderr)) == (reference.stdout, reference.stderr)

        shim = tmp_path / "shim"
        shim.mkdir()
        marks = tmp_path / "marks"
        # the run's first `git status` waits until a SIGINT ends it (its trap notes it); the rest are git's
        (shim / "git").write_text(
            f'#!/bin/sh\ncase " $* " in *" status "*) if mkdir {tmp_path}/held 2>/dev/null; then\n'
            f'  trap \'echo INT >> {marks}; exit 130\' INT\n  echo $$ >> {tmp_path}/started\n'
            f'  while :; do sleep 0.05; done; fi;;\nesac\nexec {shutil.which("git")} "$@"\n')
        (shim / "git").chmod(0o755)
        statuses = []
        for run_env in (env, cold):
            marks.unlink(missing_ok=True)
            (tmp_path / "started").unlink(missing_ok=True)
            shutil.rmtree(tmp_path / "held", ignore_errors=True)
            # its own process group, as a terminal's foreground job, with SIGINT as a terminal leaves
            # it (a test runner may start its workers with it ignored, and that is inherited)
            child = subprocess.Popen([*chtop_inv(sys.executable, dev), "git.status"], cwd=dev, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                                     env=dict(run_env, PATH=f"{shim}:{run_env['PATH']}"), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_until(lambda: (tmp_path / "started").exists())
            time.sleep(0.2)
            os.killpg(child.pid, signal.SIGINT)
            _, err = child.communicate(timeout=60)
            assert "INT" in marks.read_text(), err
            statuses.append((child.returncode, WARM in err))
        assert statuses[0][1] and not statuses[1][1], statuses
        assert statuses[0][0] == statuses[1][0] != 0, statuses
    finally:
        for pid in servers_of(dev):
            os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not servers_of(dev, spares=True))
