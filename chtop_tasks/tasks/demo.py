"""demo: the main job on a built-in example."""

from ..cli.taskdef import task
from .common import reports_errors


@task(help={"dir": "where to build the demo (default: a new temp dir)",
            "no_venv": "skip the venv builds (faster)",
            "no_sandbox": "skip the proxy and sandbox steps (no podman needed)"})
@reports_errors
def demo(c, dir=None, no_venv=False, no_sandbox=False):  # noqa: A002
    """Run the whole workflow, narrated, on two sample repos in a temp grouping dir."""
    from ..cli.demo import run_demo

    run_demo(dir, venv=not no_venv, sandbox=not no_sandbox)
