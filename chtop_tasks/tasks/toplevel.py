"""toplevel.*: set up the toplevel clone."""

from ..cli.taskdef import task
from .common import lazy, reports_errors, venv_builder

toplevel_ops = lazy("workspace.toplevel")
layout = lazy("workspace.layout")


@task(help={"no_venv": "skip building the toplevel's .venv"})
@reports_errors
def init(c, no_venv=False):
    """Clone the manifest's repos into the toplevel, render dotfiles, build the venv."""
    ws = layout.find_workspace()
    toplevel_ops.init_toplevel(ws, venv_builder(not no_venv))
