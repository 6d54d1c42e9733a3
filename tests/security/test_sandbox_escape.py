"""The escape suite: from inside a real rootless sandbox, try to break each
claim of the security model -- and check that each allowed thing works.

Everything runs as an unprivileged test user (`inv sbox.run` via runuser),
in a workspace that user owns.  Each test is one container run; a probe
prints ``ESCAPED: <what>`` if an attempt succeeds, and every script ends
with ``PROBES-DONE`` so a script that died early cannot pass.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import shlex
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sandbox_helpers import HelloHandler, assert_loop_healed, disrupted_request_loop, serving_http, user_group_cm

pytestmark = [pytest.mark.podman, pytest.mark.slow]

SECRET = "s3cret-do-not-leak"


def _prepare(group):
    """As root, before the tree is handed to the test user."""
    base = group.base
    home = base / "home"
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text(SECRET + "\n")
    (home / "secret.txt").write_text(SECRET + "\n")
    (home / "ro-data").mkdir()
    (home / "ro-data" / "readme").write_text("readable\n")
    (home / "rw-data").mkdir()
    devs = base / "devs"
    devs.mkdir()
    subprocess.run(["mknod", str(devs / "fake0"), "c", "1", "3"], check=True)
    os.chmod(devs / "fake0", 0o666)
    (devs / "not-a-device").write_text("x")
    policy = group.toplevel / "sandbox"
    with open(policy / "fs-allow.txt", "a") as fh:
        fh.write("\n# test lines\nro ~/ro-data\nrw ~/rw-data\n")
    (policy / "devices.txt").write_text(f"/dev/nvidia*\n{devs}/*\n")
    (policy / "net-allow.txt").write_text("allowed.example private\n")
    (policy / "net-deny.txt").write_text("")
    # what `nox` in the worktree leaves: the root's __pycache__, where invoke reads tasks.py's bytecode
    (group.grouping / "dev" / "__pycache__").mkdir()
    # a worktree venv (only its pin matters here)
    venv = group.grouping / "dev" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (base / "hosts").write_text("127.0.0.1 allowed.example blocked.example\n")


@pytest.fixture(scope="module")
def g(remote_template):
    with user_group_cm(remote_template, extra_worktrees=("dev2",), prepare=_prepare) as group:
        group.env["CHTOP_PROXY_HOSTS_FILE"] = str(group.base / "hosts")
        yield group


def probes(*checks: tuple[str, str]) -> str:
    """A script: each (name, shell) must FAIL; success prints ESCAPED."""
    lines = [f"if ( {cmd} ) >/dev/null 2>&1; then echo {shlex.quote('ESCAPED: ' + name)}; fi"
             for name, cmd in checks]
    return "\n".join(lines + ["echo PROBES-DONE"])


def run_probes(g, *checks, **kw):
    proc = g.sbox(probes(*checks), **kw)
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    escaped = [line for line in proc.stdout.splitlines() if line.startswith("ESCAPED")]
    assert escaped == [], proc.stdout
    return proc


def tree_digest(*roots: Path) -> dict[str, str]:
    """Content hash of every file (and the names of every dir) under roots."""
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in ("objects", "__pycache__")]
            out[dirpath] = "dir"
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    out[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                except OSError:
                    out[path] = "unreadable"
    return out


# -- what must fail ---------------------------------------------------------------


def test_cannot_read_outside_the_allowlist(g):
    home = g.home
    proc = run_probes(
        g,
        ("read ~/.ssh key", f"cat {home}/.ssh/id_ed25519"),
        ("read a secret in $HOME", f"cat {home}/secret.txt"),
        ("read /etc/shadow", "cat /etc/shadow"),
        ("see the sibling worktree", f"ls {g.grouping}/dev2"),
        ("see chtop's state dir", f"ls {g.grouping}/.chtop/net"),
        ("see another worktree's git state", f"ls {g.grouping}/.chtop/git/dev2"),
        ("read the real home dir", f"ls {home}/.ssh"),
    )
    assert SECRET not in proc.stdout + proc.stderr


def test_cannot_write_what_the_host_runs(g):
    top, dev = g.toplevel, g.dev
    stores = [top / ".git", top / "alpha" / ".git", top / "beta" / ".git"]
    watched = [top / "tasks.py", top / "sandbox", top / "chtop_tasks", dev / ".git", dev / ".envrc",
               dev / ".claude", dev / ".venv", dev / "tasks.py", dev / "chtop_tasks", dev / "sandbox", dev / "__pycache__",
               dev / "alpha" / ".git", g.grouping / "dev2"]
    watched += [s / name for s in stores for name in ("config", "hooks", "info", "worktrees", "HEAD")]
    before = tree_digest(*[p for p in watched if p.is_dir()])
    before_files = {str(p): p.read_bytes() for p in watched if p.is_file()}
    from chtop_tasks.workspace.layout import private_store

    admin = private_store(g.grouping, "dev", "") / "worktrees" / "dev"
    checks = [
        ("write the toplevel's tasks.py", f"echo x >> {top}/tasks.py"),
        ("write the toplevel's policy", f"echo 'rw /' >> {top}/sandbox/fs-allow.txt"),
        ("write the worktree's policy copy", f"echo 'rw /' >> {dev}/sandbox/fs-allow.txt"),
        ("write the worktree's tasks.py", f"echo x >> {dev}/tasks.py"),
        ("write chtop_tasks/", f"touch {dev}/chtop_tasks/evil.py"),
        ("write a new top-level file", f"touch {dev}/noxfile_evil.py"),
        ("plant tasks.py's bytecode", f"touch {dev}/__pycache__/tasks.{sys.implementation.cache_tag}.pyc"),
        ("rewrite the worktree's .git file", f"echo 'gitdir: /tmp/x' > {dev}/.git"),
        ("rewrite a repo's .git file", f"echo 'gitdir: /tmp/x' > {dev}/alpha/.git"),
        ("write .envrc", f"echo 'echo pwned' >> {dev}/.envrc"),
        ("plant a git in .venv/bin", f"touch {dev}/.venv/bin/git"),
        ("write .claude/settings.json", f"touch {dev}/.claude/settings.json"),
        ("write .claude/env.sh", f"echo x >> {dev}/.claude/env.sh"),
        ("make .claude/commands", f"mkdir {dev}/.claude/commands"),
        ("write the admin commondir", f"echo /tmp/evil > {admin}/commondir"),
        ("write the admin gitdir", f"echo /tmp/evil > {admin}/gitdir"),
        ("write a sibling's admin dir", f"touch {private_store(g.grouping, 'dev2', '')}/worktrees/dev2/commondir"),
    ]
    for store in stores:
        checks += [
            (f"write {store}/config", f"git config --file {store}/config core.fsmonitor 'touch /tmp/pwned'"),
            (f"plant {store}/hooks/post-commit", f"echo '#!/bin/sh' > {store}/hooks/post-commit"),
            (f"create {store}/commondir", f"echo {dev} > {store}/commondir"),
            (f"create {store}/config.worktree", f"touch {store}/config.worktree"),
            (f"write {store}/info/attributes", f"echo '* filter=x' >> {store}/info/attributes"),
        ]
    checks.append(("write a sibling worktree", f"touch {g.grouping}/dev2/x"))
    run_probes(g, *checks)
    after = tree_digest(*[p for p in watched if p.is_dir()])
    assert after == before
    assert {str(p): p.read_bytes() for p in watched if p.is_file()} == before_files
    from chtop_tasks.workspace.layout import find_workspace, verify_git_dirs

    verify_git_dirs(find_workspace(dev))


def test_renaming_a_parent_cannot_plant_a_hook(g):
    top, dev = g.toplevel, g.dev
    from chtop_tasks.workspace.layout import private_store

    store = top / ".git"
    private = private_store(g.grouping, "dev", "alpha")
    admin = private / "worktrees" / "alpha"
    hooks_before = sorted(p.name for p in (store / "hooks").iterdir())
    proc = run_probes(
        g,
        ("rename .git and make .git/hooks", f"cd {dev} && mv .git .git2 && mkdir -p .git/hooks"),
        ("rename a repo dir", f"cd {dev} && mv alpha alpha2 && mkdir -p alpha/.git/hooks"),
        ("rename a repo's .git", f"cd {dev}/alpha && mv .git .git2 && mkdir -p .git/hooks"),
        ("rename .claude", f"cd {dev} && mv .claude .c2 && mkdir -p .claude/commands"),
        ("rename .venv", f"cd {dev} && mv .venv .v2 && mkdir -p .venv/bin"),
        ("rename the store's hooks", f"mv {store}/hooks {store}/h2 && mkdir {store}/hooks"),
        ("rename the store", f"mv {store} {top}/.git2"),
        ("rename a sub-repo store", f"mv {top}/alpha/.git {top}/alpha/.g2"),
        ("rename the shared refs", f"mv {store}/refs {store}/r2"),
        ("rename the private admin dir", f"mv {admin} {private}/worktrees/d2 && mkdir {admin}"),
        ("rename the private worktrees dir", f"mv {private}/worktrees {private}/w2"),
        ("rename the private hooks", f"mv {private}/hooks {private}/h2 && mkdir {private}/hooks"),
        ("rename the private config", f"mv {private}/config {private}/c2"),
        ("rename the private info", f"mv {private}/info {private}/i2 && mkdir {private}/info"),
        ("rename the private objects", f"mv {private}/objects {private}/o2 && mkdir -p {private}/objects/info"),
        ("rename the alternates dir", f"mv {private}/objects/info {private}/objects/i2"),
        ("unlink the admin commondir", f"rm -f {admin}/commondir && test ! -e {admin}/commondir"),
        ("rename the worktree itself", f"mv {dev} {g.grouping}/dev-x && mkdir -p {dev}/.git"),
        ("unlink the .git file", f"rm -f {dev}/.git && test ! -e {dev}/.git"),
    )
    # the host still sees the layout it expects
    assert (dev / ".git").is_file() and not (dev / ".git2").exists()
    assert (store / "hooks").is_dir() and not (store / "h2").exists()
    assert sorted(p.name for p in (store / "hooks").iterdir()) == hooks_before, proc.stdout
    assert not (dev / "alpha2").exists() and not (g.grouping / "dev-x").exists()
    from chtop_tasks.workspace.layout import find_workspace, verify_git_dirs

    verify_git_dirs(find_workspace(dev))


def test_launching_shell_env_does_not_leak(g):
    proc = g.sbox("env; echo PROBES-DONE",
                  extra_env={"CHTOP_TEST_SECRET": SECRET, "EDITOR": "vim-from-host", "LC_TIME": "C",
                             "SSH_AUTH_SOCK": "/tmp/agent.sock", "AWS_SECRET_ACCESS_KEY": SECRET})
    assert "PROBES-DONE" in proc.stdout, proc.stderr
    env = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert SECRET not in proc.stdout
    assert "SSH_AUTH_SOCK" not in env and "CHTOP_TEST_SECRET" not in env
    assert env["EDITOR"] == "vim-from-host" and env["LC_TIME"] == "C"     # env-allow.txt
    assert env["IS_SANDBOX"] == "1" and env["PYTHONSAFEPATH"] == "1"
    assert env["PATH"].startswith(f"{g.dev}/.venv/bin:")
    assert env["VIRTUAL_ENV"] == f"{g.dev}/.venv"
    assert env["CLAUDE_CONFIG_DIR"] == f"{g.grouping}/.chtop/agents/dev/config"      # dev's own
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert "localhost" in env["NO_PROXY"] and "127.0.0.1" in env["no_proxy"]
    assert SECRET not in proc.stderr            # nor in the echoed podman command


@pytest.fixture
def host_listener():
    """A TCP listener on the host's loopback (as root: not the proxy)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    yield srv.getsockname()[1]
    srv.close()


def test_no_direct_network_no_dns(g, host_listener):
    py = "/usr/bin/python3 -c"
    run_probes(
        g,
        ("TCP to an outside address", f"{py} 'import socket; socket.create_connection((\"1.1.1.1\", 80), 3)'"),
        ("TCP to the host's loopback port",
         f"{py} 'import socket; socket.create_connection((\"127.0.0.1\", {host_listener}), 3)'"),
        ("TCP to the host's proxy TCP port",
         f"{py} 'import socket,os; socket.create_connection((\"10.0.2.2\", 80), 3)'"),
        ("resolve a name with DNS", f"{py} 'import socket; socket.getaddrinfo(\"example.com\", 443)'"),
        ("getent hosts", "getent hosts example.com"),
        ("a non-loopback interface", "grep -v -E '^ *(Inter|face|lo:)' /proc/net/dev | grep -q ."),
    )


@pytest.fixture
def tls_server(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=allowed.example", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), HelloHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


def test_proxy_allows_listed_domain_and_blocks_the_rest(g, tls_server):
    with open(g.toplevel / "sandbox" / "net-allow.txt", "a") as fh:    # entries allow 443 and 80 unless
        fh.write(f"allowed.example:{tls_server} private\n")             # they name ports
    curl = "curl -sS -k --max-time 10 -o /dev/null -w '%{http_code}'"
    script = (
        f"echo allowed=$(curl -sS -k --max-time 10 https://allowed.example:{tls_server}/)\n"
        f"echo blocked=$({curl} https://blocked.example:{tls_server}/ 2>&1)\n"
        f"echo direct=$(curl -sS -k --noproxy '*' --max-time 5 https://allowed.example:{tls_server}/ 2>&1 "
        "| head -c 80)\n"
        "echo PROBES-DONE")
    proc = g.sbox(script)
    assert "PROBES-DONE" in proc.stdout, proc.stderr
    assert "allowed=hello from the allowed domain" in proc.stdout
    blocked = [line for line in proc.stdout.splitlines() if line.startswith("blocked=")][0]
    assert "hello" not in blocked and "403" in blocked
    direct = [line for line in proc.stdout.splitlines() if line.startswith("direct=")][0]
    assert "hello" not in direct


# -- what must work ---------------------------------------------------------------


def test_commit_in_the_worktree_lands_on_the_host_with_host_identity(g):
    proc = g.sbox("echo inside >> git_repositories.toml; git commit -qam nope 2>/dev/null && echo ESCAPED; "
                  "echo inside >> README.md && git commit -qam 'container repo from the sandbox' && "
                  "cd alpha && echo inside >> alpha.txt && git commit -qam 'from the sandbox' && "
                  "cd .. && echo change > beta/new.txt && git -C beta add new.txt && "
                  "git -C beta commit -qm 'beta from the sandbox' && echo COMMITTED")
    assert "COMMITTED" in proc.stdout and "ESCAPED" not in proc.stdout, proc.stdout + proc.stderr
    assert g.git(g.dev, "log", "-1", "--format=%s|%an") == "container repo from the sandbox|Sandbox Tester"
    log = g.git(g.dev / "alpha", "log", "-1", "--format=%s|%an|%ae|%cn")
    assert log == "from the sandbox|Sandbox Tester|sbt@example.invalid|Sandbox Tester"
    assert g.git(g.toplevel / "beta", "log", "-1", "--format=%s", "dev") == "beta from the sandbox"
    assert g.git(g.dev / "alpha", "status", "--porcelain") == ""


def test_allowlisted_paths_and_devices(g):
    home = g.home
    proc = g.sbox(
        f"cat {home}/ro-data/readme && "
        f"if touch {home}/ro-data/x 2>/dev/null; then echo ESCAPED-ro; fi; "
        f"echo written > {home}/rw-data/out && "
        f"test -c {g.base}/devs/fake0 && echo DEVICE-OK; "
        f"test -e {g.base}/devs/not-a-device || echo NON-DEVICE-SKIPPED; "
        f"echo data > {g.base}/devs/fake0 && echo DEVICE-WRITABLE; "
        f"echo $HOME > $HOME/scratch && echo HOME-SCRATCH-OK; echo PROBES-DONE")
    assert "PROBES-DONE" in proc.stdout, proc.stderr
    assert "readable" in proc.stdout and "ESCAPED" not in proc.stdout
    assert (home / "rw-data" / "out").read_text() == "written\n"
    assert "DEVICE-OK" in proc.stdout and "DEVICE-WRITABLE" in proc.stdout
    assert "NON-DEVICE-SKIPPED" in proc.stdout
    assert "HOME-SCRATCH-OK" in proc.stdout and not (home / "scratch").exists()


def test_self_edit_is_opt_in_and_loud(g):
    """The probes do see a write when one is allowed: --allow-self-edit opens chtop's code, but not
    the root's __pycache__ (bytecode invoke would load for tasks.py and no diff shows), made or not."""
    bytecode = g.dev / "__pycache__"
    owner = bytecode.stat()
    bytecode.rmdir()
    plant = f"mkdir -p {bytecode} && touch {bytecode}/tasks.{sys.implementation.cache_tag}.pyc"
    proc = g.sbox(f"echo '# agent was here' >> {g.dev}/tasks.py && echo WROTE; "
                  f"echo x >> {g.dev}/.envrc || echo ENVRC-STILL-PINNED; "
                  f"({plant}) 2>/dev/null || echo NO-BYTECODE-PLANTED", args=("--allow-self-edit",))
    try:
        assert "WROTE" in proc.stdout and "ENVRC-STILL-PINNED" in proc.stdout
        assert "NO-BYTECODE-PLANTED" in proc.stdout and not list(bytecode.glob("*"))
        assert "--allow-self-edit" in proc.stderr and "WRITABLE" in proc.stderr
        assert (g.dev / "tasks.py").read_text().endswith("# agent was here\n")
    finally:
        g.git(g.dev, "checkout", "--", "tasks.py")
        bytecode.mkdir(exist_ok=True)
        os.chown(bytecode, owner.st_uid, owner.st_gid)


def test_rootless_says_when_limits_are_not_enforced_and_leaves_no_run_files(g):
    from chtop_tasks.sandbox.limits import why_not_enforced

    proc = g.sbox("echo RAN", extra_env={"CHTOP_VERBOSE": "1"})   # said once per group, so maybe already
    assert "RAN" in proc.stdout, proc.stderr
    why = why_not_enforced(False)
    if why:                                       # cgroup v1 here: rootless podman cannot set them
        assert "limits NOT enforced (memory" in proc.stderr and why in proc.stderr
        assert "--memory" not in proc.stderr
    from chtop_tasks.core import places
    from chtop_tasks.sandbox import launcher

    runs = g.grouping / ".chtop" / "sbox" / "runs"
    if launcher.RUN_SCRATCH is not None:       # /dev/shm/chtop-<uid>/<group id>/, of the test user
        runs = launcher.RUN_SCRATCH / f"chtop-{g.user.pw_uid}" / places.group_id(g.grouping)
        assert runs.parent.stat().st_uid == g.user.pw_uid and runs.parent.stat().st_mode & 0o777 == 0o700
    assert not runs.exists()                   # the per-run skeleton (and the empty runs dir) went with the run


def test_no_relay_process_the_proxy_accepts_on_the_sandboxs_listener(g):
    """The entry hands its 127.0.0.1:3128 listener to the proxy (SCM_RIGHTS): no socat inside,
    only the holder that keeps the hand-off, and the agent's requests still reach the proxy."""
    proc = g.sbox("echo COMM $(cat /proc/[0-9]*/comm | sort | tr '\\n' ' '); "
                  "curl -sS -o /dev/null -w 'proxy=%{http_code}\\n' --max-time 10 http://blocked.example/")
    comm = next(line for line in proc.stdout.splitlines() if line.startswith("COMM "))
    assert "socat" not in comm and "chtop-handoff" in comm, comm
    assert "proxy=403" in proc.stdout, proc.stdout + proc.stderr



def test_a_kill9_of_the_proxy_under_a_running_sandbox_heals_within_5s(g):
    """The proxy dies (kill -9) while the agent runs a loop of requests: with nobody doing a thing,
    the loop works again within 5 s, and keeps working, in the same sandbox."""
    with serving_http() as port:
        with open(g.toplevel / "sandbox" / "net-allow.txt", "a") as fh:
            fh.write(f"allowed.example:{port} private\n")
        proc, results, back = disrupted_request_loop(
            lambda script: g.sbox(script, timeout=180), g.dev, f"http://allowed.example:{port}/")
    assert_loop_healed(proc, results, back)
    status = g.inv("net.status").stdout
    assert "restarts: 1 (last: killed by SIGKILL" in status, status


def test_net_restart_under_a_running_sandbox_fails_at_most_the_request_in_flight(g):
    """``inv net.restart`` (new code, new settings) while the agent loops requests: the sandbox
    hands its listener to the new proxy; no request fails but the one in flight, if any."""
    with serving_http() as port:
        with open(g.toplevel / "sandbox" / "net-allow.txt", "a") as fh:
            fh.write(f"allowed.example:{port} private\n")
        proc, results, back = disrupted_request_loop(
            lambda script: g.sbox(script, timeout=180), g.dev, f"http://allowed.example:{port}/",
            disrupt=lambda dev: g.inv("net.restart", check=True))
    assert_loop_healed(proc, results, back, failures=1)
