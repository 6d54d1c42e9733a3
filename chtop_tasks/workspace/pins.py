"""What chtop pins in every checkout: the files the host runs from it, and chtop's own code and policy.

The sandbox mounts these read-only (``sandbox/mounts.py``), and merge-up lands no change to them
(``landing.py``): one list for both, so what is pinned in the checkout is what is pinned in what lands.
"""

# What a host shell, direnv, nox, invoke or a host-side claude reads or runs
# from a checkout: never writable from inside.
# __pycache__: the bytecode of tasks.py and noxfile.py (nox writes it there), which invoke and nox
# load when its header matches the source, and which no diff shows
HOST_EXECUTED = (".git", ".envrc", ".venv", ".claude", ".nox", ".direnv", ".vscode", "__pycache__")
# chtop's own management code in the container repo: read-only in the sandbox unless the user
# opts in (sbox.run --allow-self-edit), and landed only with merge-up --allow-self-edit.
MANAGEMENT = ("tasks.py", "noxfile.py", "chtop_tasks", "invoke.yaml", "invoke.yml", "pyproject.toml",
              "dotfile_templates", "sandbox", "git_repositories.toml", "bootstrap", ".ci", "containers")
