"""Commands on another host, through the one runner: ``ssh ... -- TARGET 'cd DIR && ARGV'``.

Every call is echoed like any other command; the remote argv is quoted with ``shlex`` for the
remote login shell (a worktree name or path never becomes shell syntax there); stdin is closed;
each call has two bounds: the host's silence (``host_timeout`` in ``config.toml``, a few seconds:
``ConnectTimeout`` for the connection and its handshake, keepalives for a connection that goes
silent, a host that accepts the connection and never speaks included) and the runner's timeout
for the whole call (a question that takes long on a host that answers); and one connection per host is reused
(``ControlMaster=auto``, its socket in this user's private runtime dir), so asking a host three
things costs one login.  ``ssh_config = "PATH"`` in ``config.toml`` is passed as ``ssh -F PATH``
(else ssh reads ``~/.ssh/config`` as always: aliases, jump hosts and keys stay ssh's business).
"""

from __future__ import annotations

import os
import shlex

from ..core import runner
from ..core.errors import ChtopError, CommandFailed
from ..core.places import ensure_private_dir, read_user_config, runtime_base
from .records import Host

ANSWER_TIMEOUT = 5           # seconds a host may stay silent (connecting, or mid-call); config.toml: host_timeout
ASK_TIMEOUT = 60             # seconds for one question (a listing) to a host that does answer
KEEPALIVES = 3               # unanswered keepalives, one every host_timeout / 3 seconds, end a call
LONG_TIMEOUT = 1800          # installing, bootstrap, a worktree's creation
CONTROL_PERSIST = 60         # seconds a host's shared connection outlives its last use
SSH_FAILED = 255             # ssh's own exit status: it could not connect or lost the connection


class Unreachable(ChtopError):
    """The host did not answer: ssh could not connect, or the call ran past its bound."""


def answer_timeout() -> int:
    """Seconds a host may stay silent before it counts as not answering (``host_timeout``)."""
    _, config = read_user_config()
    value = config.get("host_timeout", ANSWER_TIMEOUT)
    good = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1
    return int(value) if good else ANSWER_TIMEOUT


def ask_timeout() -> float:
    """The bound of one question: long enough for a slow listing, never shorter than the silence bound."""
    return max(ASK_TIMEOUT, answer_timeout() * 2)


def control_dir():
    base = runtime_base()
    ensure_private_dir(base)
    return base


def ssh_options() -> list[str]:
    """``ssh`` and the options every call uses (also git's ``GIT_SSH_COMMAND``)."""
    _, config = read_user_config()
    argv = ["ssh"]
    if isinstance(config.get("ssh_config"), str):
        argv += ["-F", os.path.expanduser(config["ssh_config"])]
    bound = answer_timeout()
    for option in ("BatchMode=yes", f"ConnectTimeout={bound}", "ControlMaster=auto",
                   f"ControlPath={control_dir()}/ssh-%C", f"ControlPersist={CONTROL_PERSIST}",
                   f"ServerAliveInterval={max(1, bound // KEEPALIVES)}", f"ServerAliveCountMax={KEEPALIVES}"):
        argv += ["-o", option]
    return argv


def remote_line(argv: list[str], cwd: str | None = None) -> str:
    """The command line the remote shell runs: each word quoted, ``cd`` first when ``cwd``."""
    line = shlex.join(str(a) for a in argv)
    return f"cd {shlex.quote(cwd)} && {line}" if cwd else line


def ssh_argv(host: Host, argv: list[str], cwd: str | None = None, *, tty: bool = False) -> list[str]:
    return [*ssh_options(), "-t" if tty else "-T", "--", host.target, remote_line(argv, cwd)]


def git_ssh_command() -> str:
    """``GIT_SSH_COMMAND`` for git over SSH with the same options (git appends host and command)."""
    return shlex.join(ssh_options())


def run_on(host: Host, argv: list[str], cwd: str | None = None, *, timeout: float | None = None,
           check: bool = True, shown: bool = False, quiet: bool = False) -> runner.Result:
    """``argv`` on ``host`` (in ``cwd`` there); Unreachable when ssh itself failed or ran past its bound.

    ``shown``: the remote output reaches our terminal as it comes, made inert (a long remote task);
    ``quiet``: not echoed (the dashboard's background polls, which would write over its screen).
    """
    timeout = timeout or ask_timeout()
    full = ssh_argv(host, argv, cwd)
    try:
        result = runner.run(full, check=False, timeout=timeout, shown_inert=shown, quiet=quiet)
    except CommandFailed as exc:
        if "timed out" in str(exc):
            raise Unreachable(silent(host, timeout, "no answer yet")) from None
        raise
    if result.returncode == SSH_FAILED:
        raise Unreachable(silent(host, answer_timeout(), result.error_tail(1) or "ssh failed"))
    if check and not result.ok:
        raise CommandFailed(f"on host {host.name}: command failed (exit {result.returncode}): "
                            f"{remote_line(argv, cwd)}\n{result.error_tail()}")
    return result


def silent(host: Host, seconds: float, why: str) -> str:
    """``gpu1: did not answer within 5 s (ssh gpu1: Connection refused)``: one line."""
    return f"{host.name}: did not answer within {seconds:.0f} s (ssh {host.target}: {why.strip().removeprefix('ssh: ')})"


def close_connection(host: Host) -> None:
    """End the host's shared connection, if one is open (``ssh -O exit``)."""
    runner.run([*ssh_options(), "-O", "exit", "--", host.target], check=False, quiet=True, timeout=answer_timeout() * 2)
