"""`nox -s gpu_smoke [-- --name NAME]`: a real GPU compute check in a worktree's sandbox.

The check itself is gpu_check.py (a cupy reduction, else an nvcc-compiled
kernel, compared with the known answer), passed to the sandbox's python as
``python3 -c SOURCE`` so it needs no path inside the container.  Without
NVIDIA device nodes on the host the session skips, saying so.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from . import gpu_check
from .errors import ChtopError, UsageError


def parse_args(posargs: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nox -s gpu_smoke --", exit_on_error=False)
    parser.add_argument("--name", help="the worktree to check (default: the one we are in)")
    try:
        return parser.parse_args(posargs)
    except (argparse.ArgumentError, SystemExit) as exc:
        raise UsageError(f"gpu_smoke: bad arguments {posargs!r} ({exc}); usage: nox -s gpu_smoke -- [--name NAME]") from None


def check_command() -> list[str]:
    return ["python3", "-c", Path(gpu_check.__file__).read_text()]


def run_in_sandbox(cwd: Path, name: str | None = None) -> int:
    """gpu_check.py's exit status, run in the sandbox of worktree ``name`` (or ``cwd``'s)."""
    from .sandbox import plan_launch, run_plan, target_for
    from .workspace import find_workspace

    root = cwd
    if name:
        root = find_workspace(cwd).worktree_root(name)
        if not root.is_dir():
            raise UsageError(f"no worktree {name!r} at {root}; see `inv worktree.list`")
    target = target_for(root)
    plan = plan_launch(target, check_command(), interactive=False, purpose="gpu-smoke")
    for warning in plan.warnings:
        print(f"chtop: {warning}")
    return run_plan(plan)


def session_body(session) -> None:
    """The body of the nox session (noxfile.py: gpu_smoke)."""
    try:
        args = parse_args(list(session.posargs))
    except UsageError as exc:
        session.error(str(exc))
    nodes = gpu_check.device_nodes()
    if not nodes:
        session.skip("no NVIDIA device nodes (/dev/nvidia*) on this host: no GPU to check")
    if shutil.which("podman") is None:
        session.skip("podman is not installed: no sandbox to check the GPU in")
    session.log(f"GPU device nodes: {' '.join(nodes)}")
    try:
        status = run_in_sandbox(Path.cwd(), args.name)
    except ChtopError as exc:
        session.error(str(exc))
    if status == gpu_check.SKIP:
        session.error("the host has NVIDIA device nodes but the sandbox sees none: check sandbox/devices.txt")
    if status != 0:
        session.error(f"the GPU compute check failed in the sandbox (exit {status}); see the lines above")
    session.log("GPU compute check passed in the sandbox")
