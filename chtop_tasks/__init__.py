"""chtop: named multi-repo worktrees, each with its own sandboxed agent.

The root Invoke collection, one namespace per noun.  The namespace modules
in ``chtop_tasks.tasks`` hold only thin @task functions; the logic lives in
the plain modules beside this file.  The collection is built on first use
(``from chtop_tasks import namespace``), so processes that only need a plain
module, such as the proxy daemon, do not import every task.
"""


def build_namespace():
    from invoke import Collection

    from .tasks import NAMESPACES, ROOT_TASKS

    root = Collection()
    for module in NAMESPACES:
        root.add_collection(Collection.from_module(module))
    for task in ROOT_TASKS:
        root.add_task(task)
    return root


def __getattr__(name):
    if name == "namespace":
        value = build_namespace()
        globals()["namespace"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
