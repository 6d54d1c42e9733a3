"""venv.*: build a workspace's .venv."""

from pathlib import Path

from invoke import task

from ..venv.build import INSTALLER_ENV, build_venv
from ..workspace.layout import find_workspace
from .common import reports_errors


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
    """Build <root>/.venv: install every manifest repo, smoke-import each from a scratch dir."""
    ws = find_workspace(Path(workdir) if workdir else None)
    build_venv(ws.root, ws.manifest, recreate=recreate, test=test, installer=installer, dry_run=dry_run)
