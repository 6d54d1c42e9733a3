"""The Invoke namespaces.  Add a module here to add a namespace."""

import importlib

_NAMESPACE_MODULES = ["toplevel", "worktree", "git", "venv", "net", "sbox"]

NAMESPACES = []
for _name in _NAMESPACE_MODULES:
    try:
        NAMESPACES.append(importlib.import_module(f"{__name__}.{_name}"))
    except ModuleNotFoundError as exc:  # a namespace not written yet
        if exc.name != f"{__name__}.{_name}":
            raise

ROOT_TASKS = []

from .demo import demo  # noqa: E402

ROOT_TASKS.append(demo)
