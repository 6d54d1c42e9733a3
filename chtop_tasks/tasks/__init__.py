"""The Invoke namespaces, one module per noun, and the root-level tasks.

Imported on first use: ``NAMESPACES`` and ``ROOT_TASKS`` import every task module (invoke's
collection, ``inv --list``); the light task path (``faststart``) imports only the module of the one task
it runs, by these names.
"""

import sys

NAMESPACE_MODULES = ("toplevel", "worktree", "git", "venv", "net", "notify", "sbox", "agent", "session", "host")
ROOT_TASK_MODULES = {"demo": "demo", "dash": "dash"}     # root task -> the module that defines it


def namespace_module(name: str):
    """The task module ``name``, imported by the import statement's own path (so ``-X importtime``
    shows it, as it does every other import)."""
    full = f"{__name__}.{name}"
    __import__(full)
    return sys.modules[full]


def root_task(name: str):
    return getattr(namespace_module(ROOT_TASK_MODULES[name]), name)


def __getattr__(name):
    if name == "NAMESPACES":
        return [namespace_module(module) for module in NAMESPACE_MODULES]
    if name == "ROOT_TASKS":
        return [root_task(task) for task in ROOT_TASK_MODULES]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
