"""Hermetic test setup: every test has its own HOME and git config, and a
factory that builds real workspaces from local bare remotes.

The container repo of a test workspace is a copy of this project (so the
real tasks.py and chtop_tasks run), with a manifest naming two tiny repos.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

GIT_DATE = "2026-01-01T00:00:00+00:00"
IN_CI = os.environ.get("CI") == "true"


def require_tool(name: str) -> str:
    """The path of ``name``; skip the test without it (fail in CI, which installs it)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed"
        if IN_CI:
            pytest.fail(message + " (CI must install it: see .ci/run)")
        pytest.skip(message)
    return path


def eventually(probe, what: str, timeout: float = 60.0, interval: float = 0.05, explain=None):
    """``probe()``'s first truthy value, asked until ``timeout``; else fail saying what was awaited and
    what the last answer was (and ``explain()``'s account of the state then, when given).  For every
    wait on a process, a socket or a file: a generous deadline costs nothing when things are fast,
    and a loaded machine only makes it take longer."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            state = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last answer: {value!r}{state}")
        time.sleep(interval)


def git(cwd, *args, check=True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and proc.returncode:
        raise AssertionError(f"git {' '.join(args)} in {cwd} failed:\n{proc.stderr}")
    return proc.stdout.strip()


def hermetic_env(home: Path) -> dict[str, str]:
    gitconfig = home / ".gitconfig"
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_RUNTIME_DIR": str(home / ".run"),
        "GIT_CONFIG_GLOBAL": str(gitconfig),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.invalid",
        "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_DATE": GIT_DATE,
        "NO_COLOR": "1",
    }


@contextlib.contextmanager
def hermetic_os_env(home: Path):
    """os.environ made hermetic around ``home`` (with its gitconfig) for a block, then restored.

    For session-scoped and helper code that cannot use monkeypatch."""
    home.mkdir(parents=True, exist_ok=True)
    write_gitconfig(home / ".gitconfig")
    saved = dict(os.environ)
    os.environ.update(hermetic_env(home))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def write_gitconfig(path: Path) -> None:
    path.write_text(
        "[user]\n\tname = Test User\n\temail = user@example.invalid\n"
        "[init]\n\tdefaultBranch = main\n"
        "[commit]\n\tgpgSign = false\n"
        "[protocol \"file\"]\n\tallow = always\n"
        "[advice]\n\tdetachedHead = false\n"
    )


def plant_pyc(source: Path, marker: Path) -> None:
    """What an agent that can write beside ``source`` can leave: bytecode in its __pycache__ that
    creates ``marker`` (then runs the module as it is), under the header Python checks (the
    reviewed source's mtime and size).  No diff shows it."""
    import importlib.util
    import marshal
    import struct

    code = compile(f"open({str(marker)!r}, 'w').close()\n" + source.read_text(), str(source), "exec")
    stat = source.stat()
    pyc = source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(stat.st_mtime), stat.st_size)
                    + marshal.dumps(code))


@pytest.fixture(autouse=True)
def hermetic(tmp_path_factory, monkeypatch):
    """Own HOME and git config for every test; nothing touches the real home."""
    home = tmp_path_factory.mktemp("home")
    (home / ".run").mkdir(mode=0o700)
    write_gitconfig(home / ".gitconfig")
    for key, value in hermetic_env(home).items():
        monkeypatch.setenv(key, value)
    for key in ("VIRTUAL_ENV", "CLAUDE_ENV_FILE", "PYTHONSAFEPATH", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(key, raising=False)
    return home


# -- the container repo template -------------------------------------------------

PROJECT_SKIP = {"tests", "bench", ".ci", "containers", "docs"}


def project_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if f.split("/")[0] not in PROJECT_SKIP
            and ((REPO_ROOT / f).is_file() or (REPO_ROOT / f).is_symlink())]


def manifest_text(repos) -> str:
    parts = []
    for spec in repos:
        parts.append("[[repo]]\n" + "".join(f'{k} = "{v}"\n' for k, v in spec.items()))
    return "\n".join(parts)


def make_sub_remote(remotes: Path, name: str, branch: str) -> Path:
    """A bare repo with one commit on ``branch``."""
    bare = remotes / f"{name}.git"
    work = remotes / f"{name}-seed"
    git(remotes, "init", "-q", "-b", branch, str(work))
    (work / "README").write_text(f"{name}\n")
    (work / f"{name}.txt").write_text("line 1\nline 2\nline 3\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", f"{name}: initial")
    git(remotes, "clone", "-q", "--bare", str(work), str(bare))
    shutil.rmtree(work)
    return bare


def make_container_remote(remotes: Path, manifest: str) -> Path:
    work = remotes / "chtop-seed"
    work.mkdir()
    for rel in project_files():
        dest = work / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, dest, follow_symlinks=False)   # chtop_tasks/default_policy is a link
    return bare_remote_of(work, manifest, remotes / "chtop.git", "chtop: initial")


def bare_remote_of(work: Path, manifest: str, bare: Path, message: str) -> Path:
    """``work`` (a container repo's files), with ``manifest`` as its git_repositories.toml, committed
    as one commit and cloned as the bare remote ``bare``; ``work`` is removed."""
    (work / "git_repositories.toml").write_text(manifest)
    git(work.parent, "init", "-q", "-b", "main", str(work))
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message)
    git(work.parent, "clone", "-q", "--bare", str(work), str(bare))
    shutil.rmtree(work)
    return bare


@dataclass
class Group:
    """A test grouping dir: bare remotes plus a toplevel clone."""

    base: Path
    remotes: Path
    grouping: Path
    toplevel: Path
    repos: list[str]

    def path(self, *parts) -> Path:
        return self.grouping.joinpath(*parts)

    def inv(self, cwd, *args, check=True, env=None, timeout=300) -> subprocess.CompletedProcess:
        """Run ``inv ARGS`` in ``cwd`` as a user would (this python's invoke)."""
        full_env = dict(os.environ, **(env or {}))
        proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=full_env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
        if check and proc.returncode:
            raise AssertionError(f"inv {' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def commit(self, checkout: Path, filename: str, text: str, message: str) -> str:
        (checkout / filename).write_text(text)
        git(checkout, "add", filename)
        git(checkout, "commit", "-q", "-m", message)
        return git(checkout, "rev-parse", "HEAD")

    def push_upstream_commit(self, repo: str, filename: str, text: str) -> str:
        """Move an integration branch: commit in the toplevel clone (where it lives)."""
        return self.commit(self.toplevel / repo, filename, text, f"upstream change to {filename}")


@pytest.fixture(scope="session")
def remote_template(tmp_path_factory):
    """Bare remotes built once per worker; each test copies them."""
    base = tmp_path_factory.mktemp("remote-template")
    with hermetic_os_env(base / "home"):
        remotes = base / "remotes"
        remotes.mkdir()
        make_sub_remote(remotes, "alpha", "main")
        make_sub_remote(remotes, "beta", "kms")
    return remotes


def build_group(base: Path, remote_template: Path, repos=None) -> Group:
    remotes = base / "remotes"
    shutil.copytree(remote_template, remotes, symlinks=True)
    repos = repos or [("alpha", "main"), ("beta", "kms")]
    manifest = manifest_text([
        {"name": name, "url": f"file://{remotes}/{name}.git", "branch": branch, "install": "none"}
        for name, branch in repos
    ])
    make_container_remote(remotes, manifest)
    grouping = base / "grp"
    grouping.mkdir()
    toplevel = grouping / "top"
    git(grouping, "clone", "-q", f"file://{remotes}/chtop.git", str(toplevel))
    return Group(base, remotes, grouping, toplevel, [name for name, _ in repos])


@pytest.fixture
def group(tmp_path, remote_template) -> Group:
    """A fresh grouping dir with a toplevel clone (repos not yet cloned)."""
    return build_group(tmp_path, remote_template)


@pytest.fixture
def initialized(group) -> Group:
    """A group whose toplevel has run toplevel.init (no venv)."""
    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.toplevel import init_toplevel

    init_toplevel(find_workspace(group.toplevel))
    return group


@pytest.fixture
def with_dev(initialized) -> Group:
    """An initialized group with feature worktree ``dev`` (no venv)."""
    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.worktrees import create_worktree

    create_worktree(find_workspace(initialized.toplevel), "dev")
    return initialized
