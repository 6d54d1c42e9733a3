"""What every thin task shares: turning typed errors into exit codes."""

from __future__ import annotations

import functools
import importlib

from ..cli.taskdef import task_exit
from ..core import term
from ..core.errors import ChtopError


class LazyModule:
    """A chtop module imported when a task first uses it.  Every ``inv`` start loads every task
    module; importing each one's logic up front would make every task pay for all of them."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        module = importlib.import_module(self._name)
        self.__dict__.update(vars(module))   # later lookups are plain attribute reads
        return getattr(module, attr)


def lazy(name: str) -> LazyModule:
    return LazyModule(f"chtop_tasks.{name}")


def reports_errors(func):
    """Run a task body; a ChtopError becomes ``Exit(message, code)``."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            code = func(*args, **kwargs)
        except ChtopError as exc:
            term.error(str(exc))
            raise task_exit(exc.exit_code) from None
        except KeyboardInterrupt:
            raise task_exit(130, "interrupted") from None
        if code:
            raise task_exit(code)

    return wrapper


def venv_builder(enabled: bool):
    """The venv step for init/create, or None with --no-venv."""
    if not enabled:
        return None
    from ..venv.sandboxed import build_workspace_venv
    from ..workspace.venvstamp import venv_state

    def build(ws):
        state = venv_state(ws.venv_dir)
        if state == "complete" and ws.is_toplevel:
            print(f"venv {ws.venv_dir} present (rebuild: inv venv.build --recreate)", flush=True)
            return
        if state == "incomplete":
            print(f"venv {ws.venv_dir} is incomplete (its last build did not finish): building it again",
                  flush=True)
        try:
            build_workspace_venv(ws)
        except ChtopError as exc:
            again = "" if ws.is_toplevel else f", or run the same `inv worktree.create --name {ws.name}` again"
            raise ChtopError(f"{exc}\nThe checkouts are kept: only the venv needs that retry{again}.",
                             exc.exit_code) from exc

    return build
