"""The light task path (chtop_tasks/cli/faststart.py) does what invoke's program does, without importing invoke.

Each command runs twice in a real worktree, typed as a user types it (chtop's ``inv`` on PATH, and
the ``chtop`` console script): once as is, once with an invoke config variable set, which sends
every command line to invoke's program.  Both must give the same stdout, stderr and exit code;
``-X importtime`` shows which runs imported invoke, so a light path that silently handed every
command to invoke (or one that took on a command line it should not) fails too.  The task table
the light path builds must match invoke's collection, flag for flag, and for every task and many
flag forms its parse must be invoke's parser's, or it must leave the command line to invoke.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT
from test_inv_discovery import CHTOP_INV, console_script, plant, typed

# Any INVOKE_* variable is invoke config, which the fast start leaves to invoke; this one changes nothing.
INVOKE_PATH = {"INVOKE_TASKS_DEDUPE": "1"}

CHTOP = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
         "from chtop_tasks.cli.chtop import main; main()"]

# (argv, whether the fast start takes it on)
COMMANDS = [
    (["--list"], False),
    (["--help", "git.status"], False),
    (["git.status", "--help"], False),
    (["git.status"], True),
    (["git.status", "--", "--short"], True),
    (["git.diff", "--integration"], True),
    (["git.merge-up", "--dry-run"], True),
    (["git.status", "--bogus"], False),
    (["git.status", "-d"], False),
    (["git.status", "git.diff"], False),
    (["no-such.task"], False),
    (["worktree.delete"], True),                        # a task error: usage, exit 2
    (["worktree.delete", "--name", "nosuch"], True),    # a task error: no such worktree
    (["worktree.delete", "--name"], False),             # a missing value: invoke's parse error
    (["git.merge-up", "--expect=alpha=0"], True),
]


def imported_invoke(stderr: str) -> bool:
    return any(line.rstrip().endswith("| invoke") for line in stderr.splitlines())


def both_ways(run, argv: list[str]) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess, bool]:
    fast = run(argv, {})
    slow = run(argv, INVOKE_PATH)
    timed = run(argv, {"PYTHONPROFILEIMPORTTIME": "1"})
    assert imported_invoke(run(argv, {**INVOKE_PATH, "PYTHONPROFILEIMPORTTIME": "1"}).stderr)
    return fast, slow, not imported_invoke(timed.stderr)


def same(fast, slow, argv) -> None:
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr), (
        f"{argv}: fast start exited {fast.returncode}, invoke {slow.returncode}\n"
        f"--- fast stdout\n{fast.stdout}\n--- fast stderr\n{fast.stderr}\n"
        f"--- invoke stdout\n{slow.stdout}\n--- invoke stderr\n{slow.stderr}")


@pytest.mark.parametrize("state", ["clean", "dirty"])
def test_inv_fast_start_and_invokes_program_say_the_same(with_dev, tmp_path, state):
    """Through an ``inv`` on PATH as pip's console script runs it."""
    g = with_dev
    if state == "dirty":
        (g.path("dev", "alpha") / "new.txt").write_text("x\n")
    bin_dir = console_script(tmp_path / "bin", sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent

    def run(argv, env):
        return typed(bin_dir, g.path("dev", "alpha"), *argv, env=dict(os.environ, **env))

    for argv, fast_expected in COMMANDS:
        fast, slow, went_fast = both_ways(run, argv)
        same(fast, slow, argv)
        assert went_fast == fast_expected, f"{argv}: fast start {'taken' if went_fast else 'not taken'}"
    status = run(["git.status"], {})
    assert status.returncode == 0 and "alpha" in status.stdout, status
    assert ("new.txt" in status.stdout) == (state == "dirty"), status.stdout


def test_chtop_fast_start_and_invokes_program_say_the_same(with_dev):
    g = with_dev

    def run(argv, env):
        return subprocess.run([*CHTOP, str(g.toplevel), *argv], cwd=g.path("dev", "beta"), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=120, env=dict(os.environ, **env))

    for argv, fast_expected in [(["git.status"], True), (["git.status", "--bogus"], False),
                                (["worktree.delete"], True), (["--list"], False)]:
        fast, slow, went_fast = both_ways(run, argv)
        same(fast, slow, argv)
        assert went_fast == fast_expected, argv
    assert run(["git.status", "--bogus"], {}).returncode == 2      # chtop's usage exit, from invoke's path


def test_the_fast_start_never_loads_a_tasks_py_the_agent_planted(with_dev, tmp_path):
    g = with_dev
    dev = g.path("dev")
    markers = plant(dev, tmp_path)
    bin_dir = console_script(tmp_path / "bin", sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent
    for where in ("alpha", "alpha/docs", "alpha/fake"):
        proc = typed(bin_dir, dev / where, "git.status", env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
        assert proc.returncode == 0 and "beta" in proc.stdout, proc.stdout + proc.stderr
        assert not imported_invoke(proc.stderr), f"from {where}: the fast start was not taken"
    ran = [rel for rel, marker in markers.items() if marker.exists()]
    assert ran == [], f"the tasks.py planted in {ran} ran on the host"


TABLES = """
import json, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "light":
    from chtop_tasks.cli import faststart
    table = {name: None if (kinds := faststart.flag_kinds(light)) is None else
             sorted([param, kind is bool] for param, kind in kinds.values())
             for name, light in faststart.light_tasks().items()}
    table["(invoke imported)"] = "invoke" in sys.modules
else:
    from chtop_tasks import namespace
    table = {}
    for name in namespace.task_names:
        task = namespace[name]
        table[name] = sorted([arg.name, arg.kind is bool] for arg in task.get_arguments())
print(json.dumps(table))
"""


def test_the_fast_starts_table_is_invokes_collection():
    """Every task of invoke's collection, by the same name, with the same long flags; a task module
    that used invoke's own @task (so the fast start imports invoke for every task) fails here."""
    def table(kind):
        out = subprocess.run([sys.executable, "-c", TABLES, str(REPO_ROOT), kind], capture_output=True, text=True,
                             check=True, timeout=120).stdout
        return json.loads(out)

    light, full = table("light"), table("invoke")
    assert light.pop("(invoke imported)") is False, "a task module imports invoke"
    assert sorted(light) == sorted(full)
    fast = {name: flags for name, flags in light.items() if flags is not None}
    assert "git.status" in fast and "worktree.create" in fast and "git.merge-up" in fast
    for name, flags in fast.items():
        assert flags == full[name], f"{name}: the fast start's flags {flags}, invoke's {full[name]}"


# For every task, each flag form below, parsed by the light path (faststart.light_call) and by
# invoke's own Program on the real collection (its execute step records the call instead of
# running it), where the light path took the line on or the line is a plain form (``plain_form``, put in
# at @PLAIN_FORM@): no assertion reads invoke's parse of the rest.  Printed as JSON: [task, argv, the light
# path's call or None, invoke's calls or None].
PARSES = r"""
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
from chtop_tasks.cli import faststart

table = faststart.light_tasks()
params = {name: faststart.defaulted_parameters(light.body) for name, light in table.items()}
faststart.drop_light_modules()
from invoke import Program
from chtop_tasks import namespace

@PLAIN_FORM@


def forms(task):
    args = task.get_arguments()
    yield []
    yield ["--", "--short", "x y"]
    yield ["--bogus"]
    yield ["--bogus=1"]
    yield ["stray"]
    yield ["git.status"]
    yield ["-x"]
    yield ["--help"]
    yield ["-h"]
    every = []
    for arg in args:
        long = "--" + next(n for n in arg.names if len(n) > 1)
        shorts = [n for n in arg.names if len(n) == 1]
        yield ["--" + arg.name.replace("_", "-")] + ([] if arg.kind is bool else ["v"])     # naively dashed
        if arg.kind is bool:
            yield [long]
            yield [long + "=1"]
            yield ["--no-" + long[2:]]
            yield [long, long]
            every.append([long])
        else:
            good = "3" if arg.kind in (int, float) else "v"
            for value in (good, "x", "alpha=0", "٣", "²", "-v", "--", "git.status", " "):
                yield [long, value]
                yield [long + "=" + value]
            yield [long]
            yield [long + "="]
            yield [long, good, long, good]
            yield [long, good, "stray"]
            every.append([long, good])
        for short in shorts:
            yield ["-" + short] + ([] if arg.kind is bool else ["v"])
    yield [word for flag in every for word in flag]
    yield [word for flag in reversed(every) for word in flag] + ["--", "rest"]


class Recording(Program):
    def execute(self):
        self.calls = [[ctx.name, ctx.as_kwargs] for ctx in self.tasks]


def invokes(argv):
    program = Recording(namespace=namespace, name="Invoke", binary="inv")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            program.run(["inv", *argv], exit=False)
        except (Exception, SystemExit) as exc:          # a value invoke cannot cast: its traceback
            return [["raised", type(exc).__name__]]
    return getattr(program, "calls", None)


rows = []
for name in namespace.task_names:
    for form in forms(namespace[name]):
        argv = [name, *form]
        call = faststart.light_call(table, argv)
        light = None if call is None else [[name, dict(params[name], **call[1])]]
        # invoke's parse is read where the light path took the line on, or where it must (a plain form)
        rows.append([name, argv, light, invokes(argv) if light is not None or plain_form(argv) else None])
print(json.dumps(rows))
"""


def test_the_light_paths_parse_is_invokes_or_it_leaves_the_command_line_to_invoke():
    """For every task and flag forms (``--flag value``, ``--flag=value``, short flags, booleans,
    ``--no-flag``, unknown flags, stray words, repeats, odd values, ``--``): whatever the light path
    takes on, invoke's parser parses to the same call (the task, every argument's value); and it
    takes on the plain forms of each task it can run, so it cannot pass by declining everything."""
    script = PARSES.replace("@PLAIN_FORM@", inspect.getsource(plain_form))
    out = subprocess.run([sys.executable, "-c", script, str(REPO_ROOT)], capture_output=True, text=True,
                         timeout=300, env=hermetic_invoke_env())
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    taken = [(argv, light, invoked) for _, argv, light, invoked in rows if light is not None]
    wrong = [f"{argv}: light path {light}, invoke {invoked}" for argv, light, invoked in taken if light != invoked]
    assert not wrong, "\n".join(wrong)
    plain = [argv for _, argv, _, invoked in rows if invoked is not None and plain_form(argv)]
    declined = [argv for _, argv, light, _ in rows if light is None and argv in plain
                and argv[0] in LIGHT_TASKS_EXPECTED]
    assert not declined, f"plain command lines left to invoke: {declined}"
    assert {argv[0] for argv, _, _ in taken} >= LIGHT_TASKS_EXPECTED


# tasks the light path must run (a daily command each; every other plain task is checked as well
# where it takes it on)
LIGHT_TASKS_EXPECTED = {"git.status", "git.diff", "git.rebase-down", "git.merge-up", "worktree.create",
                        "worktree.delete"}


def plain_form(argv: list[str]) -> bool:
    """A task and only long flags, each once, with a plain value (what the light path must take on)."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    flags = [w for w in words[1:] if w.startswith("--")]
    values = [w for w in words[1:] if not w.startswith("-")]
    return (len({f.partition("=")[0] for f in flags}) == len(flags)
            and not any(f.startswith("--no-") or f.endswith("=") or f in ("--bogus", "--bogus=1", "--help")
                        for f in flags)
            and all(v in ("v", "3") for v in values + [f.partition("=")[2] for f in flags if "=" in f])
            and not any(w.startswith("-") and not w.startswith("--") for w in words[1:]))


def hermetic_invoke_env() -> dict:
    """No invoke config of the user's or the machine's: both parsers see the same flags."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}


def test_a_task_that_uses_its_context_gets_invokes_on_the_fast_start():
    """No chtop task uses ``c`` today; one that does gets invoke's Context, made once, on first use."""
    from invoke import Context

    from chtop_tasks.cli.faststart import LazyContext

    context = LazyContext()
    assert "_context" not in context.__dict__
    assert context.config is context.config and isinstance(context.__dict__["_context"], Context)
    assert callable(context.run)


def test_inv_starts_python_as_usual_site_pth_files_and_sitecustomize_included(with_dev, tmp_path):
    """``inv`` is pip's console script: Python's own start runs, so a ``.pth`` file and
    ``sitecustomize`` of the environment run before a task on the light path, as before any other."""
    g = with_dev
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_dir = next(venv.glob("lib/python3*/site-packages"))
    ran = tmp_path / "ran"
    (site_dir / "zz_marker.pth").write_text(f"import os; open({str(ran)!r}, 'a').write('pth\\n')\n")
    (site_dir / "sitecustomize.py").write_text(f"open({str(ran)!r}, 'a').write('sitecustomize\\n')\n")
    here_site = [p for p in sys.path if p.endswith("site-packages")]      # invoke and the rest, from here
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(here_site), PYTHONPROFILEIMPORTTIME="1")
    bin_dir = console_script(tmp_path / "bin", str(venv / "bin" / "python"), chtop_tree=g.toplevel,
                             code=CHTOP_INV).parent
    status = typed(bin_dir, g.path("dev", "alpha"), "git.status", env=env)
    assert status.returncode == 0 and "alpha" in status.stdout, status.stdout + status.stderr
    assert not imported_invoke(status.stderr), "the light task path was not taken"
    assert set(ran.read_text().split()) == {"pth", "sitecustomize"}       # (the task's own Pythons run them too)
