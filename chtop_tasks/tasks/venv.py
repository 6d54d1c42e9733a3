"""venv.*: build a workspace's .venv."""

from pathlib import Path

from ..cli.taskdef import task
from .common import lazy, reports_errors

INSTALLER_ENV = "CHTOP_INSTALLER"   # venv.build's own name for it (a test checks they agree)
venv_sandboxed = lazy("venv.sandboxed")
layout = lazy("workspace.layout")


@task(
    help={
        "workdir": "the checkout whose .venv to build (default: the one around the current dir)",
        "recreate": "DELETE <root>/.venv first and build it from scratch (default: reuse it)",
        "test": "also run each repo's `test` command from the manifest",
        "installer": f"pip or uv (default: ${INSTALLER_ENV}, else uv when on PATH, else pip)",
        "dry_run": "print the plan (every command, in order) and run nothing",
    }
)
@reports_errors
def build(c, workdir=None, recreate=False, test=False, installer=None, dry_run=False):
    """Build <root>/.venv: install every manifest repo, smoke-import each from a scratch dir (a feature
    worktree's: inside its sandbox)."""
    ws = layout.find_workspace(Path(workdir) if workdir else None)
    venv_sandboxed.build_workspace_venv(ws, recreate=recreate, test=test, installer=installer, dry_run=dry_run)
