"""The sandbox boundary: rootless podman around a worktree (or a --dir).

Public interface: ``Target``, ``target_for``, ``LaunchPlan``,
``plan_launch``, ``run_plan`` (and ``list_sandboxes``, ``shell_command``,
``show_warnings`` for the tasks).  The security model is in mounts.py's
docstring and the README's "Security model".
"""

from .launch import (
                     LaunchPlan,
                     Target,
                     exec_plan,
                     group_dir_for,
                     list_sandboxes,
                     plan_launch,
                     run_plan,
                     shell_command,
                     show_warnings,
                     target_for,
)

__all__ = ["LaunchPlan", "Target", "exec_plan", "group_dir_for", "list_sandboxes", "plan_launch", "run_plan", "shell_command",
           "show_warnings", "target_for"]
