"""Invoke entry point: `inv --list` shows every chtop task.

Works from the toplevel, any feature worktree, or any repo dir inside them:
chtop's `inv` (chtop_tasks/cli/inv.py) loads this file from the checkout root.  It imports this
checkout's own copy of chtop_tasks, never another worktree's.
"""

import os
import sys
from pathlib import Path

# The `inv` you type must be chtop's (chtop_tasks/cli/inv.py, linked by ./bootstrap): it loads this
# file whichever directory of the worktree you are in.  invoke's own `inv` searches from the current
# directory upwards, where a tasks.py the agent planted in a repo dir would run first: when that one
# loaded this file (pip put invoke's script back over chtop's, or another invoke comes first on
# PATH), refuse until it is fixed.  `python -m invoke` (tests, the dash's own runs) is left alone.
if os.environ.pop("CHTOP_INV_ROOT", None) is None and os.path.basename(sys.argv[0]) in ("inv", "invoke"):
    sys.exit(f"{sys.argv[0]} is invoke's own inv, not chtop's: it looks for tasks.py from the current "
             "directory upwards, so a tasks.py an agent planted in a repo dir would run as you.\n"
             f"Run ./bootstrap again (in {Path(__file__).resolve().parent}): it links inv and invoke to "
             "chtop's (chtop-inv), which loads only the checkout's own tasks.py.  Or run `chtop TASK`.")

# PYTHONSAFEPATH=1 (set by every workspace's .envrc) drops the script's dir
# from sys.path; put this checkout first so its own chtop_tasks is used.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Bytecode, before any chtop module loads.  A .pyc in a __pycache__ beside the source shows in no
# diff, and with --allow-self-edit the agent can write one here: so the host reads and writes
# bytecode only in your own ~/.cache/chtop/pycache (the .envrc sets the same for your shell; the
# Python processes this one starts inherit it).  invoke turns bytecode writing off for its process
# (unless `inv --write-pyc`), which had the task modules compiled from source on every run: back
# on.  Not when you asked for no bytecode (-B, PYTHONDONTWRITEBYTECODE): a prefix with nothing
# written to it would have every module compiled on every start.
if not sys.flags.dont_write_bytecode:
    sys.dont_write_bytecode = False
    if not sys.pycache_prefix:
        cache = os.environ.get("XDG_CACHE_HOME", "")
        cache = cache if os.path.isabs(cache) else os.path.join(os.path.expanduser("~"), ".cache")
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(cache, "chtop", "pycache")

# chtop's light task path (chtop_tasks/cli/inv.py) runs only the lines above, then the one task it was asked for.
if __name__ != "chtop_prologue":
    from chtop_tasks import namespace as ns  # noqa: F401
