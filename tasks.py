"""Invoke entry point: `inv --list` shows every chtop task.

Works from the toplevel, any feature worktree, or any repo dir inside them
(invoke searches parent directories for this file).  It imports this
checkout's own copy of chtop_tasks, never another worktree's.
"""

import sys
from pathlib import Path

# PYTHONSAFEPATH=1 (set by every workspace's .envrc) drops the script's dir
# from sys.path; put this checkout first so its own chtop_tasks is used.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# invoke turns bytecode writing off for its whole process (unless `inv --write-pyc`), so the task
# modules, which only `inv` imports, were compiled from source on every run (about 5 ms of each
# launch).  Back on, unless the user asked for none (-B, PYTHONDONTWRITEBYTECODE).  chtop_tasks/ is
# read-only inside every sandbox, so what lands in its __pycache__ is the host's own.
sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)

from chtop_tasks import namespace as ns  # noqa: E402,F401
