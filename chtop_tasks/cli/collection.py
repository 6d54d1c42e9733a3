"""The root invoke collection: one namespace per noun from ``chtop_tasks.tasks``, and the root tasks."""


def build_namespace():
    from invoke import Collection

    from ..tasks import NAMESPACES, ROOT_TASKS

    root = Collection()
    for module in NAMESPACES:
        root.add_collection(Collection.from_module(module))
    for task in ROOT_TASKS:
        root.add_task(task)
    return root
