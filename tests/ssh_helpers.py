"""A real second host for the fleet tests: an OpenSSH server on 127.0.0.1, started by the test.

Debian's sshd runs as root on a free high port with a host key and a client key this test makes
(in a fresh dir under /tmp), and lets in only the second local account ``chtop-ssh`` (its own
HOME, made like the sandbox tests' user), by the client key alone.  The client side is an ssh
config file (``Host`` alias, port, key, known_hosts pinned to the host key, BatchMode) that the
test's own chtop config passes as ``ssh -F`` (``ssh_config`` in ``config.toml``): ssh reads
``~/.ssh/config`` from the passwd entry, not ``$HOME``, so a hermetic test cannot use that one.

``SshHost.freeze()`` stops the server and every process serving its connections (SIGSTOP: a host
that answers nothing, the hard case for timeouts); ``stop()`` ends them all.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox_helpers import _locked, cgroup_hint, ensure_user_venv, missing

SSH_USER = "chtop-ssh"
ALIAS = "gpu1"


def require_sshd() -> str:
    if os.geteuid() != 0:
        missing("the ssh tests start sshd and log in as a second account: run them as root")
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if sshd is None:
        missing("sshd is not installed (Debian: apt-get install openssh-server; ./bootstrap does)")
    for tool in ("ssh", "ssh-keygen", "useradd"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            missing(f"{tool} is not installed")
    return sshd


def ensure_ssh_user() -> pwd.struct_passwd:
    """The account the test's sshd logs in as, with its own HOME and git identity."""
    with _locked("chtop-ssh-user"):
        try:
            user = pwd.getpwnam(SSH_USER)
        except KeyError:
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", SSH_USER], check=True)
            user = pwd.getpwnam(SSH_USER)
        gitconfig = Path(user.pw_dir) / ".gitconfig"
        if not gitconfig.exists():
            gitconfig.write_text("[user]\n\tname = Remote Tester\n\temail = remote@example.invalid\n"
                                 "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgSign = false\n")
            os.chown(gitconfig, user.pw_uid, user.pw_gid)
    return user


def has_subordinate_ids(name: str) -> bool:
    """Whether /etc/subuid and /etc/subgid give ``name`` a range (rootless podman maps its
    container's users there; ``useradd -m`` adds them for a new account)."""
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            return False
        if not any(line.split(":")[0] == name for line in lines):
            return False
    return True


def remote_podman_works(host: "SshHost") -> None:
    """Rootless podman as the ssh account, in a plain ssh login: skip (fail in CI) with podman's
    reason when it cannot run.  No logind runs here, so the login has no XDG_RUNTIME_DIR, as on a
    box reached over ssh without a systemd user session: podman then keeps its runtime state in
    /tmp/podman-run-UID, and chtop its own in /tmp/chtop-UID (``places.runtime_base``)."""
    if not has_subordinate_ids(SSH_USER):
        missing(f"{SSH_USER} has no /etc/subuid or /etc/subgid range (useradd -m adds one): "
                "rootless podman cannot run as it")
    probe = ('set -e; r=$(mktemp -d); cd "$r"; mkdir usr etc proc dev sys tmp run; ln -s usr/bin bin; '
             'ln -s usr/lib lib; ln -s usr/lib64 lib64; '
             'podman run --rm --network=none -v /usr:/usr:ro -v /etc:/etc:ro --rootfs "$r" /bin/echo podman-ok; '
             'cd /; rm -rf "$r"')
    proc = host.ssh(probe, check=False, timeout=180)
    if "podman-ok" not in proc.stdout:
        missing(f"rootless podman does not run as {SSH_USER} over ssh: {proc.stderr.strip()[-300:]}"
                f"{cgroup_hint(proc.stderr)}")


def write_login_file(user: pwd.struct_passwd, relative: str, text: str) -> Path:
    """``text`` in ``relative`` under the account's HOME, owned by it (its dirs too), replaced whole
    (a test running at the same time reads the old file or the new one, never half of one)."""
    home, rel = Path(user.pw_dir), Path(relative)
    (home / rel).parent.mkdir(parents=True, exist_ok=True)
    fresh = (home / rel).with_name(f".{rel.name}.{os.getpid()}")
    fresh.write_text(text)
    os.chown(fresh, user.pw_uid, user.pw_gid)
    os.replace(fresh, home / rel)
    for part in [*rel.parents][:-1]:                 # each dir above it, up to HOME
        os.chown(home / part, user.pw_uid, user.pw_gid)
    return home / rel


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return (path.with_suffix(".pub")).read_text().strip()


SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {base}/host_key
PidFile {base}/sshd.pid
AuthorizedKeysFile {base}/authorized_keys
AllowUsers {user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UsePAM yes
StrictModes no
LogLevel VERBOSE
"""

CLIENT_CONFIG = """\
Host {alias}
  HostName 127.0.0.1
  Port {port}
  User {user}
  IdentityFile {base}/client_key
  IdentitiesOnly yes
  UserKnownHostsFile {base}/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
"""


@dataclass
class SshHost:
    base: Path
    port: int
    user: pwd.struct_passwd
    config: Path              # the client's ssh config (ssh -F)
    proc: subprocess.Popen
    alias: str = ALIAS

    def ssh(self, command: str, *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """``command`` run by the remote login shell, over a fresh connection of the test's own."""
        proc = subprocess.run(["ssh", "-F", str(self.config), self.alias, command], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode:
            raise AssertionError(f"ssh {self.alias} {command!r} exited {proc.returncode}\n{proc.stderr}"
                                 f"\nsshd log:\n{self.log()[-2000:]}")
        return proc

    def log(self) -> str:
        return (self.base / "sshd.log").read_text(errors="replace")

    def processes(self) -> list[int]:
        """The server and every process under it (its connections, their shells)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += children.get(pid, [])
        return found

    def signal_all(self, sig) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def freeze(self) -> None:
        self.signal_all(signal.SIGSTOP)

    def stop(self) -> None:
        pids = self.processes()
        for sig in (signal.SIGCONT, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        self.proc.wait(timeout=30)


def start_sshd(extra_config: str = "") -> SshHost:
    """sshd on a free port as root, for ``chtop-ssh``, keys and configs in a fresh dir under /tmp;
    ``extra_config``: lines added to its sshd_config (a test's ``ForceCommand``: a host that does
    more than it is asked)."""
    sshd = require_sshd()
    user = ensure_ssh_user()
    base = Path(tempfile.mkdtemp(prefix="csh-", dir="/tmp"))
    base.chmod(0o755)                                   # sshd reads authorized_keys as the user
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation dir
    host_pub = keygen(base / "host_key")
    (base / "authorized_keys").write_text(keygen(base / "client_key") + "\n")
    (base / "authorized_keys").chmod(0o644)
    port = free_port()
    (base / "sshd_config").write_text(SSHD_CONFIG.format(port=port, base=base, user=SSH_USER) + extra_config)
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    config = base / "ssh_config"
    config.write_text(CLIENT_CONFIG.format(alias=ALIAS, port=port, user=SSH_USER, base=base))
    config.chmod(0o600)
    checked = subprocess.run([sshd, "-t", "-f", str(base / "sshd_config")], capture_output=True, text=True)
    if checked.returncode:
        missing(f"sshd refuses the test's config: {checked.stderr.strip()}")
    log = open(base / "sshd.log", "w")
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(base / "sshd_config")], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    host = SshHost(base, port, user, config, proc)
    deadline = time.monotonic() + 60
    while True:
        probe = subprocess.run(["ssh", "-F", str(config), ALIAS, "true"], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=60)
        if probe.returncode == 0:
            return host
        if proc.poll() is not None or time.monotonic() > deadline:
            host.stop() if proc.poll() is None else None
            raise AssertionError(f"sshd on port {port} never let {SSH_USER} in: {probe.stderr}\n{host.log()}")
        time.sleep(0.2)


def remote_group_dir(user: pwd.struct_passwd) -> Path:
    """A fresh dir under /tmp owned by the ssh account: the host's grouping dir goes inside."""
    base = Path(tempfile.mkdtemp(prefix="csr-", dir="/tmp"))
    base.chmod(0o755)
    os.chown(base, user.pw_uid, user.pw_gid)
    return base


def remote_python() -> Path:
    """A python the ssh account can run that has chtop's deps (host.add --python skips ./bootstrap,
    which would fetch them from PyPI)."""
    return ensure_user_venv() / "bin" / "python"
