"""The in-sandbox half of a feature worktree's venv build (``sandboxed.py`` is the host's half).

Run inside the worktree's sandbox as ``python -m chtop_tasks.venv.build_inside PLAN`` from the
*toplevel's* chtop (read-only inside; never the worktree's copy), with ``PLAN`` the build as data
(JSON: the root, the installer, ``--test``, the log file, and the steps of ``build.plan_build``).
It runs the steps with ``build.run_build_steps``, each step's whole output going to the log (a
file the host made in the build's own cache dir), and writes the completion stamp last; the host
reads back only the stamp and the log, as data (``agentfile``: no link followed, no blocking).
What it prints is the agent's text (its build's output, its metadata): printed inert.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, fields
from pathlib import Path

from ..core.errors import ChtopError
from ..core.term import error, say
from ..workspace import venvstamp as stamp
from .build import BuildStep, run_build_steps, venv_dir
from .buildlog import BuildLog

RETRY_LINE = "Fix the cause, then retry the venv alone:"   # build._failure's last line
LOG_NAME = "build.log"      # in the build's log dir (sandboxed.build_log_dir), made by the host
_PATHS = {"cwd"}
_TUPLES_OF_PATHS = {"paths"}
_PAIRS = {"env"}


def plan_to_json(root: Path, installer: str, test: bool, steps: list[BuildStep], log: Path | None = None) -> str:
    """The build as data for the command line of the sandbox."""
    def step(s: BuildStep) -> dict:
        out = asdict(s)
        out["cwd"] = None if s.cwd is None else str(s.cwd)
        out["paths"] = [str(p) for p in s.paths]
        return out
    return json.dumps({"root": str(root), "installer": installer, "test": test, "steps": [step(s) for s in steps],
                       "log": None if log is None else str(log)})


def log_from_json(text: str) -> Path | None:
    """The log file ``plan_to_json`` named, or None."""
    log = json.loads(text).get("log")
    return None if log is None else Path(str(log))


def plan_from_json(text: str) -> tuple[Path, str, bool, list[BuildStep]]:
    """``plan_to_json`` read back; ValueError (KeyError, TypeError) for anything else."""
    data = json.loads(text)
    names = {f.name for f in fields(BuildStep)}
    steps = []
    for item in data["steps"]:
        kwargs = {}
        for key, value in item.items():
            if key not in names:
                raise ValueError(f"unknown step field {key!r}")
            if key in _PATHS:
                value = None if value is None else Path(value)
            elif key in _TUPLES_OF_PATHS:
                value = tuple(Path(v) for v in value)
            elif key in _PAIRS:
                value = tuple((str(k), str(v)) for k, v in value)
            elif isinstance(value, list):
                value = tuple(str(v) for v in value)
            kwargs[key] = value
        steps.append(BuildStep(**kwargs))
    return Path(data["root"]), str(data["installer"]), bool(data["test"]), steps


def empty_dir(path: Path) -> None:
    """The "remove" step inside: ``.venv`` is a mount point there, so its contents go, not it."""
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def build_inside(text: str) -> None:
    root, installer, test, steps = plan_from_json(text)
    vdir = venv_dir(root)
    stamp.clear_stamp(vdir)
    if steps and steps[0].kind == "remove":
        print(f"# {steps[0].note}: emptying {vdir}", flush=True)
        empty_dir(vdir)
        steps = steps[1:]
    log_file = log_from_json(text)
    log = BuildLog(log_file) if log_file is not None else None
    report = run_build_steps(steps, root, test=test, installer=installer, log=log)
    stamp.write_stamp(vdir)   # last: only a build that got here is complete
    report.log = None         # the host names the log it keeps
    say(report.summary())     # names requirements from the repos' metadata, which the agent writes


# the exit status of a build stopped by Ctrl-C (128 + SIGINT), which the host reports as an interrupt
INTERRUPTED = 130


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m chtop_tasks.venv.build_inside PLAN_JSON", file=sys.stderr)
        return 2
    # PYTHONPATH named the toplevel, for this module alone: the build's own pythons must not see the
    # toplevel's checkout dirs (its ``alpha/`` would shadow the worktree's package as a namespace one)
    os.environ.pop("PYTHONPATH", None)
    try:
        build_inside(argv[1])
    except ChtopError as exc:   # the host says how to retry (``sandboxed.build_in_sandbox``)
        kept = [line for line in str(exc).splitlines()
                if not line.startswith(RETRY_LINE) and not line.strip().startswith("its whole output:")]
        error("\n".join(kept))
        return exc.exit_code or 1
    except KeyboardInterrupt:   # Ctrl-C reached the sandbox: the host says what was kept
        error("interrupted")
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
