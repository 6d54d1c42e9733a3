"""The one runner for every external command chtop runs for the user.

It echoes what it runs (``$ cmd  (cwd=...)``, so the user can repeat it), takes argv
lists (never shell strings built from input), gives non-interactive work
``stdin=DEVNULL`` and applies timeouts.  Output that may carry the agent's text (git's, on a
worktree) can be shown as it comes but inert (``shown_inert``: see ``term.inert``).
"""

from __future__ import annotations

import codecs
import os
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import CommandFailed
from .term import inert, inert_keeping_colour, progress_as_lines

DEFAULT_TIMEOUT = 600


@dataclass
class Result:
    argv: list[str]
    cwd: Path | None
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def error_tail(self, lines: int = 6) -> str:
        text = (self.stderr or self.stdout).strip().splitlines()
        return "\n".join(text[-lines:])


class _PipeMark(str):
    """The one ``|`` between the two commands of a pipeline's argv (``run_pipeline``), shown bare; an
    argument ``|`` of a command is another string, and shown quoted."""


PIPE = _PipeMark("|")


def format_command(argv, cwd=None) -> str:
    line = "$ " + " ".join(PIPE if a is PIPE else shlex.quote(str(a)) for a in argv)
    if cwd is not None:
        line += f"  (cwd={cwd})"
    return line


def echo(argv, cwd=None, stream=None) -> None:
    """Print the command we are about to run, to stderr."""
    print(inert(format_command(argv, cwd)), file=stream or sys.stderr, flush=True)


def run(
    argv,
    cwd=None,
    *,
    check: bool = True,
    capture: bool = True,
    shown_inert: bool = False,
    quiet: bool = False,
    env: dict | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    stdin=subprocess.DEVNULL,
    input: str | bytes | None = None,
) -> Result:
    """Run ``argv``; echo it unless ``quiet``; raise CommandFailed when ``check``.

    ``input``: text, or bytes (a pack) given as they are; the output is text either way.

    With ``capture=False`` the child's output goes straight to our terminal; with ``shown_inert``
    it is shown as it comes, through ``term.inert_keeping_colour`` (stdin stays the caller's).
    """
    argv = [str(a) for a in argv]
    if not quiet:
        echo(argv, cwd)
    full_env = None
    if env is not None:             # added to ours; a None value removes that variable
        full_env = dict(os.environ)
        for key, value in env.items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
    if shown_inert or (not capture and input is None):
        return _run_streamed(argv, cwd, full_env, stdin, timeout, check, shown_inert)
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=None if input is not None else stdin,
            input=input,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            text=not isinstance(input, bytes),
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise not_started(argv, cwd, exc) from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(f"timed out after {timeout}s: {format_command(argv, cwd)}") from exc
    return _checked(Result(argv, Path(cwd) if cwd else None, proc.returncode, as_text(proc.stdout),
                           as_text(proc.stderr)), check)


def not_started(argv, cwd, exc: FileNotFoundError) -> CommandFailed:
    """Why ``argv`` could not start: its cwd is gone, or the command is not installed."""
    if cwd is not None and not Path(cwd).is_dir():
        return CommandFailed(f"cannot run {argv[0]}: its directory {cwd} does not exist")
    return CommandFailed(f"{argv[0]}: command not found ({exc})")


class Started:
    """A command ``start`` started, running while the caller goes on; ``result()`` reads its output,
    waits for it and returns its Result (raising as ``run`` does).  For commands with little output:
    it stays in the pipes until ``result()`` is called (one that fills them waits for it)."""

    def __init__(self, argv: list[str], cwd, proc: subprocess.Popen, check: bool, timeout: float | None):
        self._argv, self._cwd, self._proc, self._check, self._timeout = argv, cwd, proc, check, timeout
        self._result: Result | None = None

    def result(self) -> Result:
        if self._result is None:
            try:
                out, err = self._proc.communicate(timeout=self._timeout)
            except subprocess.TimeoutExpired as exc:
                self._proc.kill()
                self._proc.communicate()
                raise CommandFailed(f"timed out after {self._timeout}s: "
                                    f"{format_command(self._argv, self._cwd)}") from exc
            except BaseException:
                self._proc.kill()        # as subprocess.run does on an interrupt
                self._proc.communicate()
                raise
            self._result = Result(self._argv, Path(self._cwd) if self._cwd else None, self._proc.returncode,
                                  as_text(out), as_text(err))
        return _checked(self._result, self._check)


def start(argv, cwd=None, *, check: bool = True, quiet: bool = False,
          timeout: float | None = DEFAULT_TIMEOUT) -> Started:
    """``run``, for a command whose answer is needed a little later: echoed (unless ``quiet``) and
    started now, its output captured as text; ``Started.result()`` waits for it.  The process runs
    beside the caller's own work, with no thread to wait for it (a thread's start and the GIL passed
    to it at each system call slowed the caller's work by more than the process took)."""
    argv = [str(a) for a in argv]
    if not quiet:
        echo(argv, cwd)
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")
    except FileNotFoundError as exc:
        raise not_started(argv, cwd, exc) from exc
    return Started(argv, cwd, proc, check, timeout)


def as_text(output: str | bytes | None) -> str:
    """A child's output as text (bytes decoded, bad bytes replaced)."""
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    return output or ""


def run_pipeline(first, second, cwd=None, *, input: bytes = b"", first_env: dict | None = None, head: int = 0,
                 check: bool = True, quiet: bool = False, timeout: float | None = DEFAULT_TIMEOUT) -> Result:
    """``first | second``: ``input`` (bytes) on ``first``'s stdin, its stdout (bytes, streamed, never
    held whole) into ``second``, whose stdout is returned as text; ``first_env`` is added to ours for
    ``first`` alone.  With ``head``, ``second`` is a function of the first ``head`` bytes ``first``
    writes (short where it wrote less), returning the argv that takes the rest (None: nothing to
    take).  Echoed as one line unless ``quiet``; with ``check``, CommandFailed unless both exit 0.  The
    Result is ``second``'s, with ``first``'s exit code and message where that one failed."""
    first = [str(a) for a in first]
    env = None if first_env is None else {**os.environ, **first_env}
    try:
        feeder = subprocess.Popen(first, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        raise CommandFailed(f"{first[0]}: command not found ({exc})") from exc
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(feeder.stderr.read()), daemon=True)
    reader.start()
    taker = None
    try:
        try:
            feeder.stdin.write(input)
        except BrokenPipeError:
            pass                    # it stopped early: its exit code and message say why
        feeder.stdin.close()
        start = _read_exactly(feeder.stdout, head) if head else b""
        second = [str(a) for a in (second(start) if head else second) or []]
        if not quiet:
            echo([*first, *([PIPE, *second] if second else [])], cwd)
        if second:
            taker = subprocess.Popen(second, cwd=cwd, stdin=subprocess.PIPE if head else feeder.stdout,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if head:
                sink, taker.stdin = taker.stdin, None      # the relay's alone (communicate leaves it be)
                threading.Thread(target=_relay, args=(feeder.stdout, sink), daemon=True).start()
            else:
                feeder.stdout.close()   # the taker holds it now: the feeder sees a closed pipe if it stops
            out, err = taker.communicate(timeout=timeout)
        else:
            out, err = b"", b""
            feeder.stdout.read()
        feeder.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        for proc in filter(None, (feeder, taker)):
            proc.kill()
            proc.wait()
        raise CommandFailed(f"timed out after {timeout}s: {format_command([*first, PIPE, *second], cwd)}") from exc
    except BaseException:
        for proc in filter(None, (feeder, taker)):
            proc.kill()
            proc.wait()
        raise
    finally:
        reader.join()
    argv = [*first, *([PIPE, *second] if second else [])]
    if feeder.returncode or taker is None:
        code, stderr = feeder.returncode, errors[0] if errors else b""
    else:
        code, stderr = taker.returncode, err
    return _checked(Result(argv, Path(cwd) if cwd else None, code, out.decode("utf-8", "replace"),
                           stderr.decode("utf-8", "replace")), check)


def _read_exactly(stream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _relay(source, sink) -> None:
    """Copy ``source`` to ``sink`` until the end, then close ``sink`` (a stopped reader ends it)."""
    try:
        while chunk := source.read(65536):
            sink.write(chunk)
    except (BrokenPipeError, ValueError):
        while source.read(65536):       # the reader stopped: drain, so the writer can end
            pass
    finally:
        try:
            sink.close()
        except (BrokenPipeError, ValueError):
            pass


def _checked(result: Result, check: bool) -> Result:
    argv, cwd = result.argv, result.cwd
    if check and not result.ok:
        raise CommandFailed(
            f"command failed (exit {result.returncode}): {format_command(argv, cwd)}\n{result.error_tail()}"
        )
    return result


def _pump_inert(source, sink) -> None:
    """Copy a child's output to ``sink`` as it comes, decoded as UTF-8 and made inert."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in iter(lambda: source.read1(65536), b""):
        sink.write(inert_keeping_colour(progress_as_lines(decoder.decode(chunk)), sink))
        sink.flush()
    sink.write(inert_keeping_colour(decoder.decode(b"", final=True), sink))
    sink.flush()


def wait_killing_after(proc: subprocess.Popen, timeout: float | None) -> bool:
    """Wait for ``proc`` in one blocking ``waitpid``; kill it once ``timeout`` seconds have passed.
    True when it was killed so.  (``Popen.wait(timeout)`` polls, sleeping between checks: every
    command waited for that way ended late, a rebase-down's and a merge-up's git steps too.)"""
    if timeout is None:
        proc.wait()
        return False
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    try:
        proc.wait()
    finally:
        timer.cancel()
    return fired.is_set()


def _run_streamed(argv, cwd, env, stdin, timeout, check, shown_inert: bool) -> Result:
    """The child's output straight to ours (``shown_inert``: through ``_pump_inert``), not captured."""
    pipe = subprocess.PIPE if shown_inert else None
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=pipe, stderr=pipe)
    except FileNotFoundError as exc:
        raise not_started(argv, cwd, exc) from exc
    pumps = [threading.Thread(target=_pump_inert, args=pair, daemon=True)
             for pair in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))] if shown_inert else []
    for pump in pumps:
        pump.start()
    try:
        if wait_killing_after(proc, timeout):
            raise CommandFailed(f"timed out after {timeout}s: {format_command(argv, cwd)}")
    except KeyboardInterrupt:
        if not shown_inert:         # as subprocess.run does (the inert path always left it to end)
            proc.kill()
            proc.wait()
        raise
    finally:
        for pump in pumps:
            pump.join()
    return _checked(Result(argv, Path(cwd) if cwd else None, proc.returncode, "", ""), check)
