"""What every thin task shares: turning typed errors into exit codes."""

from __future__ import annotations

import functools
import importlib

from invoke import Exit

from .. import term
from ..errors import ChtopError


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
            raise Exit(code=exc.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None
        if code:
            raise Exit(code=code)

    return wrapper


def venv_builder(enabled: bool):
    """The venv step for init/create, or None with --no-venv."""
    if not enabled:
        return None
    from ..venv.build import build_venv

    def build(ws):
        if (ws.venv_dir / "bin" / "python").exists() and ws.is_toplevel:
            print(f"venv {ws.venv_dir} present (rebuild: inv venv.build --recreate)", flush=True)
            return
        try:
            build_venv(ws.root, ws.manifest)
        except ChtopError as exc:
            raise ChtopError(f"{exc}\nThe checkouts are kept: only the venv needs the retry, once the cause "
                             f"is fixed:  inv venv.build --workdir {ws.root}", exc.exit_code) from exc

    return build
