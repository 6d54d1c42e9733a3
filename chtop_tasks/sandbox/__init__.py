"""The sandbox boundary: rootless podman around a worktree (or a --dir).

Public interface: ``launch(LaunchRequest)`` (the one entry), and its parts
``plan_launch`` (pure), ``prepare_launch`` (side effects), ``run_plan``;
``list_sandboxes``, ``shell_command`` and ``show_warnings`` for the tasks.  What a target is comes from ``chtop_tasks.core.places``.  The
security model is in mounts.py's docstring and the README's "Security
model".

May import: ``errors``, ``runner``, ``places``, ``workspace`` and ``proxy``
(to start the group's proxy); never ``agents`` or ``tasks``.
"""

from .running import sandboxes_in

__all__ = ["LaunchPlan", "LaunchRequest", "format_sandbox_table", "launch", "launch_line", "list_sandboxes",
           "plan_launch", "plan_request", "prepare_launch", "run_plan", "sandboxes_in", "shell_command", "show_warnings"]


def __getattr__(name: str):
    """The launcher's names, imported when first asked for: the busy checks (``sandboxes_in``, from
    the small ``running`` module) do not pay for the launcher and what a launch needs."""
    if name in __all__:
        from . import launcher

        return getattr(launcher, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
