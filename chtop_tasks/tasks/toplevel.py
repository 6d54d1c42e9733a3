"""toplevel.*: set up the toplevel clone."""

from invoke import task

from ..workspace import toplevel as toplevel_ops
from ..workspace.layout import find_workspace
from .common import reports_errors, venv_builder


@task(help={"no_venv": "skip building the toplevel's .venv"})
@reports_errors
def init(c, no_venv=False):
    """Clone the manifest's repos into the toplevel, render dotfiles, build the venv."""
    ws = find_workspace()
    toplevel_ops.init_toplevel(ws, venv_builder(not no_venv))
