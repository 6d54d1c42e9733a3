"""The one way chtop runs git on the host: through the runner (echoed unless quiet), with the
options that keep anything an agent wrote from running.

What every host-side git command chtop runs adds: nothing of the agent's may run (fsmonitor,
submodule recursion into agent-written gitdirs, replace refs, an untracked cache it planted).  The
configs git reads are chtop's anyway (a worktree's private store has a pinned config); this is the
second lock on the door.
"""

from __future__ import annotations

from pathlib import Path

from . import runner

HOST_GIT_OPTS = ("--no-replace-objects", "-c", "core.fsmonitor=false", "-c", "submodule.recurse=false",
                 "-c", "core.untrackedCache=false")


def git(cwd: Path | None, args, *, check=True, quiet=True, capture=True, timeout=300,
        input: str | bytes | None = None, toplevel_only: bool = False, env: dict | None = None) -> runner.Result:
    """``git ARGS`` in ``cwd`` with HOST_GIT_OPTS; echoed unless ``quiet``.

    ``toplevel_only``: the command reads and writes nothing but the toplevel's own checkouts and
    stores (a clone, a branch made or deleted there), which no sandbox can write: plain git, and
    the echoed line is the one a user would type.  ``env``: variables set for this git alone.
    """
    argv = ["git", *args] if toplevel_only else ["git", *HOST_GIT_OPTS, *args]
    return runner.run(argv, cwd=cwd, check=check, quiet=quiet, capture=capture, timeout=timeout, input=input,
                      env=env)


def git_started(cwd: Path, args, *, check=True, quiet=True, timeout=300) -> runner.Started:
    """``git ARGS`` in ``cwd`` with HOST_GIT_OPTS, started now; its ``result()`` waits for it
    (``runner.start``)."""
    return runner.start(["git", *HOST_GIT_OPTS, *args], cwd=cwd, check=check, quiet=quiet, timeout=timeout)


def git_pipeline(cwd: Path, first_args, choose_second, *, head: int, input: bytes = b"",
                 first_env: dict | None = None, check=True, quiet=True, timeout=300) -> runner.Result:
    """``git FIRST | git SECOND`` in ``cwd``, both with HOST_GIT_OPTS (``runner.run_pipeline``): SECOND
    is ``choose_second`` of the first ``head`` bytes the first git writes (None: nothing to take);
    ``first_env``: variables set for the first git alone."""
    def second(start: bytes):
        args = choose_second(start)
        return None if args is None else ["git", *HOST_GIT_OPTS, *args]
    return runner.run_pipeline(["git", *HOST_GIT_OPTS, *first_args], second, cwd, input=input,
                               first_env=first_env, head=head, check=check, quiet=quiet, timeout=timeout)
