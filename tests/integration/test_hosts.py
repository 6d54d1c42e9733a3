"""The fleet: hosts over SSH, with a real second host (sshd started by the test, tests/ssh_helpers.py).

The unit tests check the parts that take a host's word (the answer schema, the host records) with
no processes; the rest run the real loop through the test's sshd: host.add installs chtop from the
test's toplevel with git over SSH, host.list / worktree.create --host / git.status / host.remove
ask the chtop there, and a frozen sshd is reported as not answering within the bound, never a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import git
from ssh_helpers import remote_group_dir, remote_python, start_sshd

from chtop_tasks.core.errors import UsageError
from chtop_tasks.hosts import answers, records
from chtop_tasks.hosts.answers import BadAnswer, parse_answer
from chtop_tasks.hosts.ssh import ANSWER_TIMEOUT as BOUND
from chtop_tasks.hosts.ssh import remote_line

ESC = "\x1b"


# -- a host's answers: parsed against a schema, strings inert --------------------------------------

def worktree_answer(**overrides):
    repo = {"repo": "alpha", "branch": "dev", "integration": "main", "ahead": 1, "behind": 0, "dirty": False,
            "problem": None}
    wt = {"name": "dev", "root": "/x/dev", "venv": "missing", "problem": None, "repos": [repo]}
    wt.update(overrides)
    return [wt]


def test_an_answer_keeps_only_the_schema_fields_and_every_string_is_inert():
    hostile = worktree_answer(root=f"/x/{ESC}]52;c;cm0gLXJmIH4={ESC}\\dev\n$ rm -rf ~", extra="dropped")
    hostile[0]["repos"][0]["problem"] = f"{ESC}[2J\u202egnp.exe"
    parsed = parse_answer(json.dumps(hostile), answers.WORKTREES, "test")
    assert "extra" not in parsed[0]
    assert ESC not in parsed[0]["root"] and "^[]52" in parsed[0]["root"]
    assert "\n" not in parsed[0]["root"] and "^J" in parsed[0]["root"]
    assert parsed[0]["repos"][0]["problem"] == "^[[2J<U+202E>gnp.exe"


@pytest.mark.parametrize("answer, why", [
    ("not json", "not JSON"),
    (json.dumps({"name": "dev"}), "expected a list"),
    (json.dumps(worktree_answer(name="../../etc")), "not a worktree name"),
    (json.dumps(worktree_answer(name=f"dev{ESC}[2J")), "not a worktree name"),
    (json.dumps(worktree_answer(repos=[{"repo": "a"}])), "is missing"),
    (json.dumps(worktree_answer(repos="alpha")), "expected a list"),
    (json.dumps(worktree_answer(venv=3)), "expected str"),
])
def test_an_answer_that_is_not_what_was_asked_is_refused_naming_the_field(answer, why):
    with pytest.raises(BadAnswer, match=why):
        parse_answer(answer, answers.WORKTREES, "host gpu1: worktree.list")


def test_a_count_that_is_a_boolean_or_huge_is_refused():
    for bad in (True, 10**30):
        wt = worktree_answer()
        wt[0]["repos"][0]["ahead"] = bad
        with pytest.raises(BadAnswer):
            parse_answer(json.dumps(wt), answers.WORKTREES, "test")


def test_an_answer_larger_than_the_cap_is_refused(monkeypatch):
    monkeypatch.setattr(answers, "MAX_ANSWER", 100)
    with pytest.raises(BadAnswer, match="larger than"):
        parse_answer(json.dumps(worktree_answer(root="x" * 200)), answers.WORKTREES, "test")


# -- host records ---------------------------------------------------------------------------------

def test_host_records_round_trip_and_bad_fields_are_refused_changing_nothing():
    records.record_host(records.Host("gpu1", "me@gpu1.example", "ch/top", "/usr/bin/python3"))
    before = records.hosts_path().read_text()
    for bad in (records.Host("-x", "gpu1", "ch/top", "python3"), records.Host("gpu2", "-oProxyCommand=x", "ch", "p"),
                records.Host("gpu2", "gpu2", "../etc", "python3"), records.Host("local", "h", "ch/top", "p"),
                records.Host("gpu2", "gpu2", "ch/top", "py; rm -rf ~"), records.Host("gpu2", "gpu2", "~/ch/top", "p")):
        with pytest.raises(UsageError, match="bad"):
            records.record_host(bad)
    assert records.hosts_path().read_text() == before
    assert records.load_hosts() == {"gpu1": records.Host("gpu1", "me@gpu1.example", "ch/top", "/usr/bin/python3")}
    with pytest.raises(UsageError, match="no host 'gpu3'.*hosts: gpu1"):
        records.get_host("gpu3")


def test_the_remote_command_line_is_the_argv_quoted_for_the_remote_shell():
    argv = ["printf", "%s\\n", "$(id)", "a b;c", "`x`", "'"]
    line = remote_line(argv, "/tmp/dir with space")
    import shlex
    assert shlex.split(line) == ["cd", "/tmp/dir with space", "&&", *argv]


# -- the real loop, through the test's sshd -------------------------------------------------------

@pytest.fixture
def sshd():
    host = start_sshd()
    yield host
    host.stop()
    shutil.rmtree(host.base, ignore_errors=True)


@pytest.fixture
def fleet_config(sshd):
    """This side's chtop config: ssh -F the test's client config; a short bound for a question."""
    set_host_timeout(sshd, 20)
    return sshd


def set_host_timeout(sshd, seconds: int) -> None:
    """This side's config.toml: ssh -F the test's client config, and ``host_timeout``."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f'ssh_config = "{sshd.config}"\nhost_timeout = {seconds}\n')


@pytest.fixture
def remote_base(sshd):
    base = remote_group_dir(sshd.user)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def close_masters(group, sshd) -> None:
    subprocess.run(["ssh", "-F", str(sshd.config), "-O", "exit", sshd.alias], capture_output=True,
                   stdin=subprocess.DEVNULL)


def test_the_remote_shell_runs_exactly_the_argv(fleet_config, remote_base):
    from chtop_tasks.hosts.ssh import run_on

    host = records.Host("gpu1", fleet_config.alias, str(remote_base), "python3")
    argv = ["printf", "%s\\n", "$(id -u)", "a b;c", "`whoami`", "'", "--"]
    try:
        out = run_on(host, argv).stdout
    finally:
        close_masters(None, fleet_config)
    assert out.splitlines() == argv[2:]


@pytest.mark.slow
def test_fleet_loop_add_list_create_commit_status_remove_update_unreachable(initialized, fleet_config, remote_base):
    g, sshd = initialized, fleet_config
    top = g.toplevel
    remote_top = remote_base / "grp" / "top"
    try:
        added = g.inv(top, "host.add", "gpu1", sshd.alias, "--group", str(remote_base / "grp"),
                      "--python", str(remote_python()))
        assert "added host gpu1" in added.stdout
        assert "$ ssh " in added.stderr and "ControlMaster=auto" in added.stderr     # every command echoed
        here = git(top, "rev-parse", "HEAD")
        assert sshd.ssh(f"git -C {remote_top} rev-parse HEAD").stdout.strip() == here
        assert sshd.ssh(f"git -C {remote_top}/alpha rev-parse main").stdout.strip() == git(top / "alpha",
                                                                                         "rev-parse", "main")
        assert 'target = "gpu1"' in records.hosts_path().read_text()

        listed = g.inv(top, "host.list").stdout
        assert "gpu1" in listed and "reachable, same chtop as here, 0 worktree(s)" in listed
        assert "0 session(s), pending: none" in listed
        assert_pending_listed_from_the_hosts_proxy(g, sshd, remote_top)

        again = g.inv(top, "host.add", "gpu1", sshd.alias, check=False)
        assert again.returncode == 2 and "already recorded" in again.stderr

        g.inv(top, "worktree.create", "--name", "dev", "--host", "gpu1", "--no-venv")
        assert not (g.grouping / "dev").exists()                  # made there, not here
        assert sshd.ssh(f"test -d {remote_base}/grp/dev/alpha && git -C {remote_base}/grp/dev/alpha "
                        "symbolic-ref --short HEAD").stdout.strip() == "dev"
        listing = g.inv(top, "worktree.list").stdout
        assert "gpu1:dev" in listing and "+0/-0 vs main" in listing

        sshd.ssh(f"cd {remote_base}/grp/dev/alpha && echo remote > remote.txt && git add remote.txt && "
                 "git commit -q -m 'made on gpu1'")
        status = g.inv(top, "git.status").stdout
        assert "gpu1:dev/alpha: 1 commit(s) ahead of, 0 behind main" in status
        assert "gpu1:dev/beta" not in status

        refused = g.inv(top, "host.remove", "gpu1", check=False)
        assert refused.returncode == 3, refused.stderr
        assert "dev/alpha: 1 commit(s) not merged up" in refused.stderr
        assert "gpu1" in records.load_hosts()
        refused = g.inv(top, "worktree.delete", "--name", "dev", "--host", "gpu1", check=False)
        assert refused.returncode == 3, refused                  # the host's own delete refuses, as here
        assert "not merged" in refused.stderr + refused.stdout
        assert sshd.ssh(f"test -d {remote_base}/grp/dev").returncode == 0

        chtop = [sys.executable, "-m", "chtop_tasks.cli.chtop", "go", "dev", "--host", "gpu1"]
        went = subprocess.run(chtop, cwd=top, input="pwd\n", capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=str(top)))
        assert went.returncode == 0, went
        assert went.stdout.splitlines()[-1] == f"{remote_base}/grp/dev"     # a shell there, in the worktree
        no_session = g.inv(top, "session.attach", "--host", "gpu1", "--name", "dev", check=False)
        assert no_session.returncode == 3, no_session            # ssh -t ran the host's own session.attach
        assert "no session for worktree dev" in no_session.stderr, no_session

        diff = g.inv(top, "git.diff", "--integration", "--host", "gpu1", "--name", "dev")
        assert "+remote" in diff.stdout and "remote.txt" in diff.stdout

        g.commit(top, "NEWS", "new chtop commit\n", "chtop: a new commit here")
        g.push_upstream_commit("alpha", "upstream.txt", "moved here\n")
        behind = g.inv(top, "host.list").stdout
        assert "behind: chtop " + here[:12] in behind and "inv host.update --name gpu1" in behind
        refused = g.inv(top, "worktree.create", "--name", "dev2", "--host", "gpu1", "--no-venv", check=False)
        assert refused.returncode == 3 and "inv host.update --name gpu1 first" in refused.stderr
        updated = g.inv(top, "host.update", "--name", "gpu1").stdout
        assert f"updated chtop {here[:12]} -> {git(top, 'rev-parse', 'HEAD')[:12]}" in updated
        assert sshd.ssh(f"cat {remote_top}/NEWS").stdout == "new chtop commit\n"
        assert "same chtop as here" in g.inv(top, "host.list").stdout
        assert "gpu1:dev/alpha: 1 commit(s) ahead of, 1 behind main" in g.inv(top, "git.status").stdout
        g.inv(top, "git.rebase-down", "--host", "gpu1", "--name", "dev")
        rebased = g.inv(top, "git.status").stdout
        assert "gpu1:dev/alpha: 1 commit(s) ahead of, 0 behind main" in rebased, rebased
        assert "up to date" in g.inv(top, "host.update", "--all").stdout

        # merge-up --host: the commit made there lands here, exactly; then the host is brought up to date
        before = stores_here(g)
        dry = g.inv(top, "git.merge-up", "--host", "gpu1", "--name", "dev", "--dry-run")
        assert stores_here(g) == before, dry
        remote_tip = sshd.ssh(f"git -C {remote_base}/grp/dev/alpha rev-parse HEAD").stdout.strip()
        landed = g.inv(top, "git.merge-up", "--host", "gpu1", "--name", "dev")
        assert git(top / "alpha", "rev-parse", "main") == remote_tip, landed
        assert (top / "alpha" / "remote.txt").read_text() == "remote\n"
        assert "inv host.update --name gpu1, then inv git.rebase-down --host gpu1 --name dev" in landed.stdout
        host = records.get_host("gpu1")
        assert "removed host gpu1" in g.inv(top, "host.remove", "gpu1").stdout     # its commits are here now
        records.record_host(host)
        assert "gpu1: updated " in g.inv(top, "host.update", "--name", "gpu1").stdout
        assert sshd.ssh(f"git -C {remote_top}/alpha rev-parse main").stdout.strip() == remote_tip
        assert "gpu1:dev is up to date with its integration branches" in g.inv(top, "git.status").stdout
        sshd.ssh(f"cd {remote_base}/grp/dev/alpha && echo more > more.txt && git add more.txt && "
                 "git commit -q -m 'more on gpu1'")
        refused = g.inv(top, "host.remove", "gpu1", check=False)
        assert refused.returncode == 3 and "dev/alpha: 1 commit(s) not merged up" in refused.stderr, refused

        sessions = g.inv(top, "session.list").stdout
        assert "unreachable" not in sessions

        g.inv(top, "worktree.delete", "--name", "dev", "--host", "gpu1", "--force")
        assert sshd.ssh(f"test -e {remote_base}/grp/dev", check=False).returncode == 1
        assert sshd.ssh(f"git -C {remote_top}/alpha log -1 --format=%s dev").stdout.strip() == "more on gpu1"
        host = records.get_host("gpu1")
        assert "removed host gpu1" in g.inv(top, "host.remove", "gpu1").stdout
        assert "gpu1" not in records.load_hosts()
        records.record_host(host)                      # again, for the frozen host below
        # the bound as shipped from here on (the steps above had a longer one, for a loaded machine);
        # the shared connection opened next keeps alive by it
        close_masters(g, sshd)
        set_host_timeout(sshd, BOUND)
        assert "unreachable" not in g.inv(top, "session.list").stdout   # its shared connection open again

        sshd.freeze()                                  # a host that answers nothing at all
        started = time.monotonic()
        frozen = g.inv(top, "session.list", check=False, timeout=120)
        took = time.monotonic() - started
        assert frozen.returncode == 1, frozen            # the listing is incomplete: said on stderr
        assert f"warning: gpu1: did not answer within {BOUND} s (ssh gpu1: " in frozen.stderr, frozen
        # the shared connection's keepalives notice the silence, and ssh may then try a connection of
        # its own (ConnectTimeout): at most about twice the bound, never the question's whole timeout
        assert took < 2 * BOUND + 15, f"session.list took {took:.0f}s against a frozen host"
        assert f"gpu1         gpu1                 did not answer within {BOUND} s (ssh gpu1: " in \
            g.inv(top, "host.list", check=False, timeout=120).stdout    # a new connection: ConnectTimeout
        not_updated = g.inv(top, "host.update", "--all", check=False, timeout=120)
        assert not_updated.returncode == 1 and "gpu1: not updated: gpu1: did not answer" in not_updated.stdout
    finally:
        sshd.stop()
        close_masters(g, sshd)


def assert_pending_listed_from_the_hosts_proxy(g, sshd, remote_top) -> None:
    """A request the host's own proxy blocked is named on the host's line of host.list here."""
    import socket

    from proxy_helpers import free_port, read_head

    there = f"cd {remote_top} && CHTOP_PROXY_PORT={free_port()} {remote_python()} -m invoke"
    port = int(there.split("CHTOP_PROXY_PORT=")[1].split()[0])
    sshd.ssh(f"{there} net.start")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"CONNECT blocked.example.test:443 HTTP/1.1\r\nHost: blocked.example.test:443\r\n\r\n")
            status, _ = read_head(s)
        assert status == 403
        listed = g.inv(g.toplevel, "host.list").stdout
        assert "pending: 1 (blocked.example.test from (group))" in listed, listed
    finally:
        sshd.ssh(f"{there} net.stop --force", check=False)


EVIL_PYTHON = """#!/bin/sh
# a host whose chtop an agent has rewritten: every answer carries terminal control sequences
case "$3" in
  worktree.list) cat <<'END'
{worktrees}
END
  ;;
  session.list) cat <<'END'
{sessions}
END
  ;;
esac
"""


def test_a_hostile_hosts_answers_reach_the_terminal_inert(initialized, fleet_config, remote_base):
    """The attack: the host's chtop (changed by one of its agents) answers with OSC 52 (write the
    clipboard), a title change and a screen clear in every string chtop prints from it."""
    g, sshd = initialized, fleet_config
    osc = "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b]2;pwned\x07\x1b[2J"
    worktrees = worktree_answer(root=f"/r/dev{osc}\ngpu1:prod  (gpu1:/forged)")
    worktrees[0]["repos"][0].update(repo=f"alpha{osc}", integration=f"main{osc}")
    sessions = [{"worktree": "dev", "agent": f"claude{osc}", "state": f"working{osc}", "since": 0, "pending": 0}]
    script = remote_base / "evil-python"
    script.write_text(EVIL_PYTHON.replace("{worktrees}", json.dumps(worktrees))
                      .replace("{sessions}", json.dumps(sessions)))
    script.chmod(0o755)
    (remote_base / "top").mkdir()
    git(remote_base / "top", "init", "-q")
    subprocess.run(["chown", "-R", f"{sshd.user.pw_uid}:{sshd.user.pw_gid}", str(remote_base)], check=True)
    records.record_host(records.Host("gpu1", sshd.alias, f"{remote_base}/top", str(script)))
    try:
        listing = g.inv(g.toplevel, "worktree.list")
        sessions_out = g.inv(g.toplevel, "session.list")
    finally:
        close_masters(g, sshd)
    for out in (listing.stdout, sessions_out.stdout):
        assert "\x1b" not in out and "\x07" not in out
    assert "gpu1:dev  (gpu1:/r/dev^[]52;c;ZWNobyBwd25lZA==^G^[]2;pwned^G^[[2J^Jgpu1:prod  (gpu1:/forged))" \
        in listing.stdout
    assert not any(line.startswith("gpu1:prod") for line in listing.stdout.splitlines())   # no forged line
    assert "alpha^[]52" in listing.stdout
    assert "gpu1             dev              claude^[]52" in sessions_out.stdout


# -- git.merge-up --host: a host's branch is data, landed only when it is what the host named --------

STANDIN_CHTOP = """#!/bin/sh
# the host's chtop, standing in: says what the test wrote about its worktrees
case "$3" in
  worktree.list) cat "{dir}/worktrees.json" ;;
  *) exit 2 ;;
esac
"""


class MirrorHost:
    """Host gpu1: the test's sshd; its toplevel a clone of this toplevel (same commits) whose stores
    hold worktree dev's branch; its chtop a stand-in that answers ``worktree.list`` as the test says.
    Git there runs as the ssh account (``run``)."""

    def __init__(self, g, server, base: Path):
        self.g, self.sshd, self.base = g, server, base
        self.top = base / "top"
        git(base, "clone", "-q", str(g.toplevel), str(self.top))
        for repo in g.repos:
            git(base, "clone", "-q", str(g.toplevel / repo), str(self.top / repo))
        for d in self.dirs():
            git(d, "branch", "dev")
        script = base / "standin-python"
        script.write_text(STANDIN_CHTOP.replace("{dir}", str(base)))
        script.chmod(0o755)
        self.say_worktree()
        records.record_host(records.Host("gpu1", server.alias, str(self.top), str(script)))

    def dirs(self) -> list[Path]:
        return [self.top, *(self.top / repo for repo in self.g.repos)]

    def say_worktree(self, dirty: bool = False) -> None:
        repos = [{"repo": label, "branch": "dev", "integration": "main", "ahead": 0, "behind": 0, "dirty": dirty,
                  "problem": None} for label in ("(container)", *self.g.repos)]
        (self.base / "worktrees.json").write_text(json.dumps([{"name": "dev", "root": f"{self.base}/dev",
                                                               "venv": "missing", "problem": None,
                                                               "repos": repos}]))
        subprocess.run(["chown", "-R", f"{self.sshd.user.pw_uid}:{self.sshd.user.pw_gid}", str(self.base)],
                       check=True)

    def run(self, repo: str, script: str) -> str:
        """``script`` run there by the ssh account's shell, in the store of ``repo`` ("" the container)."""
        return self.sshd.ssh(f"cd {self.top / repo} && {script}").stdout.strip()

    def commit_on_dev(self, repo: str, filename: str, text: str = "made there\n") -> str:
        return self.run(repo, f"git checkout -q dev && printf '{text}' > {filename} && git add {filename} && "
                              f"git commit -q -m 'made on gpu1: {filename}' && git rev-parse HEAD")


def stores_here(g) -> dict:
    """Every ref and every object file of this toplevel's stores, and each checkout's HEAD."""
    state = {}
    for d in [g.toplevel, *(g.toplevel / repo for repo in g.repos)]:
        objects = d / ".git" / "objects"
        state[str(d)] = (git(d, "for-each-ref", "--format=%(refname) %(objectname)"),
                         sorted(str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file()),
                         git(d, "rev-parse", "HEAD"))
    return state


def leftover_quarantines(g) -> list[Path]:
    base = g.grouping / ".chtop" / "host-merge"
    return list(base.iterdir()) if base.is_dir() else []


@pytest.fixture
def mirror_host(initialized, fleet_config, remote_base):
    host = MirrorHost(initialized, fleet_config, remote_base)
    yield host
    close_masters(None, fleet_config)


def test_merge_up_host_lands_exactly_the_hosts_tip_and_its_dry_run_changes_nothing(mirror_host):
    g, there = mirror_host.g, mirror_host
    tip = there.commit_on_dev("alpha", "remote.txt")
    before = stores_here(g)
    dry = g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev", "--dry-run")
    assert stores_here(g) == before and not leftover_quarantines(g)          # nothing here moved or arrived
    assert "gpu1:dev" in dry.stdout and f"would run: $ git merge --ff-only {tip}" in dry.stdout, dry.stdout
    assert f"inv git.merge-up --host gpu1 --name dev --expect alpha={tip}" in dry.stdout
    fetch = next(line for line in dry.stderr.splitlines() if " fetch " in line and "gpu1:" in line)
    assert "core.sshCommand=ssh -F" in fetch and "ControlMaster=auto" in fetch and "BatchMode=yes" in fetch
    assert "transfer.fsckObjects=true" in fetch and "--fsize=" in fetch and "+refs/heads/dev:" in fetch

    moved = there.commit_on_dev("alpha", "later.txt")                           # committed after the review
    refused = g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev", "--expect", f"alpha={tip}",
                    check=False)
    assert refused.returncode == 3 and "the dry run you reviewed would land" in refused.stderr, refused
    assert stores_here(g) == before

    landed = g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev", "--expect", f"alpha={moved}")
    assert git(g.toplevel / "alpha", "rev-parse", "main") == moved                # exactly the host's tip
    assert (g.toplevel / "alpha" / "later.txt").read_text() == "made there\n"
    assert git(g.toplevel / "alpha", "rev-parse", "refs/chtop/hosts/gpu1/dev") == moved
    assert f"landed gpu1:dev/alpha at {moved}" in landed.stdout
    assert "inv host.update --name gpu1, then inv git.rebase-down --host gpu1 --name dev" in landed.stdout
    assert git(g.toplevel / "beta", "rev-parse", "kms") == before[str(g.toplevel / "beta")][2]
    assert not leftover_quarantines(g)
    again = g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev").stdout
    assert "landed nothing: every integration branch here already has gpu1:dev" in again


def prepare_extra_refs(there):
    """Branch dev is fine; beside it, a branch and an annotated tag the host would like to plant here."""
    there.commit_on_dev("alpha", "ok.txt")
    return there.run("alpha", "git checkout -q -b evil && echo evil > evil.txt && git add evil.txt && "
                              "git commit -q -m evil && git tag -a -m t planted && git checkout -q dev && "
                              "git rev-parse evil")


def prepare_corrupt_commit(there):
    """dev at a commit git's fsck refuses (an author without its closing '>'), sent by the real upload-pack."""
    there.run("alpha", "c=$(printf 'tree %s\\nparent %s\\nauthor A <a@example 1 +0000\\n"
                       "committer A <a@example> 1 +0000\\n\\nbad\\n' $(git rev-parse main^{tree}) "
                       "$(git rev-parse main) | git hash-object -t commit --literally -w --stdin) && "
                       "git update-ref refs/heads/dev $c")


def prepare_oversized_pack(there):
    there.run("alpha", "git checkout -q dev && head -c 3000000 /dev/urandom > big.bin && git add big.bin && "
                       "git commit -q -m big")
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop" / "config.toml"
    config.write_text(config.read_text() + "host_fetch_max_mib = 1\n")


def prepare_other_ref_name(there):
    there.commit_on_dev("alpha", "ok.txt")
    there.run("beta", "git branch -q -m dev dev-elsewhere")


def prepare_attribute_driver(there):
    """dev adds an attribute line that routes files through a filter this toplevel's config defines."""
    git(there.g.toplevel / "alpha", "config", "filter.x.clean", "cat")
    there.run("alpha", "git checkout -q dev && echo '*.txt filter=x' > .gitattributes && git add .gitattributes && "
                       "git commit -q -m attributes")


def prepare_untracked_here(there):
    """dev adds a file that is an untracked file in this toplevel's checkout (the merge would overwrite it)."""
    there.commit_on_dev("alpha", "remote.txt")
    (there.g.toplevel / "alpha" / "remote.txt").write_text("mine, not committed\n")


@pytest.mark.parametrize("prepare, code, says", [
    (prepare_corrupt_commit, 1, "fetching gpu1:dev/alpha from host gpu1 failed"),
    (prepare_attribute_driver, 3, "routes files through filter=x"),
    (prepare_untracked_here, 3, "untracked remote.txt would be overwritten by the merge"),
    (prepare_oversized_pack, 1, "a pack larger than 1 MiB"),
    (prepare_other_ref_name, 3, "there is no branch dev in gpu1:"),
    (lambda there: there.say_worktree(dirty=True), 3, "gpu1:dev/alpha: uncommitted changes"),
    (lambda there: there.run("", "git commit -q --allow-empty -m other && git rev-parse HEAD"), 3,
     "inv host.update --name gpu1 first"),
])
def test_merge_up_host_refuses_a_bad_branch_there_and_changes_nothing_here(mirror_host, prepare, code, says):
    g, there = mirror_host.g, mirror_host
    prepare(there)
    before = stores_here(g)
    refused = g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev", check=False)
    assert refused.returncode == code and says in refused.stderr, refused
    assert stores_here(g) == before and not leftover_quarantines(g)


def test_merge_up_host_takes_only_branch_dev_and_refuses_what_is_no_fast_forward_unless_no_ff(mirror_host):
    g, there = mirror_host.g, mirror_host
    evil = prepare_extra_refs(there)
    tip = there.run("alpha", "git rev-parse dev")
    g.push_upstream_commit("alpha", "upstream.txt", "moved here\n")
    before = stores_here(g)
    refused = g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev", check=False)
    assert refused.returncode == 3 and "not a fast-forward" in refused.stderr, refused
    assert "inv git.rebase-down --host gpu1 --name dev" in refused.stderr
    assert stores_here(g) == before
    g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev", "--no-ff")
    assert git(g.toplevel / "alpha", "rev-parse", "main^2") == tip                  # a merge commit of the tip
    assert git(g.toplevel / "alpha", "log", "-1", "--format=%s", "main") == "Merge branch 'dev' of host gpu1"
    assert subprocess.run(["git", "cat-file", "-e", evil], cwd=g.toplevel / "alpha").returncode != 0
    assert "planted" not in git(g.toplevel / "alpha", "tag") and "evil" not in git(g.toplevel / "alpha", "branch")


FORCED = """#!/bin/sh
# a host that names one commit as branch dev of alpha, then moves it before its git sends it
case "$SSH_ORIGINAL_COMMAND" in
  *git-upload-pack*) if [ ! -e "{mark}" ]; then : > "{mark}"; git -C "{alpha}" update-ref refs/heads/dev {other}; fi ;;
esac
exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
"""


def test_merge_up_host_refuses_a_commit_other_than_the_one_the_host_named(initialized, remote_base):
    g = initialized
    force = remote_base / "force.sh"
    force.write_text("#!/bin/sh\nexec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"\n")
    force.chmod(0o755)
    server = start_sshd(f"ForceCommand {force}\n")
    try:
        config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"
        config.mkdir(parents=True, exist_ok=True)
        (config / "config.toml").write_text(f'ssh_config = "{server.config}"\nhost_timeout = 20\n')
        there = MirrorHost(g, server, remote_base)
        there.commit_on_dev("alpha", "named.txt")
        other = there.commit_on_dev("alpha", "sent.txt")
        named = there.run("alpha", "git reset -q --hard HEAD~1 && git rev-parse dev")
        force.write_text(FORCED.replace("{mark}", str(remote_base / "moved")).replace(
            "{alpha}", str(there.top / "alpha")).replace("{other}", other))
        before = stores_here(g)
        refused = g.inv(g.toplevel, "git.merge-up", "--host", "gpu1", "--name", "dev", check=False)
        assert refused.returncode == 3, refused
        assert f"the host named {named} as branch dev, but its git sent {other}" in refused.stderr, refused
        assert stores_here(g) == before and not leftover_quarantines(g)
    finally:
        close_masters(None, server)
        server.stop()
        shutil.rmtree(server.base, ignore_errors=True)


def test_host_list_names_a_hosts_pending_requests_and_counts_the_rest():
    from chtop_tasks.hosts.fleet import pending_words

    items = [{"spec": f"h{i}.example:8443", "worktree": "dev" if i % 2 else None} for i in range(7)]
    assert pending_words([]) == "pending: none"
    assert pending_words(items) == ("pending: 7 (h0.example:8443 from (group), h1.example:8443 from dev, "
                                    "h2.example:8443 from (group), h3.example:8443 from dev, "
                                    "h4.example:8443 from (group), 2 more)")


def test_a_tip_taken_from_a_host_then_rewritten_there_is_kept_unless_it_landed(initialized, tmp_path):
    from chtop_tasks.hosts import merge
    from chtop_tasks.workspace.layout import find_workspace

    g = initialized
    top = find_workspace(g.toplevel)
    alpha = next(c for c in top.checkouts() if c.name == "alpha")
    here = g.toplevel / "alpha"
    scratch = tmp_path / "scratch"                      # the host's branch dev, rewritten twice
    git(tmp_path, "clone", "-q", str(here), str(scratch))
    first = g.commit(scratch, "a.txt", "a\n", "first")
    git(scratch, "reset", "-q", "--hard", "HEAD~1")
    second = g.commit(scratch, "b.txt", "b\n", "second")
    git(scratch, "reset", "-q", "--hard", "HEAD~1")
    third = g.commit(scratch, "c.txt", "c\n", "third")
    host = records.Host("gpu1", "gpu1", "ch/top", "python3")

    def take(tip):
        base = tmp_path / f"q-{tip[:8]}"
        base.mkdir()
        repo = merge.make_quarantine(base, alpha)
        git(scratch, "push", "-q", str(repo), f"{tip}:{merge.QUARANTINE_REF}")
        return merge.take_in(top, host, "dev", merge.Incoming(alpha, "gpu1:dev/alpha", tip, repo, tip))

    assert take(first) is None
    assert take(second) == f"refs/chtop/host-kept/gpu1/dev/{first}"     # rewritten there: the old tip stays here
    assert git(here, "rev-parse", "refs/chtop/hosts/gpu1/dev") == second
    assert git(here, "rev-parse", f"refs/chtop/host-kept/gpu1/dev/{first}") == first
    git(here, "merge", "-q", "--ff-only", second)       # landed here: nothing of it to keep
    assert take(third) is None
    assert git(here, "for-each-ref", "refs/chtop/host-kept/").count("refs/chtop/host-kept/") == 1
