"""chtop: named multi-repo worktrees, each with its own sandboxed agent.

One package per concern: ``core`` (errors, the runners, output, where things live), ``workspace``
(the model), ``stores`` (private git stores and their import), ``gitloop`` (the cross-repo git
loop), ``sandbox``, ``proxy``, ``venv``, ``agents``, ``sessions``, ``notify``, ``hosts``,
``dash``, ``incontainer`` (scripts run inside a sandbox), and the entry points: ``tasks`` (the
thin invoke namespaces) and ``cli`` (the chtop command, chtop's inv, the root collection).

The root invoke collection is built on first use (``from chtop_tasks import namespace``, as
tasks.py does), so processes that only need a plain module, such as the proxy daemon, do not
import every task.
"""


def __getattr__(name):
    if name == "namespace":
        from .cli.collection import build_namespace

        value = build_namespace()
        globals()["namespace"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
