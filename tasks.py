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

from chtop_tasks import namespace as ns  # noqa: E402,F401
