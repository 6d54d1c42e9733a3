"""chtop: named multi-repo worktrees, each with its own sandboxed agent.

The root Invoke collection, one namespace per noun.  The namespace modules
in ``chtop_tasks.tasks`` hold only thin @task functions; the logic lives in
the plain modules beside this file.
"""

from invoke import Collection

from .tasks import NAMESPACES, ROOT_TASKS


def build_namespace() -> Collection:
    root = Collection()
    for module in NAMESPACES:
        root.add_collection(Collection.from_module(module))
    for task in ROOT_TASKS:
        root.add_task(task)
    return root


namespace = build_namespace()
