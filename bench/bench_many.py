#!/usr/bin/env python3
"""Many agents on one box: N sandboxes of one group (one per worktree), as root.

    python bench/bench_many.py [--n 50] [--seconds 5]

Builds a throwaway root-owned workspace with N worktrees, then launches
`inv sbox.run` in each, one after another, each running the benchmark
client (bench/egress_client.py loop) that says READY and waits.  Prints:

  * launch time (Popen to READY) of the first and the last few, and last/first;
  * host memory per idle sandbox: the drop in MemAvailable over N, with and
    without the agents' own processes (their PSS), and the PSS of what chtop
    and podman keep per sandbox (the waiting `inv`, podman, conmon, the init,
    the hand-off holder);
  * then all N at once run CONNECT + echo + close loops through the one proxy
    for S seconds: new tunnels per second in aggregate, and errors;
  * then each goes on with a request every HEAL_INTERVAL (egress_client.py), the proxy's daemon is killed
    (kill -9) and its supervisor starts it again: the time from the kill to
    each sandbox's first good request begun after it (the last one: target
    <= 10 s), and the requests that failed meanwhile (those in flight).

Rootful podman's storage goes to a temp dir (vfs).  Not run by the tests; the
machine is shared, so expect noise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from bench_proxy import servers_main  # noqa: E402
from bench_sandbox import scratch_base, stop_proxies  # noqa: E402

PER_SANDBOX = ("podman", "conmon", "catatonit")


def kept_as(comm: str, cmd: str) -> str | None:
    """What a new process is per sandbox (None: someone else's, on this shared machine)."""
    if comm == "runuser":
        return "runuser (the bench's harness)"
    if comm.startswith("python") and "invoke" in cmd:
        return "inv (chtop's launcher)"
    if comm in ("sh", "bash") and "chtop-sbox" in cmd:
        return "bash (chtop's waiter)"
    if comm == "chtop-handoff":
        return "chtop-handoff (hand-off holder)"
    return next((k for k in PER_SANDBOX if comm.startswith(k)), None)


def build(base: Path, n: int):
    import conftest

    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.toplevel import init_toplevel
    from chtop_tasks.workspace.worktrees import create_worktree

    home = base / "home"
    home.mkdir()
    conftest.write_gitconfig(home / ".gitconfig")
    env = conftest.hermetic_env(home)
    for key in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"):
        if env.get(key):
            Path(env[key]).mkdir(parents=True, exist_ok=True, mode=0o700)
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        template = base / "template"
        template.mkdir()
        conftest.make_sub_remote(template, "alpha", "main")
        conftest.make_sub_remote(template, "beta", "kms")
        group = conftest.build_group(base, template)
        init_toplevel(find_workspace(group.toplevel))
        for i in range(n):
            create_worktree(find_workspace(group.toplevel), f"w{i:02d}")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return group, env


def build_rootless(base: Path, n: int):
    """The same, owned by the unprivileged test user (built as the tests build it): dev + w01.."""
    import conftest
    from bench_sandbox import build as build_user_group

    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.worktrees import create_worktree

    group = build_user_group(base)                  # toplevel + dev, owned by the test user
    names = [f"w{i:02d}" for i in range(1, n)]
    home = base / "root-home"
    with conftest.hermetic_os_env(home):
        with open(home / ".gitconfig", "a") as fh:
            fh.write("[safe]\n\tdirectory = *\n")            # root adds worktrees to the user's repos
        for name in names:
            create_worktree(find_workspace(group.toplevel), name)
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run(["chown", "-R", f"{group.user.pw_uid}:{group.user.pw_gid}", str(group.grouping)], check=True)
    return group, [group.dev] + [group.grouping / name for name in names]


def storage_env(base: Path) -> dict[str, str]:
    store = base / "podman"
    store.mkdir()
    (store / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{store}/graph"\nrunroot = "{store}/run"\n')
    (store / "containers.conf").write_text(f'[engine]\ntmp_dir = "{store}/tmp"\n')
    return {"CONTAINERS_STORAGE_CONF": str(store / "storage.conf"),
            "CONTAINERS_CONF": str(store / "containers.conf")}


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def processes() -> list[tuple[int, str, str, int]]:
    """(pid, comm, cmdline, PSS bytes: shared pages split among their users) of every process."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            comm = (d / "comm").read_text().strip()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            rss = next(int(ln.split()[1]) * 1024 for ln in (d / "smaps_rollup").read_text().splitlines()
                       if ln.startswith("Pss:"))
        except (OSError, StopIteration, ValueError):
            continue
        out.append((int(d.name), comm, cmd, rss))
    return out


def tagged_line(p: subprocess.Popen, tag: str) -> dict:
    """The JSON after ``tag`` on the next line of ``p``'s output that starts with it (the client
    gives up by itself); a failure record when its output ends first."""
    for line in iter(p.stdout.readline, ""):
        if line.startswith(tag):
            return json.loads(line[len(tag):].strip() or "{}")
    p.wait()
    return {"opened": 0, "errors": 1, "failed": f"no {tag.strip()} line: {p.stderr.read()[-300:]}"}


def kill_daemon(base: Path) -> float:
    """kill -9 the group's proxy daemon (its supervisor starts it again); the time of the kill."""
    pid_file = next(base.glob("**/.chtop/net/proxy.pid"))
    pid = int(pid_file.read_text().split()[0])
    at = time.time()
    os.kill(pid, 9)
    return at


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rootless", action="store_true", help="run the sandboxes rootless as the test user")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (rootful podman, or --rootless: as the unprivileged test user)")
    q = mp.Queue()
    srv = mp.Process(target=servers_main, args=(q,), daemon=True)
    srv.start()
    echo = q.get(timeout=10)[0]
    base = scratch_base("chtop-many-")                 # the test user walks into it (rootless)
    procs: list[subprocess.Popen] = []
    try:
        t0 = time.perf_counter()
        if args.rootless:
            ugroup, trees = build_rootless(base, args.n)
            toplevel = ugroup.toplevel
            run_env = dict(ugroup.env)
            python = ["runuser", "-u", ugroup.user.pw_name, "--", "env", "-i",
                      *[f"{k}={v}" for k, v in run_env.items()], str(ugroup.venv / "bin" / "python")]
            run_env = None
        else:
            group, env = build(base, args.n)
            toplevel = group.toplevel
            trees = [group.path(f"w{i:02d}") for i in range(args.n)]
            run_env = {**os.environ, **env, **storage_env(base), "NO_COLOR": "1"}
            run_env["CHTOP_PROXY_PORT"] = str(12000 + os.getpid() % 20000)
            python = [sys.executable]
        print(f"built {args.n} worktrees in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        with open(toplevel / "sandbox" / "net-allow.txt", "a") as fh:
            fh.write(f"127.0.0.1:{echo} private   # bench: the loopback echo server\n")
        client_dir = toplevel / "bench-client"         # read-only inside every sandbox
        client_dir.mkdir(mode=0o755)
        for name in ("bench_proxy.py", "egress_client.py"):
            shutil.copy(ROOT / "bench" / name, client_dir / name)
            (client_dir / name).chmod(0o644)
        go, killed = client_dir / "GO", client_dir / "KILLED"
        warm = subprocess.run([*python, "-m", "invoke", "sbox.run", "--", "true"], cwd=trees[0],
                              env=run_env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if warm.returncode:
            raise SystemExit(f"the first sandbox failed:\n{warm.stderr[-2000:]}")
        time.sleep(1)
        mem0 = mem_available()
        before = {p[0] for p in processes()}
        launch = []
        for i in range(args.n):
            start = time.perf_counter()
            p = subprocess.Popen([*python, "-m", "invoke", "sbox.run", "--", "python3",
                                  str(client_dir / "egress_client.py"), "loop", "127.0.0.1:3128", str(echo),
                                  "--seconds", str(args.seconds), "--go", str(go), "--heal", str(killed)],
                                 cwd=trees[i], env=run_env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
            procs.append(p)
            line = p.stdout.readline()
            if line.strip() != "READY":
                raise SystemExit(f"sandbox {i} did not start: {line!r}\n{p.stderr.read()[-2000:]}")
            launch.append(time.perf_counter() - start)
        time.sleep(3)
        mem1 = mem_available()
        new = [p for p in processes() if p[0] not in before]
        def is_agent(comm, cmd):
            return comm == "python3" and cmd.startswith("python3 ") and "egress_client.py loop" in cmd

        agents = sum(rss for _, comm, cmd, rss in new if is_agent(comm, cmd))
        kept: dict[str, int] = {}
        for _, comm, cmd, rss in new:
            if is_agent(comm, cmd):
                continue
            key = kept_as(comm, cmd)
            if key:
                kept[key] = kept.get(key, 0) + rss
        go.write_text("go\n")
        results = [tagged_line(p, "RESULT ") for p in procs]
        load_loops = os.getloadavg()[0]
        for p in procs:
            tagged_line(p, "HEALING")
        time.sleep(1)                        # every sandbox is in its request loop
        kill_at = kill_daemon(base)
        killed.write_text(f"{kill_at!r}\n")
        healed = [tagged_line(p, "HEALED ") for p in procs]
        load_heal = os.getloadavg()[0]
        for p in procs:
            p.communicate(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        stop_proxies(base)
        srv.terminate()
        if args.rootless:
            from sandbox_helpers import end_pause_process

            end_pause_process(base / "w" / "run")
        shutil.rmtree(base, ignore_errors=True)
    n = args.n
    mib = 2**20
    first = statistics.median(launch[:3])
    last = statistics.median(launch[-3:])
    mode = "rootless, as the test user" if args.rootless else "as root"
    print(f"\n{n} sandboxes of one group, {mode} ({os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})")
    print(f"  launch to READY  first 3 median {first:.3f} s, last 3 median {last:.3f} s, ratio {last / first:.2f} "
          f"(target <= 2); all: min {min(launch):.3f} max {max(launch):.3f} median {statistics.median(launch):.3f}")
    drop = (mem0 - mem1) / n
    print(f"  idle memory      MemAvailable drop {drop / mib:.1f} MiB per sandbox; without the agents' own "
          f"processes ({agents / n / mib:.1f} MiB PSS each) {(drop - agents / n) / mib:.1f} MiB (target <= 30)")
    ours = sum(v for k, v in kept.items() if "harness" not in k)
    print(f"  kept per sandbox by chtop and podman (PSS) {ours / n / mib:.1f} MiB (target <= 30): " +
          ", ".join(f"{k} {v / n / mib:.1f} MiB" for k, v in sorted(kept.items())))
    opened = sum(r["opened"] for r in results)
    errors = sum(r["errors"] for r in results)
    print(f"  CONNECT loops    {opened} tunnels in {args.seconds:.0f} s from {n} sandboxes at once: "
          f"{opened / args.seconds:.0f} new tunnels/s aggregate (target >= 2000), errors {errors}")
    print(f"    (load {load_loops:.1f} right after the loops)")
    failed = [r for r in results + healed if "failed" in r]
    if failed:
        print(f"  {len(failed)} sandboxes gave no result, e.g. {failed[0]['failed']!r}")
    back = sorted(h["healed_at"] - h["kill_at"] for h in healed if h.get("healed_at"))
    if back:
        print(f"  kill -9 of the daemon: {len(back)} of {n} sandboxes back, the last after {back[-1]:.2f} s "
              f"(target <= 10), median {statistics.median(back):.2f} s, first {back[0]:.2f} s; "
              f"failed requests meanwhile {sum(h.get('failures', 0) for h in healed)} "
              f"(load {load_heal:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
