"""`inv demo`: the main job, narrated, on two sample repos in a temp grouping dir.

Everything runs as a user would type it: real git, real bare remotes, and
each step is the `inv` command a user would run, in the dir they would run
it from.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from ..core import runner
from ..core.errors import CommandFailed
from ..core.term import bold, say

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def pyproject(name: str) -> str:
    return (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n'
    )


SAMPLES = {
    "mathcore": {
        "branch": "main",
        "files": {
            "pyproject.toml": pyproject("mathcore"),
            "mathcore/__init__.py": """\
                def add(a, b):
                    return a + b
                """,
        },
    },
    "mathapp": {
        "branch": "main",
        "files": {
            "pyproject.toml": pyproject("mathapp"),
            "mathapp/__init__.py": """\
                from mathcore import add

                def total(values):
                    result = 0
                    for value in values:
                        result = add(result, value)
                    return result
                """,
        },
    },
}

DEMO_MANIFEST = """\
# Demo manifest written by `inv demo`: two sample repos as local bare remotes.
[[repo]]
name = "mathcore"
url = "{remotes}/mathcore.git"
branch = "main"
install = "editable-no-build-isolation"
smoke_import = "mathcore"

[[repo]]
name = "mathapp"
url = "{remotes}/mathapp.git"
branch = "main"
install = "editable-no-build-isolation"
smoke_import = "mathapp"
test = "python -c \\"import mathapp; assert mathapp.total([1, 2, 3]) == 6\\""
"""

DEMO_ENV = {
    "GIT_AUTHOR_NAME": "chtop demo", "GIT_AUTHOR_EMAIL": "demo@chtop.invalid",
    "GIT_COMMITTER_NAME": "chtop demo", "GIT_COMMITTER_EMAIL": "demo@chtop.invalid",
}


def narrate(text: str) -> None:
    say()
    say(bold("## " + text))


def git(cwd: Path, *args: str) -> runner.Result:
    return runner.run(["git", *args], cwd=cwd, env=DEMO_ENV)


def make_sample_remote(remotes: Path, name: str, spec: dict) -> Path:
    seed = remotes / f"{name}-seed"
    for rel, text in spec["files"].items():
        path = seed / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    git(remotes, "init", "-q", "-b", spec["branch"], str(seed))
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", f"{name}: first version")
    bare = remotes / f"{name}.git"
    git(remotes, "clone", "-q", "--bare", str(seed), str(bare))
    runner.run(["rm", "-rf", str(seed)], quiet=True)
    return bare


def clone_project_as_toplevel(grouping: Path, manifest: str) -> Path:
    """This project cloned as ``grouping/top``, with ``manifest`` committed in it."""
    top = grouping / "top"
    git(grouping, "clone", "-q", str(PROJECT_ROOT), str(top))
    (top / "git_repositories.toml").write_text(manifest)
    git(top, "commit", "-q", "-am", "demo: manifest naming the sample repos")
    return top


def inv(cwd: Path, *args: str, check: bool = True) -> int:
    """Run `inv ARGS` in ``cwd``, showing it as the user would type it."""
    say(f"{cwd}$ inv {shlex.join(args)}")
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=dict(os.environ, **DEMO_ENV),
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode:
        raise CommandFailed(f"demo step `inv {' '.join(args)}` failed (exit {proc.returncode}) in {cwd}")
    return proc.returncode


def edit_and_commit(checkout: Path, rel: str, old: str, new: str, message: str) -> None:
    path = checkout / rel
    path.write_text(path.read_text().replace(old, new))
    git(checkout, "commit", "-q", "-am", message)


def run_demo(base: Path | None = None, venv: bool = True, sandbox: bool = True) -> Path:
    base = Path(base or tempfile.mkdtemp(prefix="chtop-demo-"))
    remotes, grouping = base / "remotes", base / "ch"
    remotes.mkdir(parents=True, exist_ok=True)
    grouping.mkdir(exist_ok=True)
    no_venv = [] if venv else ["--no-venv"]

    narrate(f"1. Two sample repos (mathapp imports mathcore) as bare remotes in {remotes}")
    for name, spec in SAMPLES.items():
        make_sample_remote(remotes, name, spec)

    narrate(f"2. This project cloned as the toplevel {grouping}/top, its manifest naming the samples")
    top = clone_project_as_toplevel(grouping, DEMO_MANIFEST.format(remotes=remotes))

    narrate("3. toplevel.init: clone every repo, render dotfiles, build the venv (smoke imports run)")
    inv(top, "toplevel.init", *no_venv)
    narrate("   ...and again: it is idempotent")
    inv(top, "toplevel.init", *no_venv)

    narrate("4. worktree.create: ../dev with a worktree of every repo on branch dev, and its own venv")
    inv(top, "worktree.create", "--name", "dev", *no_venv)
    dev = grouping / "dev"

    narrate("5. Work in dev: a commit in mathcore; meanwhile a colleague lands a change on mathapp's main")
    edit_and_commit(dev / "mathcore", "mathcore/__init__.py", "return a + b", "return b + a", "mathcore: commute")
    edit_and_commit(top / "mathapp", "mathapp/__init__.py", "result = 0", "result = 0  # start", "mathapp: note")

    narrate("6. git.status across all repos, with how dev relates to the integration branches")
    inv(dev, "git.status", "--", "-sb", check=False)

    narrate("7. git.rebase-down: bring dev up to date with integration (only mathapp needs it)")
    inv(dev, "git.rebase-down")

    narrate("8. git.merge-up: fast-forward main to dev where dev is ahead (mathcore)")
    inv(dev, "git.merge-up")
    inv(dev, "git.status", check=False)

    if sandbox:
        narrate("9. The egress proxy, then a probe in dev's sandbox: what can it see and reach?")
        inv(top, "net.start")
        inv(dev, "sbox.run", "--", "python3", "chtop_tasks/incontainer/probe.py",
            "--host-home", str(Path.home()), "--toplevel", str(top))
        narrate("   The agent's work: a commit in dev/mathapp from inside the sandbox, seen on the host")
        inv(dev, "sbox.run", "--", "sh", "-c",
            "cd mathapp && echo 'Totals of integer lists.' > NOTES.md && git add NOTES.md && "
            "git commit -q -m 'mathapp: notes, written in the sandbox' && echo '  committed inside the sandbox'")
        say(git(dev / "mathapp", "log", "-1", "--format=  on the host: %h %s (%an)").stdout.rstrip())
        inv(dev, "git.merge-up")
        narrate("   The proxy's log: the allowed and the blocked CONNECT (approve with inv net.allow)")
        inv(top, "net.pending")
        inv(top, "net.stop")

    narrate("10. worktree.delete: nothing unmerged, so dev goes (its branches too)")
    inv(top, "worktree.delete", "--name", "dev")
    inv(top, "worktree.list")

    narrate(f"Done. The demo group is in {grouping} (remove it with: rm -rf {base})")
    return base
