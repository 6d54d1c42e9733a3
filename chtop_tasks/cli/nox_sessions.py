"""The bodies of chtop's own nox sessions (noxfile.py only points here).

Every session parses its ``session.posargs`` with :class:`SessionArgs`
(argparse that raises UsageError instead of exiting) and turns a ChtopError
into ``session.error``.

``nox -s venv -- --name NAME``: build a named worktree's venv.

``nox -s gpu_smoke [-- --name NAME]``: a real GPU compute check in a
worktree's sandbox.  The check itself is gpu_check.py (a cupy reduction, else an nvcc-compiled
kernel, compared with the known answer), passed to the sandbox's python as
``python3 -c SOURCE`` so it needs no path inside the container.  Without
NVIDIA device nodes on the host the session skips, saying so.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ..core.errors import ChtopError, UsageError
from ..incontainer import gpu_check
from ..venv.build import INSTALLERS
from ..venv.sandboxed import build_workspace_venv


class SessionArgs(argparse.ArgumentParser):
    """argparse for ``session.posargs``: a bad argument is a UsageError, never sys.exit."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().strip()}")


def parse_args(posargs: list[str]) -> argparse.Namespace:
    """gpu_smoke's arguments."""
    parser = SessionArgs(prog="nox -s gpu_smoke --", add_help=False)
    parser.add_argument("--name", help="the worktree to check (default: the one we are in)")
    return parser.parse_args(posargs)


def check_command() -> list[str]:
    return ["python3", "-c", Path(gpu_check.__file__).read_text()]


def run_in_sandbox(cwd: Path, name: str | None = None) -> int:
    """gpu_check.py's exit status, run in the sandbox of worktree ``name`` (or ``cwd``'s)."""
    from ..sandbox import LaunchRequest, launch
    from ..workspace.layout import find_workspace
    from ..workspace.targets import target_for

    root = cwd
    if name:
        root = find_workspace(cwd).worktree_root(name)
        if not root.is_dir():
            from ..workspace.suggest import require_feature_worktree

            require_feature_worktree(find_workspace(cwd).grouping, name)
    return launch(LaunchRequest(target_for(root), check_command(), purpose="gpu-smoke"))


def gpu_smoke_body(session) -> None:
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


def parse_session_args(posargs: list[str]) -> argparse.Namespace:
    parser = SessionArgs(prog="nox -s venv --", add_help=False)
    parser.add_argument("--name", default=None, help="worktree name (default: the current checkout)")
    parser.add_argument("--recreate", action="store_true")
    parser.add_argument("--test", action="store_true")
    parser.add_argument("--installer", choices=INSTALLERS, default=None)
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args(posargs)


def session_root(name: str | None, start: Path | None = None):
    """The workspace a ``nox -s venv -- --name NAME`` run builds."""
    from ..workspace.layout import find_workspace  # the workspace model reads the real layout

    ws = find_workspace(start)
    if not name:
        return ws
    if name == ws.toplevel.name:
        root = ws.toplevel
    elif name in ws.reserved_names() or "/" in name or name in (".", ".."):
        raise UsageError(f"{name!r} is not a worktree name")
    else:
        root = ws.worktree_root(name)
    if not root.is_dir():
        from ..workspace.suggest import require_feature_worktree

        require_feature_worktree(ws.grouping, name)
    other = find_workspace(root)
    if other.root != root.resolve():
        raise UsageError(f"{root} is not a checkout of this workspace")
    return other


def venv_body(session) -> None:
    """nox session body: build a named worktree's venv (``nox -s venv -- --name dev``)."""
    try:
        args = parse_session_args(list(session.posargs))
        ws = session_root(args.name)
        build_workspace_venv(ws, recreate=args.recreate, test=args.test, installer=args.installer,
                             dry_run=args.dry_run)
    except ChtopError as exc:
        session.error(str(exc))
