"""``@task`` for chtop's task modules: invoke's, or on the light task path a record of the same call.

The light task path (``faststart.py``) sets ``LIGHT`` before it imports the task modules: then
``@task`` records its arguments instead of importing invoke, and a task's exit is a TaskExit, which
that path handles as invoke's program handles invoke's ``Exit``.  Outside the ``tasks`` package, so
that the flag is set before any task module is imported.
"""

from __future__ import annotations

LIGHT = False


class LightTask:
    """What ``@task`` was given, on the light task path: the body and the decorator's arguments."""

    def __init__(self, body, options: dict, pre: tuple):
        self.body, self.options, self.pre = body, options, pre


def task(*args, **kwargs):
    """invoke's ``@task`` (bare or with arguments); on the light task path a LightTask of the same call."""
    if not LIGHT:
        from invoke import task as invoke_task

        return invoke_task(*args, **kwargs)
    if len(args) == 1 and callable(args[0]) and not isinstance(args[0], LightTask) and not kwargs:
        return LightTask(args[0], {}, ())
    return lambda body: LightTask(body, kwargs, args)


class TaskExit(Exception):
    """A task's ``Exit(message, code)`` on the light task path, which handles it as invoke's program does."""

    def __init__(self, message: str | None, code: int):
        super().__init__(message)
        self.message, self.code = message, code


def task_exit(code: int, message: str | None = None) -> Exception:
    if LIGHT:
        return TaskExit(message, code)
    from invoke import Exit

    return Exit(message, code=code)
