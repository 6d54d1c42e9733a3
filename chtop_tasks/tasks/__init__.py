"""The Invoke namespaces, one module per noun, and the root-level tasks."""

from . import git, host, net, notify, sbox, session, toplevel, venv, worktree
from .dash import dash
from .demo import demo

NAMESPACES = [toplevel, worktree, git, venv, net, notify, sbox, session, host]
ROOT_TASKS = [demo, dash]
