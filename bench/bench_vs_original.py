"""chtop against the original `ch_top` scripts, on the real repos, each daily command interleaved.

Builds two grouping dirs under a temp dir, each with the same three repos (pipmake, ksgpu, pirate)
cloned from local bare remotes made from the bundles in the real-repos dir (found as the tests find it,
tests/real_repos.py: `$CHTOP_REAL_REPOS`, else `<this repo>/../shared/real-repos`):

  - one with the original scripts: a clone of `ch_top.bundle` as its toplevel `top` (its scripts run
    from that clone; `init-toplevel --no-venv`, `init-worktree NAME --no-venv`); its `github:` URLs
    are pointed at the bare remotes with `url.<remote>.insteadOf` in the hermetic git config, and
    pirate's unreachable submodule is skipped with `submodule.asdf-cxx.update = none`;
  - one with chtop: this checkout's files as the container repo (as the tests'
    `make_container_remote` builds it), the manifest naming the same bare remotes, every repo
    `install = "none"`, pirate `submodules = false`, and `--no-venv`.

Then, per round, each command as a user types it (`./git-status` in the worktree, `inv git.status`),
alternating which tool goes first: init (a second run), create, status (clean, then with a change in
every repo), diff, rebase-down `--dry-run` and real (after the same upstream commit in every repo),
merge-up `--dry-run` and real (after the same feature commit in every repo), delete; plus the floors
`python3 -c pass` and `inv --version`.  Prints min/median/max per tool and the ratio of the medians,
and the median CPU time of each (user + system, with every process the command waited for).
Both tools' Python is this interpreter's (its bin dir first on PATH: no pyenv shim in front of either),
and the chtop toplevel (this checkout's files) is first on PYTHONPATH, so the `inv` and `chtop` scripts
run this code, not the checkout an installed package points at.

With `--against REV` (a revision of this checkout), a third grouping dir runs chtop as of REV (its
files, from `git archive`), in the same rounds, interleaved with the other two: a change to chtop is
then measured against the code before it on the same box in the same minutes, where two runs one
after the other differ by more than most changes do.  Its rows print chtop's median and CPU over REV's.

With `--profile`, also breaks `inv git.status` in a chtop worktree down: `-X importtime` summed by
top-level package, and a cProfile of the rest (the git processes it waits for).

Hermetic: its own HOME and GIT_CONFIG_GLOBAL, git allowed only the file protocol (no network), and
the temp dir removed at the end.  Bytecode as on a user's machine: PYTHONDONTWRITEBYTECODE (set on
this build machine) is taken out, else every module of both tools is compiled from source on every
run.

The disk counts as much as the code for create and delete, which write and remove about a thousand
files: on these VMs' disks making a file costs several times more in one new directory than in the
next, and more at one moment than the next (the block group its files land in, the allocator's
state).  The run starts by timing the writing of `PROBE_FILES` small files where the groups are, and
prints it beside the load.  `--dir DIR` builds the groups under DIR (default: the system's temp dir):
`--dir /dev/shm` takes the disk out, and leaves what the tools themselves cost.

    python bench/bench_vs_original.py [--rounds N] [--profile] [--steps rebase-down,merge-up] [--against REV] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import conftest  # noqa: E402
from bench_workspace import timed  # noqa: E402
from real_repos import real_repos_dir  # noqa: E402

REPOS = {"pipmake": "main", "ksgpu": "kms", "pirate": "kms"}
ORIGINAL_URL = "github:kmsmith137/{}"   # as the ch_top bundle's git_repositories.toml names them
BIN = str(Path(sys.executable).parent)
INV = [str(Path(BIN) / "inv")] if (Path(BIN) / "inv").exists() else [sys.executable, "-m", "invoke"]
PY_INV = INV[:1] if INV[0] != sys.executable else ["-m", "invoke"]   # `inv` as python's argument
CHTOP = [str(Path(BIN) / "chtop")] if (Path(BIN) / "chtop").exists() else [*INV]

# step -> (original's argv, chtop's argv, where it runs: "top" or "wt")
STEPS = {
    "floor: python3 -c pass / inv --version": ([str(Path(BIN) / "python3"), "-c", "pass"], [*INV, "--version"], "top"),
    "init (second run)": (["./init-toplevel", "--no-venv"], [*INV, "toplevel.init", "--no-venv"], "top"),
    "create --no-venv": (["./init-worktree", "{wt}", "--no-venv"],
                         [*INV, "worktree.create", "--name", "{wt}", "--no-venv"], "top"),
    "status, clean": (["./git-status"], [*INV, "git.status"], "wt"),
    "status, clean (`chtop git.status`)": (["./git-status"], [*CHTOP, "git.status"], "wt"),
    "status, a change per repo": (["./git-status"], [*INV, "git.status"], "wt"),
    "diff, a change per repo": (["./git-diff"], [*INV, "git.diff"], "wt"),
    "rebase-down --dry-run": (["./git-rebase-down", "--dry-run"], [*INV, "git.rebase-down", "--dry-run"], "wt"),
    "rebase-down": (["./git-rebase-down"], [*INV, "git.rebase-down"], "wt"),
    "merge-up --dry-run": (["./git-merge-up", "--dry-run"], [*INV, "git.merge-up", "--dry-run"], "wt"),
    "merge-up": (["./git-merge-up"], [*INV, "git.merge-up"], "wt"),
    "delete": (["./delete-worktree", "{wt}"], [*INV, "worktree.delete", "--name", "{wt}"], "top"),
}


def real_repos() -> Path:
    """The bundles' dir, as the tests find it (tests/real_repos.py), with the ``ch_top`` bundle in it too."""
    found = real_repos_dir()
    if found is None or not (found / "ch_top.bundle").is_file():
        raise SystemExit(f"no pipmake/ksgpu/pirate/ch_top bundles in {found or ROOT.parent / 'shared' / 'real-repos'}: "
                         "set CHTOP_REAL_REPOS to the real-repos dir")
    return found


def git(cwd: Path, *args: str) -> str:
    return conftest.git(cwd, *args)


def hermetic(base: Path, remotes: Path) -> None:
    """This process's environment (and so every command's) made hermetic around ``base/home``."""
    home = base / "home"
    (home / ".run").mkdir(parents=True, mode=0o700)
    gitconfig = home / ".gitconfig"
    conftest.write_gitconfig(gitconfig)
    with gitconfig.open("a") as out:
        for name in REPOS:
            out.write(f'[url "{remotes}/{name}.git"]\n\tinsteadOf = {ORIGINAL_URL.format(name)}\n')
        out.write('[submodule "asdf-cxx"]\n\tupdate = none\n')
    for key in ("VIRTUAL_ENV", "CLAUDE_ENV_FILE", "PYTHONSAFEPATH", "PYTHONPATH", "GIT_DIR", "GIT_WORK_TREE",
                "CONDA_PREFIX", "PYTHONDONTWRITEBYTECODE"):
        os.environ.pop(key, None)
    os.environ.update(conftest.hermetic_env(home))
    os.environ.update(GIT_ALLOW_PROTOCOL="file", PATH=BIN + os.pathsep + os.environ["PATH"])


def make_remotes(base: Path, bundles: Path) -> Path:
    remotes = base / "remotes"
    remotes.mkdir()
    for name in REPOS:
        git(remotes, "clone", "-q", "--bare", str(bundles / f"{name}.bundle"), f"{name}.git")
    return remotes


def chtop_manifest(remotes: Path) -> str:
    return "".join(f'[[repo]]\nname = "{name}"\nurl = "file://{remotes}/{name}.git"\nbranch = "{branch}"\n'
                   f'install = "none"\n' + ('submodules = false\n' if name == "pirate" else "") + "\n"
                   for name, branch in REPOS.items())


def build_original(base: Path, bundles: Path) -> Path:
    grouping = base / "original"
    grouping.mkdir()
    top = grouping / "top"
    git(grouping, "clone", "-q", str(bundles / "ch_top.bundle"), str(top))
    must(["./init-toplevel", "--no-venv"], top)
    return top


def build_chtop(base: Path, remotes: Path) -> Path:
    """The chtop group; its toplevel (this checkout's files) first on PYTHONPATH, so the `inv` and `chtop`
    scripts' own start (before they load the checkout's tasks.py) runs this code too, not whatever
    checkout the installed package points at."""
    conftest.make_container_remote(remotes, chtop_manifest(remotes))
    return chtop_group(base / "chtop", remotes / "chtop.git")


def build_chtop_at(base: Path, remotes: Path, rev: str) -> Path:
    """A chtop group whose container repo holds this checkout's files as of ``rev``."""
    work = remotes / "against-seed"
    work.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], capture_output=True)
    if archive.returncode:
        raise SystemExit(f"--against {rev}: git archive failed: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive.stdout, check=True)
    bare = conftest.bare_remote_of(work, chtop_manifest(remotes), remotes / "against.git", f"chtop as of {rev}")
    return chtop_group(base / "against", bare)


def chtop_group(grouping: Path, remote: Path) -> Path:
    grouping.mkdir()
    top = grouping / "top"
    git(grouping, "clone", "-q", f"file://{remote}", str(top))
    os.environ["PYTHONPATH"] = str(top)
    write_entry_scripts(grouping / "bin")
    must([*own_entry(top, INV), "toplevel.init", "--no-venv"], top)
    return top


# pip's console scripts of each layout of chtop (its entry points moved into cli/): ``inv`` and
# ``chtop`` as pip writes them, trying today's entry point first, then the one before it
ENTRY_SCRIPT = """#!{python}
import sys
try:
    from chtop_tasks.cli.{new} import main
except ImportError:
    from chtop_tasks.{old} import main
sys.exit(main())
"""


def write_entry_scripts(bin_dir: Path) -> None:
    """``bin_dir/inv`` and ``bin_dir/chtop``: what pip installs, for whichever chtop is first on
    PYTHONPATH (this checkout's, or the ``--against`` revision's, whose entry points may differ)."""
    bin_dir.mkdir()
    for name, new, old in (("inv", "inv", "inv"), ("chtop", "chtop", "cli")):
        script = bin_dir / name
        script.write_text(ENTRY_SCRIPT.format(python=sys.executable, new=new, old=old))
        script.chmod(0o755)


def own_entry(top: Path, argv: list[str]) -> list[str]:
    """``argv`` with its ``inv`` or ``chtop`` script replaced by the one beside ``top``'s group."""
    if argv[:1] in (INV[:1], CHTOP[:1]) and argv[0] != sys.executable:
        return [str(top.parent / "bin" / Path(argv[0]).name), *argv[1:]]
    return argv


def must(argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode:
        raise SystemExit(f"`{' '.join(argv)}` in {cwd} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")


def checkouts(workspace: Path) -> list[Path]:
    return [workspace, *(workspace / name for name in REPOS)]


def change_every_repo(workspace: Path) -> None:
    for checkout in checkouts(workspace):
        first = git(checkout, "ls-files").splitlines()[0]
        with (checkout / first).open("a") as out:
            out.write("a change\n")


def revert_every_repo(workspace: Path) -> None:
    for checkout in checkouts(workspace):
        git(checkout, "checkout", "--", ".")


def commit_every_repo(workspace: Path, filename: str) -> None:
    for checkout in checkouts(workspace):
        (checkout / filename).write_text(f"{filename}\n")
        git(checkout, "add", filename)
        git(checkout, "commit", "-q", "-m", f"bench: {filename}")


def setup_for(step: str, top: Path, wt: Path, rnd: int) -> None:
    """The same state for both tools before ``step``."""
    if step == "status, a change per repo":
        change_every_repo(wt)
    elif step == "rebase-down --dry-run":
        revert_every_repo(wt)
        commit_every_repo(top, f"upstream-{rnd}.txt")
    elif step == "merge-up --dry-run":
        commit_every_repo(wt, f"feature-{rnd}.txt")


def check_landed(step: str, tool: str, top: Path, wt: Path) -> None:
    """The real rebase-down and merge-up did their work in every repo (a timing of a no-op is no timing):
    the feature branch (no commits of its own) caught up with the upstream commit; the integration
    branch took the feature commit."""
    for main, feature in zip(checkouts(top), checkouts(wt), strict=True):
        integration, head = git(main, "rev-parse", "HEAD"), git(feature, "rev-parse", "HEAD")
        if head != integration:
            raise SystemExit(f"{tool}'s {step} left {feature} at {head}, its integration branch at {integration}")


# what the later steps need done (the worktree, the rebase a merge-up lands on, the delete that ends the
# round): run, untimed, when ``--steps`` leaves them out
NEEDED = ("create --no-venv", "rebase-down", "merge-up", "delete")


def chosen_steps(words: str | None) -> list[str]:
    """The steps whose names contain one of the comma-separated ``words`` (all without any)."""
    if not words:
        return list(STEPS)
    chosen = [step for step in STEPS if any(word.strip() == step for word in words.split(","))]
    chosen = chosen or [step for step in STEPS if any(word.strip() in step for word in words.split(","))]
    if not chosen:
        raise SystemExit(f"--steps {words!r} names none of: {', '.join(STEPS)}")
    return chosen


def run_round(tools: dict[str, Path], rnd: int, times: dict, timed_steps: list[str] | None = None) -> None:
    order = list(tools) if rnd % 2 == 0 else list(tools)[::-1]
    wt_name = f"w{rnd}"
    for step, (original, chtop, where) in STEPS.items():
        for tool in order:
            top = tools[tool]
            wt = top.parent / wt_name
            setup_for(step, top, wt, rnd)
            if timed_steps is not None and step not in timed_steps and step not in NEEDED:
                continue
            argv = [a.format(wt=wt_name) for a in (original if tool == "original" else chtop)]
            argv = argv if tool == "original" else own_entry(top, argv)
            cwd = top if where == "top" else wt
            os.environ["PYTHONPATH"] = str(tools["chtop" if tool == "original" else tool])
            before = children_cpu()
            took = timed(lambda argv=argv, cwd=cwd: must(argv, cwd))
            if timed_steps is None or step in timed_steps:
                times[step, tool].append(took)
                times[step, tool, "cpu"].append(children_cpu() - before)
            if step in ("rebase-down", "merge-up"):
                check_landed(step, tool, top, wt)


def children_cpu() -> float:
    """User + system CPU seconds of every finished child and its waited-for descendants (the git
    processes too): far less moved by other load on the box than wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ms(values: list[float]) -> str:
    return f"{min(values) * 1000:5.0f} / {statistics.median(values) * 1000:5.0f} / {max(values) * 1000:5.0f}"


def report(times: dict, rounds: int) -> None:
    print(f"\n{rounds} rounds; wall ms as min / median / max; ratio = chtop median / original median; "
          "then the CPU time (user + system, the command and every process it waited for), medians")
    steps = list(dict.fromkeys(key[0] for key in times))
    print_table(times, steps, "original")
    for tool in dict.fromkeys(key[1] for key in times if len(key) == 2 and key[1] not in ("original", "chtop")):
        print(f"\nchtop against {tool}, interleaved in the same rounds: median and CPU, this checkout's / {tool}'s")
        print_table(times, steps, tool)


def print_table(times: dict, steps: list[str], base: str) -> None:
    """Per step: ``base``'s and chtop's min / median / max, and chtop's median wall and CPU over ``base``'s."""
    print(f"{'command':40} {base:>19}  {'chtop':>19}  ratio   cpu: {base:>8}  chtop  ratio")
    for step in steps:
        ours, theirs = times[step, "chtop"], times[step, base]
        cpu_b, cpu_c = (statistics.median(times[step, tool, "cpu"]) for tool in (base, "chtop"))
        print(f"{step:40} {ms(theirs):>19}  {ms(ours):>19}  {statistics.median(ours) / statistics.median(theirs):.2f}x  "
              f"{cpu_b * 1000:13.0f} {cpu_c * 1000:6.0f}  {cpu_c / cpu_b:.2f}x")


# -- where the time of `inv git.status` goes -------------------------------------------------------

IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_bucket(module: str) -> str:
    if module.startswith("invoke.vendor.yaml"):
        return "invoke.vendor.yaml"
    if module.startswith(("importlib.metadata", "importlib_metadata")):
        return "importlib.metadata"
    return module.split(".")[0]


def import_costs(wt: Path, runs: int = 3) -> tuple[dict[str, float], list[tuple[str, float, int]], float]:
    """Over ``runs`` runs of `-X importtime`, medians (us) of: self time summed by top-level package, each
    outermost import's cumulative time (with how often it is imported in one run), and the total."""
    sums: dict[str, list[int]] = defaultdict(list)
    roots: dict[str, list[int]] = defaultdict(list)
    imported: dict[str, int] = defaultdict(int)
    for _ in range(runs):
        one_sums: dict[str, int] = defaultdict(int)
        one_roots: dict[str, list[int]] = defaultdict(list)
        proc = subprocess.run([sys.executable, "-X", "importtime", *PY_INV, "git.status"], cwd=wt,
                              capture_output=True, text=True)
        for line in proc.stderr.splitlines():
            found = IMPORT_LINE.match(line)
            if found:
                one_sums[import_bucket(found[4])] += int(found[1])
                if len(found[3]) == 1:
                    one_roots[found[4]].append(int(found[2]))
        sums["(all)"].append(sum(one_sums.values()))
        for name, us in one_sums.items():
            sums[name].append(us)
        for name, times in one_roots.items():
            roots[name].append(sum(times))
            imported[name] = max(imported[name], len(times))
    total = statistics.median(sums.pop("(all)"))
    packages = {name: statistics.median(values + [0] * (runs - len(values))) for name, values in sums.items()}
    outermost = [(name, statistics.median(values), imported[name]) for name, values in roots.items()]
    return packages, sorted(outermost, key=lambda root: -root[1]), total


def profile_rest(wt: Path, out: Path) -> list[tuple[str, float, int]]:
    """One cProfile of the task: where the main thread's time goes, cumulative."""
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), *PY_INV, "git.status"], cwd=wt,
                   capture_output=True, check=True)
    wanted = {("<frozen importlib._bootstrap>", "_find_and_load"): "imports",
              ("fanout.py", "fan_out"): "chtop fan_out (git in threads)",
              ("threading.py", "wait"): "threading wait",
              ("subprocess.py", "_execute_child"): "fork/exec (main thread)",
              ("subprocess.py", "communicate"): "wait on a process (main thread)",
              ("program.py", "run"): "invoke Program.run",
              ("faststart.py", "run"): "chtop's fast start (no invoke)",
              ("faststart.py", "light_tasks"): "the task table (the task modules, light)",
              ("faststart.py", "run_task"): "the task itself",
              ("loader.py", "load"): "invoke loads tasks.py",
              ("executor.py", "execute"): "invoke executes the task"}
    rows = []
    for (filename, line, func), (cc, _nc, _tt, ct, _callers) in pstats.Stats(str(out)).stats.items():
        label = wanted.get((Path(filename).name, func))
        if label:
            rows.append((f"{label} ({Path(filename).name}:{line})", ct, cc))
    return sorted(rows, key=lambda row: -row[1])


def git_processes(argv: list[str], cwd: Path, shim: Path) -> dict[str, int]:
    """The git processes one command starts, by subcommand, through a logging `git` first on PATH."""
    log = shim / "log"
    log.write_text("")
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True)
    counts: dict[str, int] = defaultdict(int)
    for line in log.read_text().splitlines():
        words = line.split()
        while words and words[0].startswith("-"):
            words = words[2:] if words[0] in ("-c", "-C") else words[1:]
        counts[words[0] if words else "?"] += 1
    return counts


def make_git_shim(base: Path) -> Path:
    shim = base / "shim"
    shim.mkdir()
    real = shutil.which("git")
    (shim / "git").write_text(f'#!/bin/sh\necho "$*" >> {shim}/log\nexec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    return shim


def profile(tools: dict[str, Path]) -> None:
    original, top = tools["original"], tools["chtop"]
    must(["./init-worktree", "prof", "--no-venv"], original)
    must([*INV, "worktree.create", "--name", "prof", "--no-venv"], top)
    wt = top.parent / "prof"
    walls = [timed(lambda: must([*INV, "git.status"], wt)) for _ in range(5)]
    print(f"\n`inv git.status` in a chtop worktree, 5 runs: median {statistics.median(walls) * 1000:.0f} ms")
    sums, roots, total = import_costs(wt)
    print(f"imports (-X importtime, medians of 3 runs): {total / 1000:.0f} ms in all; "
          f"self time summed by top-level package:")
    for name, us in sorted(sums.items(), key=lambda item: -item[1])[:14]:
        print(f"  {name:28} {us / 1000:6.1f} ms")
    print("the outermost imports, cumulative (xN: imported N times, its modules dropped in between):")
    for name, us, count in roots[:10]:
        print(f"  {name:34} {us / 1000:6.1f} ms" + (f"  x{count}" if count > 1 else ""))
    print("cProfile of one run (cumulative ms in the main thread; calls):")
    for label, seconds, calls in profile_rest(wt, top.parent / "status.prof"):
        print(f"  {label:58} {seconds * 1000:7.1f} ms  {calls}")
    shim = make_git_shim(top.parent.parent)
    for name, argv, cwd in (("./git-status", ["./git-status"], original.parent / "prof"),
                            ("inv git.status", [*INV, "git.status"], wt)):
        counts = git_processes(argv, cwd, shim)
        print(f"git processes of {name}: {sum(counts.values())} "
              f"({', '.join(f'{sub} {n}' for sub, n in sorted(counts.items(), key=lambda c: -c[1]))})")


PROBE_FILES = 700       # about what create writes into one repo's checkout (pirate has 284 files)


def file_writing_ms(where: Path) -> float:
    """The milliseconds writing ``PROBE_FILES`` files of 2 KiB takes in a new dir under ``where``
    (then removed): how fast this disk makes files there, which create and delete follow."""
    probe = Path(tempfile.mkdtemp(prefix="probe-", dir=where))
    try:
        return timed(lambda: [(probe / f"f{i}").write_bytes(b"x" * 2048) for i in range(PROBE_FILES)]) * 1000
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--profile", action="store_true", help="also break `inv git.status` down")
    parser.add_argument("--steps", help="time only these steps (comma-separated, exact names or parts of "
                                        "them: --steps rebase-down,merge-up); the ones later steps need "
                                        "still run, untimed")
    parser.add_argument("--against", metavar="REV", help="also time chtop as of REV (a revision of this "
                                                          "checkout), interleaved, and print this code's ratio to it")
    parser.add_argument("--dir", type=Path, help="build the groups in a temp dir under DIR (default: the system's "
                                                 "temp dir; /dev/shm takes the disk out)")
    args = parser.parse_args()
    timed_steps = chosen_steps(args.steps) if args.steps else None
    bundles = real_repos()
    base = Path(tempfile.mkdtemp(prefix="chtop-vs-original-", dir=args.dir.resolve() if args.dir else None))
    try:
        remotes = base / "remotes"
        hermetic(base, remotes)
        make_remotes(base, bundles)
        tools = {"original": build_original(base, bundles), "chtop": build_chtop(base, remotes)}
        if args.against:
            tools[f"chtop@{args.against}"] = build_chtop_at(base, remotes, args.against)
        print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
              f"on {os.cpu_count()} cores; {PROBE_FILES} files written in {file_writing_ms(base):.0f} ms "
              f"in {base.parent}", flush=True)
        times: dict = defaultdict(list)
        for rnd in range(args.rounds):
            run_round(tools, rnd, times, timed_steps)
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
        report(times, args.rounds)
        if args.profile:
            profile(tools)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
