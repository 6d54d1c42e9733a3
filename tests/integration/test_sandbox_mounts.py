"""The mount plan as data: what is read-only, what is writable, what is absent.

No containers here: these check the plan every launch is built from (the
escape suite checks the same claims from inside a real container).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chtop_tasks.core import places
from chtop_tasks.core.errors import PolicyError, Refused, UsageError, WorkspaceError
from chtop_tasks.sandbox import launcher as launch
from chtop_tasks.sandbox import podman
from chtop_tasks.sandbox.agent_config import agent_config_for
from chtop_tasks.sandbox.mounts import MountPlan, is_within, rename_proof
from chtop_tasks.sandbox.policy import load_policy
from chtop_tasks.workspace import targets
from chtop_tasks.workspace.layout import private_store


def plan_for(root: Path, self_edit=False, policy_text=None, session=None):
    target = targets.target_for(root)
    if policy_text is not None:
        (target.policy_dir / "fs-allow.txt").write_text(policy_text)
    policy = load_policy(target.policy_dir, places.home_dir(), target.workspace.grouping)
    ctx = launch._mount_context(target, None, self_edit, agent=agent_config_for(target, session))
    from chtop_tasks.sandbox.mounts import plan_mounts

    return plan_mounts(ctx, policy.fs)


def modes(plan) -> dict[str, str]:
    return {str(m.dst): m.mode for m in plan.mounts()}


def test_worktree_plan(with_dev):
    g = with_dev
    dev, top = g.path("dev"), g.toplevel
    m = modes(plan_for(dev))
    assert m[str(top)] == "ro" and m[str(dev)] == "ro"
    for name in (".git", ".envrc", ".claude", "tasks.py", "chtop_tasks", "sandbox", "pyproject.toml",
                 "git_repositories.toml", "dotfile_templates"):
        assert m[str(dev / name)] == "ro", name
    for repo in ("", *g.repos):
        if repo:
            assert m[str(dev / repo)] == "rw" and m[str(dev / repo / ".git")] == "ro"
        shared = top / repo / ".git"
        for sub in ("", "objects", "refs", "logs", "packed-refs", "config", "worktrees"):
            assert str(shared / sub).rstrip("/") not in m       # the whole shared store: inside the ro toplevel
        store = private_store(g.grouping, "dev", repo)
        assert m[str(store)] == "rw" and m[str(store / "objects")] == "rw"
        for sub in ("config", "hooks", "info", "worktrees", "objects/info"):
            assert m[str(store / sub)] == "ro", sub
        admin = store / "worktrees" / (repo or "dev")
        assert m[str(admin)] == "rw"
        assert m[str(admin / "commondir")] == m[str(admin / "gitdir")] == m[str(admin / "config.worktree")] == "ro"
    assert not any(k.startswith(str(private_store(g.grouping, "dev2", ""))) for k in m)
    # the agents' config dir: dev's own, alone, its settings read-only; the group's login dir never
    home = g.path(".chtop", "agents", "dev")
    assert m[str(home / "config")] == "rw" and m[str(home / "config" / "settings.json")] == "ro"
    assert str(home) not in m and str(home / "config" / "chtop-state") not in m
    assert not any(k.startswith(str(g.path("claude"))) for k in m)
    assert str(g.path("extern")) not in m                                   # absent: not mounted
    g.path("extern").mkdir()
    assert modes(plan_for(dev))[str(g.path("extern"))] == "ro"
    assert m[str(Path.home())] == "tmpfs"
    assert m["/usr"] == m["/etc"] == "ro"
    # never mounted: the grouping dir itself, siblings, chtop's state (but this worktree's git stores)
    assert str(g.grouping) not in m and str(g.path(".chtop")) not in m
    assert [k for k in m if k.startswith(str(g.path(".chtop")))
            and not k.startswith((str(g.path(".chtop", "git", "dev")) + "/", str(home / "config")))] == []


def test_a_sessions_sandbox_sees_its_own_state_dir_only(with_dev):
    g = with_dev
    plan = plan_for(g.path("dev"), session="abcdef0123456789")
    home = g.path(".chtop", "agents", "dev")
    state = plan.get(home / "config" / "chtop-state")
    assert state.mode == "rw" and state.src == home / "sessions" / "abcdef0123456789"
    assert [m for m in plan.mounts() if m.src is not None and is_within(m.src, home / "sessions")] == [state]
    with pytest.raises(ValueError):
        plan_for(g.path("dev"), session="../other")


def test_self_edit_opens_management_code_only(with_dev):
    dev = with_dev.path("dev")
    m = modes(plan_for(dev, self_edit=True))
    assert m[str(dev)] == "rw"
    assert str(dev / "tasks.py") not in m and str(dev / "chtop_tasks") not in m
    assert m[str(dev / ".git")] == m[str(dev / ".envrc")] == m[str(dev / ".claude")] == "ro"


def test_rw_policy_lines_cannot_open_the_group(with_dev):
    g = with_dev
    g.path(".chtop").mkdir(exist_ok=True)
    plan = plan_for(g.path("dev"), policy_text=f"rw {g.grouping}\nrw {g.toplevel}/alpha\nrw $CH/.chtop\n")
    m = modes(plan)
    assert m[str(g.grouping)] == "ro"                 # downgraded
    assert m[str(g.toplevel)] == "ro" and m[str(g.toplevel / "alpha")] == "ro"
    assert m[str(g.path(".chtop"))] == "tmpfs"          # masked (a private tmpfs: the git stores mount below)
    assert any("mounted read-only" in w for w in plan.warnings)
    assert any("never mounted" in w for w in plan.warnings)


def test_rw_sibling_by_policy_gets_its_pins(with_dev):
    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.worktrees import create_worktree

    g = with_dev
    create_worktree(find_workspace(g.toplevel), "dev2")
    sib = g.path("dev2")
    m = modes(plan_for(g.path("dev"), policy_text="rw $CH/dev2\n"))
    assert m[str(sib)] == "rw"
    assert m[str(sib / ".git")] == m[str(sib / "tasks.py")] == m[str(sib / "alpha" / ".git")] == "ro"
    # the repo dir between the rw root and its pinned .git is self-mounted (rename-proof)
    assert m[str(sib / "alpha")] == "rw"


def test_rename_proof_self_mounts_every_parent():
    plan = MountPlan()
    plan.add("/w", "/w", "rw", "root")
    plan.add("/w/a/b/c/.git", "/w/a/b/c/.git", "ro", "pin")
    rename_proof(plan)
    m = modes(plan)
    assert m["/w/a"] == m["/w/a/b"] == m["/w/a/b/c"] == "rw"


def python_prefix(prefix: Path) -> Path:
    """A dir laid out as a Python install: ``bin/`` and the standard library's landmark."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / "python3.11").mkdir(parents=True)
    (prefix / "lib" / "python3.11" / "os.py").write_text("")
    return prefix


def test_venv_base_interpreter_prefix_is_mounted(with_dev, tmp_path):
    dev = with_dev.path("dev")
    prefix = python_prefix(tmp_path / "pyprefix")
    (dev / ".venv").mkdir()
    (dev / ".venv" / "pyvenv.cfg").write_text(f"home = {prefix}/bin\nversion = 3.11\n")
    m = modes(plan_for(dev))
    assert m[str(prefix)] == "ro" and m[str(dev / ".venv")] == "ro"


def test_venv_base_interpreter_under_the_scratch_home_is_mounted(with_dev):
    """Root's pyenv lives in /root, which the sandbox covers with a scratch tmpfs: the base
    interpreter is still mounted (read-only) at its own path."""
    dev = with_dev.path("dev")
    prefix = python_prefix(places.home_dir() / ".pyenv" / "versions" / "3.11.7")
    (dev / ".venv").mkdir()
    (dev / ".venv" / "pyvenv.cfg").write_text(f"home = {prefix}/bin\nversion = 3.11\n")
    m = modes(plan_for(dev))
    assert m[str(places.home_dir())] == "tmpfs" and m[str(prefix)] == "ro"


def test_a_pyvenv_cfg_naming_no_python_or_the_home_mounts_nothing(with_dev, tmp_path):
    """The agent can write pyvenv.cfg (a --dir directory, a build inside): a dir that holds no
    standard library, ``/``, a Python installed with prefix ~ (its prefix holds the home), a link
    or a FIFO for the file: nothing is mounted for it."""
    dev = with_dev.path("dev")
    home = places.home_dir()
    secrets = home / ".ssh"
    (secrets / "bin").mkdir(parents=True)
    python_prefix(home)
    (dev / ".venv").mkdir()
    cfg = dev / ".venv" / "pyvenv.cfg"
    for named in (secrets / "bin", Path("/bin"), home / "bin"):
        cfg.write_text(f"home = {named}\n")
        m = modes(plan_for(dev))
        assert str(secrets) not in m and m[str(home)] == "tmpfs" and "/" not in m, named
    target = tmp_path / "real.cfg"
    target.write_text(f"home = {secrets}/bin\n")
    cfg.unlink()
    cfg.symlink_to(target)
    assert str(secrets) not in modes(plan_for(dev))
    cfg.unlink()
    os.mkfifo(cfg)
    assert str(secrets) not in modes(plan_for(dev))                 # and the plan did not block


def test_refuses_toplevel_and_outside(with_dev, tmp_path):
    with pytest.raises(WorkspaceError, match="is the toplevel"):
        targets.target_for(with_dev.toplevel)
    outside = targets.target_for(tmp_path)
    assert outside.kind == "dir" and outside.root == tmp_path.resolve()
    assert "not inside a chtop workspace: sandboxing the current directory" in outside.note
    with pytest.raises(Refused, match="refusing to sandbox"):
        targets.target_for(tmp_path, Path.home())


def test_every_entry_point_guards_the_config_dir(tmp_path):
    """--dir of the config dir, a dir holding it, or one inside it is refused by target_for itself,
    which sbox.run, sbox.shell, sbox.claude/agent and gpu_smoke all go through."""
    config = places.user_config_dir()
    (config / "sandbox").mkdir(parents=True)
    (config / "secrets.env").write_text("X=1\n")
    for bad in (config, config.parent, config / "sandbox"):
        with pytest.raises(Refused, match="refusing to sandbox"):
            targets.target_for(tmp_path, bad)


def test_xdg_config_home_moves_every_group_place(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert places.user_config_dir() == tmp_path / "xdg" / "chtop"
    assert places.secrets_path() == tmp_path / "xdg" / "chtop" / "secrets.env"
    assert targets.group_and_policy_for(tmp_path)[0] == tmp_path / "xdg" / "chtop"
    assert targets.group_dir_for(tmp_path) == tmp_path / "xdg" / "chtop"
    from chtop_tasks.proxy.report import locate
    assert locate(tmp_path)[0] == tmp_path / "xdg" / "chtop"


def test_dir_mode_target_uses_user_or_shipped_policy(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    target = targets.target_for(tmp_path, project)
    assert target.kind == "dir" and target.root == project.resolve()
    assert target.policy_dir == places.default_policy_dir()
    assert target.group_dir == Path.home() / ".config" / "chtop"
    user_policy = target.group_dir / "sandbox"
    user_policy.mkdir(parents=True)
    (user_policy / "fs-allow.txt").write_text("")
    assert targets.target_for(tmp_path, project).policy_dir == user_policy


def test_plan_launch_argv_and_env(with_dev, monkeypatch):
    dev = with_dev.path("dev")
    monkeypatch.setenv("EDITOR", "nano")
    monkeypatch.setenv("CHTOP_TEST_SECRET", "hunter2")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/home/u/.cache/chtop/pycache")
    target = targets.target_for(dev)
    plan = launch.plan_launch(target, ["sh", "-c", "exit 7"], interactive=False, network="open",
                              extra_env={"ANTHROPIC_API_KEY": "sk-test"}, purpose="agent")
    argv = plan.argv
    assert argv[:3] == ["podman", "run", "--rm"] and argv[-3:] == ["sh", "-c", "exit 7"]
    assert "--network=host" in argv and "--read-only" in argv
    assert "--label=chtop.worktree=dev" in argv and "--label=chtop.purpose=agent" in argv
    assert plan.container_name.startswith("chtop-dev-agent-")
    assert "--env=EDITOR" in argv and plan.env["EDITOR"] == "nano"
    assert "--env=ANTHROPIC_API_KEY" in argv and plan.env["ANTHROPIC_API_KEY"] == "sk-test"
    assert "sk-test" not in " ".join(argv) and "hunter2" not in " ".join(argv)
    assert "CHTOP_TEST_SECRET" not in plan.env
    # podman's env (and so the exit import's python's), never the container's: see tasks.py
    assert plan.env["PYTHONPYCACHEPREFIX"] == "/home/u/.cache/chtop/pycache"
    assert "--env=PYTHONPYCACHEPREFIX" not in argv
    assert any("open egress" in w for w in plan.warnings)
    with pytest.raises(UsageError):
        launch.plan_launch(target, ["true"], interactive=False, network="open", extra_env={"PATH": "/x"})
    with pytest.raises(UsageError):
        launch.plan_launch(target, ["true"], interactive=False, network="wide-open")


def test_missing_fs_allow_refuses_launch(with_dev):
    (with_dev.toplevel / "sandbox" / "fs-allow.txt").unlink()
    with pytest.raises(PolicyError, match="missing"):
        launch.plan_launch(targets.target_for(with_dev.path("dev")), ["true"], interactive=False, network="open")


def test_tampered_git_file_refuses_launch(with_dev, tmp_path):
    dev = with_dev.path("dev")
    (dev / "alpha" / ".git").write_text(f"gitdir: {tmp_path}\n")
    with pytest.raises(WorkspaceError, match="refusing"):
        launch.plan_launch(targets.target_for(dev), ["true"], interactive=False, network="open")


def test_a_launch_walks_the_stores_once_and_a_planted_fifo_still_refuses_it(with_dev, monkeypatch):
    """``launch``'s sync walks the private stores for planted files; its plan then reads only the
    ``.git`` pointers (``stores_walked``).  A FIFO planted in a store refuses the launch there,
    before podman; a plan made on its own still walks."""
    from chtop_tasks.workspace import layout

    dev = with_dev.path("dev")
    target = targets.target_for(dev)
    walked = []
    real_walk = layout.planted_entry
    monkeypatch.setattr(layout, "planted_entry", lambda store: walked.append(store) or real_walk(store))
    launch.plan_launch(target, ["true"], interactive=False, network="open", stores_walked=True)
    assert walked == []
    store = private_store(with_dev.grouping, "dev", "alpha")
    planted = store / "refs" / "heads" / "planted"
    os.mkfifo(planted)
    with pytest.raises(WorkspaceError, match="planted is a FIFO"):
        launch.plan_launch(target, ["true"], interactive=False, network="open")
    ran = []
    monkeypatch.setattr(launch, "run_plan", lambda plan, interactive=False: ran.append(plan) or 0)
    walked.clear()
    with pytest.raises(WorkspaceError, match="planted is a FIFO"):
        launch.launch(launch.LaunchRequest(target, ["true"], network="open"))
    assert ran == [] and walked.count(store) == 1
    planted.unlink()
    walked.clear()
    assert launch.launch(launch.LaunchRequest(target, ["true"], network="open")) == 0
    assert len(ran) == 1 and walked.count(store) == 2          # the sync before, the import after it


def test_proxy_that_cannot_start_refuses_launch(with_dev):
    from chtop_tasks.core.errors import ChtopError

    (with_dev.toplevel / "sandbox" / "net-allow.txt").unlink(missing_ok=True)
    with pytest.raises(ChtopError):
        launch.plan_launch(targets.target_for(with_dev.path("dev")), ["true"], interactive=False)


def test_dry_run_starts_no_proxy_and_writes_nothing(with_dev):
    """plan_launch only reads: `inv sbox.run --dry-run` prints the argv, and no proxy, socket,
    state dir or skeleton root appears."""
    from chtop_tasks.proxy.control import status

    g = with_dev
    dev = g.path("dev")
    state = places.state_dir(g.grouping)
    before = sorted(p.relative_to(g.grouping) for p in state.rglob("*")) if state.exists() else []
    proc = g.inv(dev, "sbox.run", "--dry-run", "--", "true", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "podman run" in proc.stdout
    assert status(g.grouping) is None
    assert not places.runtime_dir(g.grouping).exists()
    after = sorted(p.relative_to(g.grouping) for p in state.rglob("*")) if state.exists() else []
    assert after == before
    assert not (launch.ROOTFUL_SKELETONS / places.group_id(g.grouping)).exists()


def test_no_sbox_entry_sandboxes_the_config_dir(with_dev):
    """`sbox.run`, `sbox.shell` and `sbox.claude` with --dir of chtop's config dir are refused (exit 3)
    before anything starts: the secrets file must never be mounted."""
    g = with_dev
    config = places.user_config_dir()
    config.mkdir(parents=True, exist_ok=True)
    (config / "secrets.env").write_text("TOKEN=secret\n")
    for task in (["sbox.run", "--dir", str(config), "--", "cat", "secrets.env"],
                 ["sbox.shell", "--dir", str(config)],
                 ["sbox.claude", "--dir", str(config)]):
        proc = g.inv(g.path("dev"), *task, check=False)
        assert proc.returncode == 3, (task, proc.stdout, proc.stderr)
        assert "refusing to sandbox chtop's config dir" in proc.stderr, proc.stderr
        assert "secret" not in proc.stdout


ROOTLESS = podman.Identity(False)
ROOTFUL = podman.Identity(True, uidmap=["--uidmap=0:2147483648:65536"], ns_root=(2147483648, 2147483648),
                          tree_owner=(0, 0))


def test_every_volume_is_nosuid_nodev_rootless_and_rootful(with_dev):
    """Each mount of the argv (bind volumes read-only and read-write, tmpfs) asks for nosuid,nodev."""
    g = with_dev
    g.path("extern").mkdir()
    plan = plan_for(g.path("dev"), policy_text="rw $CH/extern\nro /opt\n")
    modes_seen = {m.mode for m in plan.mounts()}
    assert {"ro", "rw", "tmpfs"} <= modes_seen
    for identity in (ROOTLESS, ROOTFUL):
        args = podman.mount_args(plan.mounts(), identity)
        assert len(args) == len(plan.mounts())
        for arg in args:
            options = arg.rsplit(":", 1)[1].split(",")
            assert "nosuid" in options and "nodev" in options, arg


def test_as_root_the_argv_names_the_hook_that_applies_the_flags(with_dev, tmp_path):
    """crun drops nosuid,nodev from read-write volumes under a user namespace: a rootful launch names
    the hook dir, and the hook it writes runs this python, isolated."""
    assert podman.needs_mount_flags_hook(ROOTFUL) and not podman.needs_mount_flags_hook(ROOTLESS)
    argv = launch.plan_launch(targets.target_for(with_dev.path("dev")), ["true"], interactive=False,
                              network="open").argv
    if os.geteuid() == 0:
        hooks = [a for a in argv if a.startswith("--hooks-dir=")]
        assert hooks and argv.index(hooks[-1]) < argv.index("--read-only")
    hooks_dir = tmp_path / "hooks"
    from chtop_tasks.sandbox.mounts import Mount

    mounts = [Mount(Path("/w/dev/alpha"), Path("/w/dev/alpha"), "rw", "repo"), Mount(None, Path("/tmp"), "tmpfs", "tmp")]
    podman.write_mount_flags_hook(hooks_dir, Path("/run/skel"), mounts)
    spec = json.loads((hooks_dir / "chtop-mount-flags.json").read_text())
    assert spec["stages"] == ["createRuntime"] and spec["when"] == {"always": True}
    assert os.access(spec["hook"]["path"], os.X_OK) and spec["hook"]["args"][1:3] == ["-I", "-S"]
    assert Path(spec["hook"]["args"][-2]) == podman.MOUNT_FLAGS_HOOK and podman.MOUNT_FLAGS_HOOK.is_file()
    assert json.loads(Path(spec["hook"]["args"][-1]).read_text()) == {"root": "/run/skel",
                                                                      "destinations": ["/w/dev/alpha"]}   # volumes only
    assert podman.hooks_dir_args(None) == [] and podman.hooks_dir_args(hooks_dir)[0] == f"--hooks-dir={hooks_dir}"
