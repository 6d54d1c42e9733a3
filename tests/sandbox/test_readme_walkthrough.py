"""README's quick start and "Your own workspace", run as written by an ordinary user on this machine.

The quick start's line for an ordinary user runs as written in a fresh clone of this checkout: the real
`./bootstrap` (chtop's own venv, its commands linked into ~/.local/bin), the PATH line, then `inv demo`. Its
line for root is not run here: `./bootstrap` as root reinstalls this machine's own chtop (tests/sandbox/test_demo.py
runs `inv demo` as root).

The "Your own workspace" block is read from README.md and run line by line in one bash (so `cd` and `export` carry
over) as the unprivileged test user, in a fresh HOME with a plain PATH.  Only what cannot run
here is substituted: `<this repo>` is a local bare clone of this checkout, `$EDITOR` is a script
that writes a manifest of two local bare remotes, and the last line's interactive agent session
becomes `inv session.start -- --version` (the same launch, with an agent that answers and ends at
once, which session.start reports) and its screen log.  `./bootstrap` runs
for real: it makes its own venv and links the commands into ~/.local/bin.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import pytest
from conftest import REPO_ROOT, make_container_remote, manifest_text
from sandbox_helpers import (
    as_user,
    end_pause_process,
    ensure_test_user,
    free_proxy_port,
    make_base,
    missing,
    stop_proxy_as,
)

pytestmark = [pytest.mark.podman, pytest.mark.slow]


def quick_start_lines() -> dict[str, str]:
    """The quick start's commands, keyed by whom each is for (its comment: "as root", "as an ordinary user")."""
    block = (REPO_ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = {}
    for line in block.strip().splitlines():
        command, _, comment = line.partition("#")
        who = "root" if comment.strip().startswith("as root") else "user"
        lines[who] = command.strip()
    return lines


def readme_block() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    block = readme.split("## Your own workspace", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [line for line in block.strip().splitlines() if line.strip()]


def as_run_here(line: str, remote: str) -> str:
    line = line.replace("<this repo>", remote)
    if line.startswith("tmux new -s dev && inv sbox.claude"):
        return "inv sbox.claude -- --version"
    if line.startswith("inv session.start && inv session.attach"):
        # the same persistent session, with an agent that answers and ends at once (no API here, no
        # terminal to attach): session.start says it ended in its first seconds, and its log has it
        return ("{ inv session.start -- --version 2> ~/session-start.err || "
                "grep -q 'ended within its first seconds' ~/session-start.err; } && inv session.log --name dev")
    return line


@pytest.fixture
def user_setup(remote_template):
    user = ensure_test_user()
    if shutil.which("claude") is None:
        missing("the claude CLI is not installed")
    base = make_base()
    try:
        remotes = base / "remotes"
        shutil.copytree(remote_template, remotes, symlinks=True)
        make_container_remote(remotes, (REPO_ROOT / "git_repositories.toml").read_text())   # as shipped
        home = base / "home"
        home.mkdir()
        (home / ".gitconfig").write_text("[user]\n\tname = New User\n\temail = new@example.invalid\n"
                                         "[init]\n\tdefaultBranch = main\n[protocol \"file\"]\n\tallow = always\n")
        mine = manifest_text([{"name": n, "url": f"file://{remotes}/{n}.git", "branch": b, "install": "none"}
                              for n, b in (("alpha", "main"), ("beta", "kms"))])
        editor = base / "editor"
        editor.write_text(f"#!/bin/sh\ncat > \"$1\" <<'TOML'\n{mine}TOML\n")
        editor.chmod(0o755)
        (base / "run").mkdir(mode=0o700)
        subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(base)], check=True)
        env = {"HOME": str(home), "USER": user.pw_name, "LOGNAME": user.pw_name, "LANG": "C.UTF-8",
               "PATH": "/usr/local/bin:/usr/bin:/bin", "XDG_RUNTIME_DIR": str(base / "run"),
               "EDITOR": str(editor), "CHTOP_PROXY_PORT": str(free_proxy_port()), "NO_COLOR": "1",
               "TERM": "dumb", **{k: v for k, v in os.environ.items() if k.startswith("PIP_")}}
        yield user, base, env, f"file://{remotes}/chtop.git"
    finally:
        stop_proxy_as(base)
        end_pause_process(base / "run")
        shutil.rmtree(base, ignore_errors=True)


def test_your_own_workspace_as_written(user_setup):
    user, base, env, remote = user_setup
    lines = readme_block()
    assert any("git commit" in line for line in lines), "README must say to commit the edited manifest"
    script = "set -e\n" + "".join(f"echo {shlex.quote('+ ' + line)} >&2\n{as_run_here(line, remote)}\n"
                                   for line in lines)
    proc = as_user(user, ["bash", "-c", script], env, base, check=False, timeout=1200)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    home = base / "home"
    ch = home / "ch"
    assert (home / ".local" / "share" / "chtop" / "venv" / "bin" / "python").exists()   # bootstrap's own venv
    assert os.readlink(home / ".local" / "bin" / "inv").startswith(str(home / ".local" / "share" / "chtop"))
    for cmd in ("inv", "invoke"):       # chtop's, which pins invoke's tasks.py search (tests/security/test_inv_discovery.py)
        assert os.path.realpath(home / ".local" / "bin" / cmd).endswith("/bin/chtop-inv")
    assert "Claude Code" in proc.stdout                                                # the sandboxed agent ran
    for repo in ("alpha", "beta"):
        branch = as_user(user, ["git", "-C", str(ch / "dev" / repo), "branch", "--show-current"], env,
                         base).stdout.strip()
        assert branch == "dev"
    assert (ch / "top" / ".venv" / "bin" / "python").exists() and (ch / "dev" / ".venv" / "bin" / "python").exists()
    assert "error" not in proc.stderr.lower().replace("errors", ""), proc.stderr[-3000:]


def test_quick_start_as_written_by_an_ordinary_user(user_setup):
    user, base, env, remote = user_setup
    line = quick_start_lines()["user"]
    assert "inv demo" in line and ".local/bin" in line, line
    (base / "tmp").mkdir()
    subprocess.run(["chown", f"{user.pw_uid}:{user.pw_gid}", str(base / "tmp")], check=True)
    env = {**env, "TMPDIR": str(base / "tmp")}          # the demo's grouping dir, removed with the base
    script = f"set -e\ngit clone -q {shlex.quote(remote)} chtop && cd chtop\n{line}\n"
    proc = as_user(user, ["bash", "-c", script], env, base, check=False, timeout=1200)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    for step in ("## 3. toplevel.init", "## 4. worktree.create", "## 9. The egress proxy", "## 10. worktree.delete"):
        assert step in proc.stdout
    assert "committed inside the sandbox" in proc.stdout
    assert os.path.realpath(base / "home" / ".local" / "bin" / "inv").endswith("/bin/chtop-inv")
