"""Running the sandbox for real in tests: an unprivileged test user,
a world-readable venv with chtop's deps for it, and workspaces it owns.

Our python is pyenv's under /root (unreadable to other users), so the test
user gets its own venv from /usr/bin/python3, built once per machine (file
lock, so xdist workers share it).  Each test gets a fresh base dir under
/tmp (short paths: unix sockets must stay under ~100 bytes) owned by the
test user, with its own HOME and XDG_RUNTIME_DIR inside.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import hashlib
import http.server
import os
import pwd
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import eventually

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_USER = "chtop-sbt"
IN_CI = os.environ.get("CI") == "true"
VENV_DEPS = ["invoke>=2.2", "jinja2>=3.1", "pexpect>=4.8", "publicsuffixlist>=1.0", "idna>=3.6"]


def missing(message: str):
    """Skip, or fail under CI (which installs everything)."""
    if IN_CI:
        pytest.fail(message + " (CI must provide it: see .ci/run)")
    pytest.skip(message)


def _locked(name: str):
    lock = open(f"/tmp/{name}.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def ensure_test_user() -> pwd.struct_passwd:
    """The unprivileged user the rootless tests run as (useradd -m gives subuid ranges)."""
    if os.geteuid() != 0:
        missing("the podman tests create an unprivileged test user: run them as root")
    for tool in ("podman", "socat", "runuser", "useradd"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            missing(f"{tool} is not installed")
    with _locked("chtop-sbt-user"):
        try:
            return pwd.getpwnam(TEST_USER)
        except KeyError:
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", TEST_USER], check=True)
            return pwd.getpwnam(TEST_USER)


def ensure_user_venv() -> Path:
    """A venv from /usr/bin/python3 with chtop's deps, world-readable (built once)."""
    key = hashlib.sha256("\n".join(VENV_DEPS).encode()).hexdigest()[:10]
    venv = Path(f"/var/tmp/chtop-sbt-venv-{key}-c")
    if (venv / ".complete").exists():
        return venv
    with _locked(f"chtop-sbt-venv-{key}"):
        if (venv / ".complete").exists():
            return venv
        if venv.exists():
            shutil.rmtree(venv)
        proc = subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], capture_output=True, text=True)
        if proc.returncode:
            missing(f"cannot make a venv with /usr/bin/python3 (python3-venv?): {proc.stderr.strip()}")
        uv = shutil.which("uv")
        if uv:
            cmd = [uv, "pip", "install", "--python", str(venv / "bin" / "python"), *VENV_DEPS]
        else:
            cmd = [str(venv / "bin" / "pip"), "install", "-q", *VENV_DEPS]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HOME=str(venv)))
        if proc.returncode:
            missing(f"cannot install chtop's deps for the test user: {proc.stderr.strip()[-500:]}")
        # the test user cannot write __pycache__ here: compile now, or every run recompiles
        subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", str(venv / "lib")],
                       capture_output=True)
        subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
        (venv / ".complete").write_text("ok\n")
    return venv


def podman_works(user: pwd.struct_passwd, env: dict, cwd: Path) -> None:
    """A bare rootless run; skip (fail in CI) with the reason when this machine cannot."""
    skel = Path(env["HOME"]) / "probe-root"
    as_user(user, ["sh", "-c", f"mkdir -p {skel}/usr {skel}/etc {skel}/proc {skel}/dev {skel}/sys "
                               f"{skel}/tmp {skel}/run && ln -sfn usr/bin {skel}/bin && "
                               f"ln -sfn usr/lib {skel}/lib && ln -sfn usr/lib64 {skel}/lib64"], env, cwd)
    proc = as_user(user, ["podman", "run", "--rm", "--network=none", "-v", "/usr:/usr:ro", "-v", "/etc:/etc:ro",
                          "--rootfs", str(skel), "/bin/true"], env, cwd, check=False)
    if proc.returncode:
        missing(f"rootless podman does not run here: {proc.stderr.strip()[-300:]}{cgroup_hint(proc.stderr)}")


def as_user(user, argv, env, cwd, *, check=True, timeout=120, input=None) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` with exactly ``env`` (runuser, no login shell)."""
    full = ["runuser", "-u", user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv]
    proc = subprocess.run(full, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL if input is None else None, input=input)
    if check and proc.returncode:
        raise AssertionError(f"{argv} as {user.pw_name} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def as_owner_python(g, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -c CODE`` as the workspace's owner (``g``: a UserGroup), with the toplevel's
    chtop_tasks on the path: the plain functions the dashboard and the proxy daemon call."""
    env = dict(g.env, PYTHONPATH=str(g.toplevel))
    return as_user(g.user, [str(g.venv / "bin" / "python"), "-c", code], env, g.base, check=False,
                   timeout=timeout)


@dataclass
class UserGroup:
    """A workspace owned by the test user, with the feature worktree ``dev``."""

    user: pwd.struct_passwd
    venv: Path
    base: Path
    home: Path
    grouping: Path
    toplevel: Path
    dev: Path
    env: dict

    def as_owner(self, argv, env=None, cwd=None, *, check=False, timeout=120, input=None):
        """``argv`` as the workspace's owner, with exactly ``env`` (default: the group's)."""
        return as_user(self.user, argv, env or self.env, cwd or self.base, check=check, timeout=timeout,
                       input=input)

    def start(self, argv, cwd, env=None) -> subprocess.Popen:
        """``argv`` as the owner, not waited for (a sandbox that keeps running)."""
        full = ["runuser", "-u", self.user.pw_name, "--", "env", "-i",
                *[f"{k}={v}" for k, v in (env or self.env).items()], *argv]
        return subprocess.Popen(full, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def inv(self, *args, cwd=None, check=False, extra_env=None, timeout=120, input=None):
        env = dict(self.env, **(extra_env or {}))
        return self.as_owner([str(self.venv / "bin" / "python"), "-m", "invoke", *args], env,
                             cwd or self.dev, check=check, timeout=timeout, input=input)

    def sbox(self, script: str, *, extra_env=None, args=(), check=False, timeout=120):
        """``inv sbox.run [ARGS] -- sh -c SCRIPT`` in dev."""
        return self.inv("sbox.run", *args, "--", "sh", "-c", script, extra_env=extra_env, check=check,
                        timeout=timeout)

    def git(self, cwd, *args, check=True) -> str:
        proc = self.as_owner(["git", *args], cwd=cwd, check=check)
        return proc.stdout.strip()

    def run(self, argv, *, cwd=None, check=True):
        return self.as_owner(argv, cwd=cwd, check=check)


@dataclass
class RootGroup(UserGroup):
    """The same workspace owned and run by root, as on a cloud GPU box: every command runs as
    root, so each launch is rootful podman (with its storage in the test's tmp)."""

    def as_owner(self, argv, env=None, cwd=None, *, check=False, timeout=120, input=None):
        proc = subprocess.run(argv, cwd=cwd or self.base, env=env or self.env, capture_output=True,
                              text=True, timeout=timeout, input=input,
                              stdin=subprocess.DEVNULL if input is None else None)
        if check and proc.returncode:
            raise AssertionError(f"{argv} as root exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def start(self, argv, cwd, env=None) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=cwd, env=env or self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def root_owned(group: UserGroup, podman_env: dict[str, str]) -> RootGroup:
    """``group`` handed to root (``chown -R 0:0``), its env root's: the group's own (its HOME,
    runtime dir, proxy port and test settings) plus rootful podman's storage (``rootful_podman_env``)."""
    subprocess.run(["chown", "-R", "0:0", str(group.base)], check=True)
    env = dict(group.env, USER="root", LOGNAME="root", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               **{k: podman_env[k] for k in ("CONTAINERS_STORAGE_CONF", "CONTAINERS_CONF")})
    return RootGroup(group.user, group.venv, group.base, group.home, group.grouping, group.toplevel, group.dev, env)


def free_proxy_port() -> int:
    """A free port below the kernel's ephemeral range (the proxy's derived ports reach into
    it, where a busy machine's outgoing connections can hold them for a moment)."""
    import random
    import socket

    for _ in range(200):
        port = random.randrange(12000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port for the proxy")


def cgroup_hint(stderr: str) -> str:
    """What to do when crun refuses the VM's hybrid cgroup layout."""
    if "hybrid mode" not in stderr:
        return ""
    return ("\nfix: run ./bootstrap as root (it moves the controllers cgroup2 holds to v1 mounts; "
            "see shared/notes/podman-on-these-machines.md)")


def user_env(user, venv: Path, home: Path, run_dir: Path) -> dict:
    return {
        "CHTOP_PROXY_PORT": str(free_proxy_port()),
        "HOME": str(home), "USER": user.pw_name, "LOGNAME": user.pw_name,
        "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
        "XDG_RUNTIME_DIR": str(run_dir), "XDG_CONFIG_HOME": str(home / ".config"),
        "LANG": "C.UTF-8", "NO_COLOR": "1", "TERM": "dumb",
    }


def make_base() -> Path:
    base = Path(tempfile.mkdtemp(prefix="csb-", dir="/tmp"))
    base.chmod(0o755)
    return base


def build_user_group(base: Path, remote_template: Path, user, venv: Path, builder) -> UserGroup:
    """The lead's workspace (toplevel + ``dev``) built as root, then handed to the user."""
    home = base / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Sandbox Tester\n\temail = sbt@example.invalid\n"
        "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgSign = false\n"
        "[protocol \"file\"]\n\tallow = always\n[safe]\n\tdirectory = *\n")
    run_dir = base / "run"
    run_dir.mkdir(mode=0o700)
    group = builder(base)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(base)], check=True)
    env = user_env(user, venv, home, run_dir)
    return UserGroup(user, venv, base, home, group.grouping, group.toplevel, group.grouping / "dev", env)


def python_for_tests() -> str:
    return sys.executable


def conftest_builder(remote_template, extra_worktrees=()):
    """Build toplevel + ``dev`` with the lead's conftest helpers (as root, hermetic env)."""
    from conftest import build_group, hermetic_os_env

    def build(base: Path):
        root_home = base / "root-home"
        with hermetic_os_env(root_home):
            from chtop_tasks.workspace.layout import find_workspace
            from chtop_tasks.workspace.toplevel import init_toplevel
            from chtop_tasks.workspace.worktrees import create_worktree

            group = build_group(base, remote_template)
            init_toplevel(find_workspace(group.toplevel))
            create_worktree(find_workspace(group.toplevel), "dev")
            for name in extra_worktrees:
                create_worktree(find_workspace(group.toplevel), name)
        shutil.rmtree(root_home)
        return group

    return build


def user_group_cm(remote_template, extra_worktrees=(), prepare=None, builder=None):
    """Context manager: a test-user workspace; ``prepare(group)`` runs as root before the chown;
    ``builder(base)`` makes the group instead of the conftest one (toplevel + ``dev``)."""

    @contextlib.contextmanager
    def cm():
        user = ensure_test_user()
        venv = ensure_user_venv()
        base = make_base()
        build_group = builder or conftest_builder(remote_template, extra_worktrees)

        def build(b):
            group = build_group(b)
            if prepare is not None:
                prepare(group)
            return group

        try:
            group = build_user_group(base, remote_template, user, venv, build)
            podman_works(user, group.env, group.base)
            yield group
        finally:
            stop_proxy_as(base)
            end_pause_process(base / "run")
            shutil.rmtree(base, ignore_errors=True)

    return cm()


def end_pause_process(run_dir: Path) -> None:
    """Rootless podman leaves a pause process per runtime dir; end the one of ``run_dir``."""
    pid_file = run_dir / "libpod" / "tmp" / "pause.pid"
    try:
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)   # it ignores SIGTERM
    except (OSError, ValueError):
        pass


@pytest.fixture(scope="module")
def user_group(remote_template):
    """One test-user workspace per test module (escape probes do not change it)."""
    with user_group_cm(remote_template) as group:
        yield group


def stop_proxy_as(base: Path) -> None:
    """Stop the proxies this test started: those whose command line names a path under ``base``
    (their supervisors first, so that none starts its daemon again)."""
    marker = str(base).encode()
    for module in (b"chtop_tasks.proxy.supervise", b"chtop_tasks.proxy.server"):
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            try:
                cmdline = (proc_dir / "cmdline").read_bytes()
            except OSError:
                continue
            if module in cmdline and marker + b"/" in cmdline:
                try:
                    os.kill(int(proc_dir.name), 15)
                except OSError:
                    pass


def rootful_podman_env(tmp_path: Path) -> dict[str, str]:
    """Rootful podman with its storage in tmp (never the machine's /var/lib/containers); skips (fails
    in CI) when rootful podman cannot run here."""
    # a short dir, not under tmp_path: conmon's sockets live under the runroot, and a path past the
    # unix socket limit has podman wait out its conmon timeout (20 s) on every run
    store = Path(tempfile.mkdtemp(prefix="chtop-pd-", dir="/tmp"))
    atexit.register(shutil.rmtree, store, True)
    (store / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{store}/graph"\nrunroot = "{store}/run"\n')
    (store / "containers.conf").write_text(f'[engine]\ntmp_dir = "{store}/tmp"\n')
    env = dict(os.environ, CONTAINERS_STORAGE_CONF=str(store / "storage.conf"),
               CONTAINERS_CONF=str(store / "containers.conf"), CHTOP_PROXY_PORT=str(free_proxy_port()))
    skel = store / "probe"
    for d in ("usr", "etc", "proc", "dev", "sys", "tmp", "run"):
        (skel / d).mkdir(parents=True)
    for name, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (skel / name).symlink_to(target)
    probe = subprocess.run(["podman", "run", "--rm", "--network=none", "--ulimit=nofile=1024:1024",
                            "--ulimit=nproc=1024:1024", "-v", "/usr:/usr:ro", "-v", "/etc:/etc:ro",
                            "--rootfs", str(skel), "/bin/true"], env=env, capture_output=True, text=True)
    if probe.returncode:
        missing(f"rootful podman does not run here: {probe.stderr.strip()[-300:]}{cgroup_hint(probe.stderr)}")
    return env


# -- mount flags seen from inside --------------------------------------------------------------------

# podman's own, not a volume: the read-only skeleton root, its init binary; the kernel's trees
NOT_VOLUMES = ("/", "/run/podman-init")
KERNEL_TREES = ("/proc", "/sys", "/dev")


def mounts_without_nosuid_nodev(mountinfo: str) -> list[str]:
    """The lines of ``/proc/self/mountinfo`` (read inside) of mounts without nosuid or nodev, but
    those of ``NOT_VOLUMES`` and ``KERNEL_TREES``."""
    bad = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[4] in NOT_VOLUMES:
            continue
        if any(fields[4] == t or fields[4].startswith(t + "/") for t in KERNEL_TREES):
            continue
        options = fields[5].split(",")
        if "nosuid" not in options or "nodev" not in options:
            bad.append(f"{fields[4]} {fields[5]}")
    return bad


def assert_volumes_nosuid_nodev(proc, worktree_repo: Path) -> None:
    """Every volume the sandbox saw is nosuid,nodev, the read-write repo dir ``worktree_repo``
    among them."""
    mountinfo = proc.stdout
    repo = [ln.split()[5] for ln in mountinfo.splitlines() if ln.split()[4:5] == [str(worktree_repo)]]
    assert repo and repo[0].startswith("rw,"), mountinfo + proc.stderr
    bad = mounts_without_nosuid_nodev(mountinfo)
    assert not bad, "without nosuid,nodev:\n" + "\n".join(bad)


# -- privilege planted inside, run on the host (setuid/setgid bits, file capabilities) ------------

# What an agent can try in a rw dir to leave something that grants privilege on the host: the
# setuid/setgid bits by chmod of its own file, after a chown to a low uid, in the mode of a new file
# (open, mknod), by fchmod, and a file capability (CAP_SETUID) on a copy of python3.
SETUID_PLANTS = ("x-chmod-suid", "x-chmod-sgid", "x-chown", "x-open", "x-fchmod", "x-mknod")
PLANT_SETUID_PY = r"""
import os, shutil, stat, struct, sys
os.chdir(sys.argv[1])
idbin = open('/usr/bin/id', 'rb').read()
def attempt(name, fn):
    try:
        fn()
    except OSError as exc:
        print('REFUSED', name, exc.errno)
def copy(name, mode=0o755):
    fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_EXCL, mode)
    os.write(fd, idbin)
    os.close(fd)
def chown_then_chmod():
    copy('x-chown')
    os.chown('x-chown', 1, 1)
    os.chmod('x-chown', 0o6755)
def fchmod():
    fd = os.open('x-fchmod', os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o755)
    os.write(fd, idbin)
    os.fchmod(fd, 0o6755)
    os.close(fd)
def mknod():
    os.mknod('x-mknod', stat.S_IFREG | 0o6755)
    with open('x-mknod', 'r+b') as fh:
        fh.write(idbin)
def cap():
    shutil.copy('/usr/bin/python3', 'x-cap')
    # VFS_CAP_REVISION_2 | effective, permitted = CAP_SETUID (7)
    os.setxattr('x-cap', 'security.capability', struct.pack('<IIIII', 0x02000001, 1 << 7, 0, 0, 0))
copy('x-chmod-suid'); attempt('chmod-suid', lambda: os.chmod('x-chmod-suid', 0o4755))
copy('x-chmod-sgid'); attempt('chmod-sgid', lambda: os.chmod('x-chmod-sgid', 0o2755))
attempt('chown', chown_then_chmod)
attempt('open', lambda: copy('x-open', 0o6755))
attempt('fchmod', fchmod)
attempt('mknod', mknod)
attempt('cap', cap)
copy('x-plain', 0o600); os.chmod('x-plain', 0o755); print('PLAIN-CHMOD-OK')
print('PLANTED')
"""


def plant_setuid_script(directory: str) -> str:
    """A shell line for inside the sandbox that tries every plant in ``directory``."""
    import shlex
    return f"python3 -c {shlex.quote(PLANT_SETUID_PY)} {shlex.quote(directory)}"


def ids_as_nobody(directory: Path) -> dict[str, str]:
    """Run each planted file (and ``x-plain``, to show the run works) on the host as ``nobody``,
    through a hard link in a dir nobody can reach (same inode: same owner, bits and xattrs):
    ``{name: "EUID EGID"}`` as each printed them."""
    links = Path(tempfile.mkdtemp(prefix="csb-nobody-", dir="/tmp"))    # the same fs as the tests' trees
    links.chmod(0o755)
    seen = {}
    try:
        for name in SETUID_PLANTS + ("x-cap", "x-plain"):
            planted = directory / name
            if not planted.is_file():
                continue
            link = links / name
            os.link(planted, link)
            if name == "x-cap":
                argv = [str(link), "-I", "-c", "import os\ntry: os.setuid(0)\nexcept OSError: pass\n"
                        "print(os.geteuid(), os.getegid())"]
            else:
                argv = ["sh", "-c", f'echo "$({link} -u) $({link} -g)"']
            proc = subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=60, cwd="/")
            seen[name] = proc.stdout.strip() or f"(failed: {proc.stderr.strip()[-200:]})"
    finally:
        shutil.rmtree(links, ignore_errors=True)
    return seen


def assert_no_gain_as_nobody(directory: Path) -> None:
    """Every plant in ``directory`` that exists runs with nobody's own ids on the host."""
    nobody = pwd.getpwnam("nobody")
    mine = f"{nobody.pw_uid} {nobody.pw_gid}"
    seen = ids_as_nobody(directory)
    assert seen.get("x-plain") == mine, seen               # the check itself runs
    gained = {name: ids for name, ids in seen.items() if ids != mine}
    assert gained == {}, f"ran on the host as nobody with other ids: {gained}"


# -- credentials where users keep them ---------------------------------------------------------

SECRET = "tok-s3cret-7c1e"


def plant_credentials(home, secret: str = SECRET) -> None:
    """Tokens where users keep them: git's XDG credential store, the global gitconfig (an auth
    header and a token URL), and API keys exported by the shell's startup files."""
    git_dir = home / ".config" / "git"
    git_dir.mkdir(parents=True, exist_ok=True)
    (git_dir / "credentials").write_text(f"https://user:{secret}@example.invalid\n")
    (git_dir / "ignore").write_text("*.ignored-by-host-rule\n")
    (git_dir / "attributes").write_text("*.bin binary\n")
    with open(home / ".gitconfig", "a") as fh:
        fh.write(f"[http]\n\textraHeader = Authorization: Bearer {secret}\n"
                 f"[url \"https://{secret}@example.invalid/\"]\n\tinsteadOf = https://example.invalid/\n"
                 "[credential]\n\thelper = store\n")
    for rc in (".bashrc", ".profile"):
        with open(home / rc, "a") as fh:
            fh.write(f"export ANTHROPIC_API_KEY={secret}\nexport GITHUB_TOKEN={secret}\n")


# Everything the agent can read where a secret could be: its home (files and names), its
# environment, its shell's (sbox.shell's rcfile), git's merged config with the sources, and every
# config file git or a shell would read.
LOOK_FOR_SECRETS = f"""
grep -rsl {SECRET} "$HOME" /etc/gitconfig /etc/bash.bashrc /etc/profile 2>/dev/null | sed 's/^/FOUND-FILE /'
env | grep {SECRET} | sed 's/^/FOUND-ENV /'
bash -c '. /.chtop/shellrc 2>/dev/null; env' | grep {SECRET} | sed 's/^/FOUND-SHELL /'
bash -lc 'env' 2>/dev/null | grep {SECRET} | sed 's/^/FOUND-LOGIN /'
git config --list --show-origin | grep {SECRET} | sed 's/^/FOUND-GIT /'
printf 'protocol=https\\nhost=example.invalid\\n\\n' | GIT_TERMINAL_PROMPT=0 git credential fill 2>/dev/null | grep {SECRET} \
  | sed 's/^/FOUND-CRED /'
git -C alpha check-ignore -q x.ignored-by-host-rule && echo IGNORE-RULE-OK
git -C alpha check-attr binary x.bin | grep -q 'binary: set' && echo ATTRIBUTES-OK
cd alpha && echo hi > from-inside.txt && git add from-inside.txt && git commit -qm 'made inside' && echo COMMITTED
echo PROBES-DONE
"""


def assert_no_secret_inside(proc) -> None:
    """What ``LOOK_FOR_SECRETS`` printed: no secret anywhere, git's ignore rules and commits work."""
    out = proc.stdout
    assert "PROBES-DONE" in out, out + proc.stderr
    found = [line for line in out.splitlines() if line.startswith("FOUND")]
    assert found == [], out
    assert "IGNORE-RULE-OK" in out and "ATTRIBUTES-OK" in out, out
    assert "COMMITTED" in out, out + proc.stderr


# -- SysV IPC ----------------------------------------------------------------------------------

IPC_CREAT, IPC_RMID = 0o1000, 0
_libc = ctypes.CDLL(None, use_errno=True)
SHM_MAKE = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
            "print('SHMID', libc.shmget(int(sys.argv[1]), 1 << 20, 0o1000 | 0o600))")


def shm_make(key: int) -> int:
    """A host segment for ``key`` (root's, mode 0644)."""
    shmid = _libc.shmget(key, 4096, IPC_CREAT | 0o644)
    assert shmid >= 0, ctypes.get_errno()
    return shmid


def shm_exists(key: int) -> int:
    """The host's segment id for ``key``, or -1."""
    return _libc.shmget(key, 0, 0)


def shm_remove(key: int) -> None:
    shmid = shm_exists(key)
    if shmid >= 0:
        _libc.shmctl(shmid, IPC_RMID, None)


def shm_probe(key_inside: int, key_host: int) -> str:
    return (f"python3 -c {shlex.quote(SHM_MAKE)} {key_inside}; "
            f"awk 'NR > 1 {{print \"KEY\", $1}}' /proc/sysvipc/shm | grep -qw {key_host} && echo SAW-HOST-SEGMENT; "
            "echo PROBES-DONE")


@contextlib.contextmanager
def host_shm_keys():
    """(a key to make inside, the key of a segment the host has made); both removed afterwards."""
    keys = (random.randrange(1 << 24, 1 << 30), random.randrange(1 << 24, 1 << 30))
    shm_make(keys[1])                                                 # the host's own
    yield keys
    for key in keys:
        shm_remove(key)


class HelloHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200 and a line of text."""

    def do_GET(self):  # noqa: N802
        body = b"hello from the allowed domain\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving_http():
    """A plain HTTP server on the host's loopback (allowlist it ``private``); yields its port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HelloHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()


def request_loop_script(url: str, log: str, stop: str) -> str:
    """The agent's loop: a GET through the proxy every 0.1 s, each result and its time in ``log``."""
    return (f"until [ -e {stop} ]; do "
            f"code=$(curl -sS -o /dev/null -w '%{{http_code}}' --max-time 3 {url} 2>/dev/null); "
            f"echo \"$(date +%s.%N) ${{code:-000}}\" >> {log}; sleep 0.1; done; echo PROBES-DONE")


def loop_results(log: Path) -> list[tuple[float, bool]]:
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(float(when), code == "200") for when, code in (line.split() for line in lines if " " in line)]


def wait_good_after(log: Path, t: float, timeout: float) -> float:
    """Seconds from ``t`` to the loop's first good request after it."""
    first_good = eventually(lambda: next((when for when, ok in loop_results(log) if ok and when > t), None),
                            f"a good request after {t}", timeout, explain=lambda: f"the loop's last: {loop_results(log)[-5:]}")
    return first_good - t


def kill9_proxy(dev: Path) -> None:
    """kill -9 the daemon of the group's proxy (``dev``'s grouping dir)."""
    os.kill(int((dev.parent / ".chtop" / "net" / "proxy.pid").read_text()), signal.SIGKILL)


def disrupted_request_loop(run_sbox, dev: Path, url: str, disrupt=kill9_proxy):
    """``run_sbox(script)`` runs a sandbox in ``dev`` whose agent loops GETs of ``url``; once they
    work, ``disrupt(dev)`` (by default: kill -9 the group's proxy daemon).  Returns (the run, the
    loop's results from the start of ``disrupt`` on, each (seconds since that start, good), and the
    seconds from that start to the first good one after ``disrupt`` returned)."""
    log, stop = dev / "alpha" / "loop.log", dev / "alpha" / "loop.stop"    # a repo: writable inside
    for path in (log, stop):
        path.unlink(missing_ok=True)
    run: dict = {}
    thread = threading.Thread(target=lambda: run.update(proc=run_sbox(
        request_loop_script(url, "alpha/loop.log", "alpha/loop.stop"))))
    thread.start()
    back, killed_at = 99.0, time.time()
    try:
        def got_through():                               # the sandbox is up and its requests work
            if any(ok for _, ok in loop_results(log)):
                return True
            assert thread.is_alive(), f"the sandbox ended: {str(run)[-3000:]} {loop_results(log)[-5:]}"
            return False
        eventually(got_through, "the loop to get through", timeout=120, interval=0.1,
                   explain=lambda: f"{str(run)[-3000:]} {loop_results(log)[-5:]}")
        killed_at = time.time()
        disrupt(dev)
        done = time.time()
        back = done - killed_at + wait_good_after(log, done + 0.05, 5)
        eventually(lambda: sum(1 for when, _ in loop_results(log) if when >= killed_at + back) >= 10,
                   "ten requests since it came back")
    finally:
        stop.write_text("")
        thread.join(60)
    results = [(when - killed_at, ok) for when, ok in loop_results(log) if when >= killed_at]
    for path in (log, stop):                             # leave the worktree clean for other tests
        path.unlink(missing_ok=True)
    return run["proc"], results, back


def assert_loop_healed(proc, results, back: float, failures: int | None = None) -> None:
    """Good again within 5 s of the disruption, and good since; with ``failures``, no more than
    that many requests failed from the disruption on."""
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert back < 5                                      # back within 5 s, nobody did a thing
    since = [ok for when, ok in results if when >= back]
    assert len(since) >= 5 and all(since), results[-15:]                       # and it stays so
    if failures is not None:
        assert [ok for _, ok in results].count(False) <= failures, results
