"""The sandbox boundary: rootless podman around a worktree (or a --dir).

Public interface: ``LaunchPlan``, ``plan_launch``, ``run_plan``,
``exec_plan`` (and ``list_sandboxes``, ``shell_command``, ``show_warnings``
for the tasks).  What a target is comes from ``chtop_tasks.places``.  The
security model is in mounts.py's docstring and the README's "Security
model".

May import: ``errors``, ``runner``, ``places``, ``workspace`` and ``proxy``
(to start the group's proxy); never ``agents`` or ``tasks``.
"""

from .launch import (
    LaunchPlan,
    exec_plan,
    format_sandbox_table,
    launch_line,
    list_sandboxes,
    plan_launch,
    run_plan,
    sandboxes_in,
    shell_command,
    show_warnings,
)

__all__ = ["LaunchPlan", "exec_plan", "format_sandbox_table", "launch_line", "list_sandboxes", "plan_launch", "run_plan", "sandboxes_in", "shell_command", "show_warnings"]
