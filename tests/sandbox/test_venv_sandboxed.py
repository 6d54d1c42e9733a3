"""A feature worktree's venv is built inside its sandbox, never on the host.

The agent can write every repo of its worktree, so a ``setup.py`` or a package's ``__init__``
there is the agent's code.  Here one writes a marker to a path of the host that the sandbox does
not mount whenever it runs where that path is reachable, and records where it ran otherwise; then
``inv venv.build --workdir ../dev`` runs on the host, as the user would, with no opt-in: the
sandboxed build is the default for feature worktrees.  An isolated build fetches its build
requirements from a local index (on 127.0.0.2, which the sandbox's ``NO_PROXY`` does not name)
through the build's own proxy socket; the agent's sandbox of the same worktree is refused it.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import eventually, git
from sandbox_helpers import as_owner_python, user_group_cm
from test_venv import tinydep_wheel, wheelhouse  # noqa: F401  (a fixture)
from venv_samples import PYPROJECT

pytestmark = [pytest.mark.podman, pytest.mark.slow]

# The agent's build hook and package: each tries the host-only marker, then notes where it ran
# (IS_SANDBOX, and the marker's dir out of sight) in the repo dir, which the sandbox mounts.
HOOK = """\
import os
from pathlib import Path

def note(what):
    try:
        Path({marker!r}).write_text(what + " ran with the host's files in reach\\n")
    except OSError:
        pass
    inside = os.environ.get("IS_SANDBOX") == "1" and not os.path.isdir(os.path.dirname({marker!r}))
    caps = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff:")][0]
    with open({where!r}, "a") as fh:
        fh.write(f"{{what}} inside={{inside}}\\n")
        fh.write(f"ids {{what}} uid={{os.getuid()}} caps={{caps}}\\n")
"""
SETUP = """\
import sys
sys.path.insert(0, {here!r})
from hook import note
note("setup.py")
from setuptools import setup
setup(name="alpha", version="0.1", packages=["alpha"])
"""


def _plant_files(alpha, marker):
    """alpha gets the hostile build hook (setup.py) and package; returns where they note their runs."""
    where = alpha / "ran-where.txt"
    (alpha / "hook.py").write_text(HOOK.format(marker=str(marker), where=str(where)))
    (alpha / "setup.py").write_text(SETUP.format(here=str(alpha)))
    (alpha / "alpha").mkdir()
    (alpha / "alpha" / "__init__.py").write_text(
        f"import sys\nsys.path.insert(0, {str(alpha)!r})\nfrom hook import note\nnote('import alpha')\n")
    return where


def _install_alpha(manifest):
    text = manifest.read_text()
    manifest.write_text(text.replace('install = "none"',
                                     'install = "editable-no-build-isolation"\nsmoke_import = "alpha"\n'
                                     'test = "python -c \'import alpha\'"', 1))


def _plant(group):
    """As the worktree's owner: alpha becomes an installed repo with a hostile build and import
    (no config: the sandboxed build is the default)."""
    dev = group.grouping / "dev"
    marker = group.base / "host-only" / "marker"
    marker.parent.mkdir()
    _plant_files(dev / "alpha", marker)
    _install_alpha(dev / "git_repositories.toml")


@pytest.fixture(scope="module")
def planted(remote_template):
    with user_group_cm(remote_template, prepare=_plant) as group:
        yield group


def test_venv_build_of_a_feature_worktree_runs_its_build_code_only_inside_the_sandbox(planted):
    g = planted
    marker = g.base / "host-only" / "marker"
    built = g.inv("venv.build", "--workdir", str(g.dev), "--installer", "pip", cwd=g.toplevel, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    assert not marker.exists(), marker.read_text()
    ran = (g.dev / "alpha" / "ran-where.txt").read_text().splitlines()
    assert "setup.py inside=True" in ran and "import alpha inside=True" in ran, ran   # the smoke import too
    assert not any(line.endswith("inside=False") for line in ran), ran
    assert "smoke imports ok: alpha:alpha" in built.stdout and "venv-build" in built.stderr
    assert (g.dev / ".venv" / "chtop-build-complete").is_file()
    # the venv works in the agent's sandbox: alpha is the editable install of the worktree's repo
    used = g.sbox("python -c 'import alpha; print(alpha.__file__)'")
    assert used.returncode == 0, used.stderr
    assert used.stdout.strip().endswith(f"{g.dev}/alpha/alpha/__init__.py"), used.stdout
    assert not marker.exists()
    # a rebuild from scratch (--recreate empties the mounted .venv inside) with --test: the same
    (g.dev / "alpha" / "ran-where.txt").unlink()
    again = g.inv("venv.build", "--workdir", str(g.dev), "--installer", "pip", "--recreate", "--test",
                  cwd=g.toplevel, timeout=600)
    assert again.returncode == 0 and "tests ok: alpha" in again.stdout, again.stdout + again.stderr
    assert not marker.exists()
    ran = (g.dev / "alpha" / "ran-where.txt").read_text().splitlines()
    assert ran.count("import alpha inside=True") == 2 and "setup.py inside=True" in ran, ran  # smoke + test
    # the build's whole output is in a log of the group's, its path printed
    log = _printed_log(again.stdout)
    assert log.parent == g.grouping / ".chtop" / "logs" and "# exit 0" in log.read_text()
    assert f"-m pip install --no-build-isolation -e {g.dev}/alpha" in log.read_text()
    # a build that fails inside: its cause is lifted into the summary, its whole output logged
    setup = g.dev / "alpha" / "setup.py"
    setup.write_text("print('noise line')\nimport not_a_module_xyz\n" + setup.read_text())
    failed = g.inv("venv.build", "--workdir", str(g.dev), "--installer", "pip", cwd=g.toplevel, timeout=600)
    assert failed.returncode != 0
    assert "cause: ModuleNotFoundError: No module named 'not_a_module_xyz'" in failed.stderr, failed.stderr
    logged = Path(failed.stderr.split("its whole output: ", 1)[1].split()[0])
    assert logged.parent == g.grouping / ".chtop" / "logs" and "not_a_module_xyz" in logged.read_text()
    assert failed.stderr.count(f"inv venv.build --workdir {g.dev}") == 1, failed.stderr
    assert not marker.exists()


def test_ctrl_c_during_a_sandboxed_venv_build_exits_130_saying_what_was_kept(planted):
    """Ctrl-C (SIGINT to the task's process group, as a terminal sends it) while the build runs
    inside the sandbox: the task says it was interrupted, what is left and how to retry, and exits
    130; the launch printed one short line, not the build's plan."""
    g = planted
    alpha = g.dev / "alpha"
    started = alpha / "build-started"
    setup = alpha / "setup.py"
    kept = setup.read_text()
    setup.write_text(f"import pathlib, time\npathlib.Path({str(started)!r}).write_text('x')\ntime.sleep(300)\n"
                     + SETUP.format(here=str(alpha)))
    argv = ["runuser", "-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in g.env.items()],
            str(g.venv / "bin" / "python"), "-m", "invoke", "venv.build", "--workdir", str(g.dev),
            "--installer", "pip"]
    proc = subprocess.Popen(argv, cwd=g.toplevel, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        eventually(started.exists, "the build's setup.py to start inside the sandbox", timeout=300)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        setup.write_text(kept)
        started.unlink(missing_ok=True)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "interrupted while building the venv" in err, err
    assert f"Retry the venv alone: inv venv.build --workdir {g.dev}" in err, err
    launch = [line for line in err.splitlines() if line.startswith("$ podman run")]
    assert launch and all(len(line) < 400 for line in launch), launch


def test_a_build_the_proxy_refused_says_the_host_the_reason_and_the_line_that_allows_it(planted):
    """A build whose code fetches from a host the build may not reach fails with the client's words
    only (a 403, a tunnel error): the task's own output names the host, the proxy's reason and the
    line that allows it for builds, with no `inv net.log` needed."""
    g = planted
    setup = g.dev / "alpha" / "setup.py"
    kept = setup.read_text()
    setup.write_text("import urllib.request\n"
                     "urllib.request.urlopen('http://index.blocked-here.example/simple/', timeout=60)\n"
                     + SETUP.format(here=str(g.dev / "alpha")))
    try:
        failed = g.inv("venv.build", "--workdir", str(g.dev), "--installer", "pip", cwd=g.toplevel, timeout=600)
    finally:
        setup.write_text(kept)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert ("chtop: the proxy refused index.blocked-here.example: not on the venv build's allowance") in failed.stderr
    assert ("add the line `index.blocked-here.example` to sandbox/net-allow-build.txt (builds only), or "
            "`inv net.allow index.blocked-here.example`") in failed.stderr, failed.stderr


def _printed_log(stdout: str) -> Path:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("venv build log "))
    return Path(line.removeprefix("venv build log ").strip())


def test_worktree_create_builds_the_new_worktrees_venv_inside_its_sandbox_as_root(initialized, tmp_path):
    """The same through worktree.create's venv step, as root (a rootful sandbox, the agent's ids):
    alpha's main branch carries the hook (as a merged agent branch would)."""
    g = initialized
    assert not (Path(os.environ["XDG_CONFIG_HOME"]) / "chtop" / "config.toml").exists()   # no opt-in
    marker = tmp_path / "host-only" / "marker"
    marker.parent.mkdir()
    top_alpha = g.toplevel / "alpha"
    dev_alpha = g.path("dev", "alpha")
    _plant_files(top_alpha, marker)
    for name in ("hook.py", "setup.py", "alpha/__init__.py"):   # they name dev's paths, where they run
        path = top_alpha / name
        path.write_text(path.read_text().replace(str(top_alpha), str(dev_alpha)))
    git(top_alpha, "add", "-A")
    git(top_alpha, "commit", "-qm", "a build hook")
    _install_alpha(g.toplevel / "git_repositories.toml")
    git(g.toplevel, "commit", "-qam", "install alpha")
    made = g.inv(g.toplevel, "worktree.create", "--name", "dev", check=False, timeout=600)
    assert made.returncode == 0, made.stdout + made.stderr
    assert not marker.exists(), marker.read_text()
    ran = (dev_alpha / "ran-where.txt").read_text().splitlines()
    assert "setup.py inside=True" in ran and "import alpha inside=True" in ran, (ran, made.stdout, made.stderr[-3000:])
    assert not any(line.endswith("inside=False") for line in ran), ran
    assert "venv-build" in made.stderr and "venv ready" in made.stdout
    # what the build wrote is owned as the rest of the worktree
    owner = os.stat(g.path("dev")).st_uid
    assert {os.lstat(p).st_uid for p in (g.path("dev", ".venv"), g.path("dev", ".venv", "bin", "python"),
                                         g.path("dev", ".venv", "chtop-build-complete"))} == {owner}
    used = g.inv(g.path("dev"), "sbox.run", "--", "python", "-c", "import alpha; print(alpha.__file__)",
                 check=False, timeout=300)
    assert used.returncode == 0, used.stderr
    assert used.stdout.strip().endswith(f"{dev_alpha}/alpha/__init__.py"), used.stdout
    # the build ran as the agent runs: its uid, no capabilities (as root on the host)
    lines = (dev_alpha / "ran-where.txt").read_text().splitlines()
    ids = [" ".join(line.split()[-2:]) for line in lines if line.startswith("ids ")]
    agent = [" ".join(line.split()[-2:]) for line in lines if line.startswith("ids import alpha")][-1]  # just now
    assert set(ids) == {agent} and agent.endswith("caps=0000000000000000"), (ids, agent)
    assert not marker.exists()
    # worktree.delete takes what its builds kept (their caches, the last build's log) with it
    cache = g.grouping / ".chtop" / "build-cache" / "dev"
    assert (cache / "log" / "build.log").is_file()
    gone = g.inv(g.toplevel, "worktree.delete", "--name", "dev", "--force", check=False, timeout=300)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not cache.exists() and "removed its venv build cache" in gone.stdout, gone.stdout


def test_the_plan_goes_into_the_sandbox_as_data_and_comes_back_the_same(tmp_path):
    from test_venv import A, B, make_root

    from chtop_tasks.venv import build as V
    from chtop_tasks.venv.build_inside import plan_from_json, plan_to_json

    root, manifest = make_root(tmp_path / "ws", [A, dict(B, test="python -m b_frb.tests")])
    (root / ".venv").mkdir()   # no stamp: the plan removes it first
    for installer in ("uv", "pip"):
        steps = V.plan_build(root, manifest, test=True, installer=installer, python=tmp_path / "py")
        assert {s.kind for s in steps} >= {"remove", "create", "install", "smoke", "test"}
        assert plan_from_json(plan_to_json(root, installer, True, steps)) == (root, installer, True, steps)
    with pytest.raises(ValueError, match="unknown step field 'shell'"):
        plan_from_json('{"root": "/r", "installer": "pip", "test": false, "steps": [{"kind": "x", "shell": "id"}]}')


def test_only_a_venv_build_gets_the_venv_and_its_cache_writable(with_dev):
    from chtop_tasks.sandbox.launcher import plan_launch
    from chtop_tasks.venv.sandboxed import build_cache_dirs
    from chtop_tasks.workspace.targets import target_for

    dev = with_dev.path("dev")
    (dev / ".venv").mkdir()
    caches = build_cache_dirs(with_dev.grouping, "dev")
    for path in caches.values():
        path.mkdir(parents=True)
    target = target_for(dev)

    def volumes(**build):
        argv = plan_launch(target, ["true"], interactive=False, **build).argv
        return {a.split(":")[1]: a.split(":")[2] for a in argv if a.startswith("--volume=")}

    agent = volumes()
    assert agent[str(dev / ".venv")].startswith("ro")
    assert not any(dst.startswith(str(with_dev.grouping / ".chtop" / "build-cache")) for dst in agent)
    build = volumes(build_rw=(dev / ".venv", *caches.values()))
    assert build[str(dev / ".venv")].startswith("rw")
    assert all(build[str(p)].startswith("rw") for p in caches.values())
    assert build[str(with_dev.toplevel)].startswith("ro")   # the build_inside it runs, read-only


# --- the build's own network allowance ---------------------------------------------------------

# alpha's isolated build needs a requirement that only the index has
ISOLATED_PYPROJECT = PYPROJECT.format(name="alpha", package="alpha").replace(
    'requires = ["setuptools>=64"]', 'requires = ["setuptools>=64", "tinydep"]')
assert "tinydep" in ISOLATED_PYPROJECT


@contextlib.contextmanager
def local_index(wheels: Path, base: Path):
    """A PEP 503 index of the wheelhouse (setuptools, tinydep) served on 127.0.0.2 (loopback, but
    not the 127.0.0.1 that the sandbox's NO_PROXY names): its URL and the paths it was asked for."""
    simple = base / "index" / "simple"
    for wheel in wheels.glob("*.whl"):
        project = simple / wheel.name.split("-")[0].lower().replace("_", "-")
        project.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, project / wheel.name)
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            asked.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), functools.partial(Handler, directory=str(simple.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}/simple/", asked
    finally:
        server.shutdown()
        server.server_close()


def _isolated_alpha(group):
    dev_alpha = group.grouping / "dev" / "alpha"
    (dev_alpha / "pyproject.toml").write_text(ISOLATED_PYPROJECT)
    (dev_alpha / "alpha").mkdir()
    (dev_alpha / "alpha" / "__init__.py").write_text("")
    manifest = group.grouping / "dev" / "git_repositories.toml"
    manifest.write_text(manifest.read_text().replace('install = "none"', 'install = "editable"\nsmoke_import = "alpha"', 1))


# Run inside the agent's sandbox: GET the index through the proxy, CONNECT pypi.org, and look for
# the build's socket; one line each.
AGENT_PROBE = """\
import os, sys, urllib.request, urllib.error
def status(url):
    try:
        return urllib.request.urlopen(url, timeout=60).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        return type(exc).__name__ + ": " + str(exc)
print("index", status(sys.argv[1]))
print("pypi", status("https://pypi.org/simple/setuptools/"))
print("build-socket", os.path.exists(sys.argv[2]))
"""


def test_an_isolated_build_gets_its_requirements_through_the_builds_allowance_and_the_agent_does_not(
        remote_template, wheelhouse, tmp_path):  # noqa: F811
    """The index pip and uv are configured for (PIP_INDEX_URL, UV_DEFAULT_INDEX) is allowed on the
    build's socket only: the isolated build fetches setuptools and tinydep from it; from the agent's
    sandbox of the same worktree the index, pypi.org and the build's socket are all out of reach."""
    tinydep_wheel(wheelhouse, tmp_path)
    with user_group_cm(remote_template, prepare=_isolated_alpha) as g, local_index(wheelhouse, tmp_path) as (url, asked):
        env = {"PIP_INDEX_URL": url, "UV_DEFAULT_INDEX": url}
        built = g.inv("venv.build", "--workdir", str(g.dev), "--installer", "pip", cwd=g.toplevel, extra_env=env,
                      timeout=600)
        assert built.returncode == 0, built.stdout + built.stderr
        assert "smoke imports ok: alpha:alpha" in built.stdout
        assert any(p.startswith("/simple/tinydep/") for p in asked), asked      # the build requirement, fetched
        assert any(p.endswith(".whl") and "tinydep" in p for p in asked), asked
        socket = as_owner_python(g, "from chtop_tasks.proxy.control import planned_endpoint; "
                                    f"print(planned_endpoint({str(g.grouping)!r}, 'dev', build=True).socket_path)")
        assert socket.returncode == 0, socket.stderr
        build_socket = socket.stdout.strip()
        before = len(asked)
        probe = g.inv("sbox.run", "--", "python3", "-c", AGENT_PROBE, url, build_socket, extra_env=env, timeout=300)
        assert probe.returncode == 0, probe.stdout + probe.stderr
        lines = probe.stdout.splitlines()
        assert "index 403" in lines and "build-socket False" in lines, (lines, probe.stderr)
        assert any(ln.startswith("pypi ") and "403" in ln for ln in lines), lines
        assert len(asked) == before, asked[before:]        # nothing of the agent's reached the index
        # the proxy told them apart: the build's requests allowed as the build's, the agent's refused
        records = [json.loads(line) for line in (g.grouping / ".chtop" / "net" / "requests.jsonl").read_text().splitlines()]
        index = [r for r in records if r.get("host") == "127.0.0.2"]
        assert {r["worktree"] for r in index if r.get("decision") == "allowed"} == {"dev/build"}, index
        assert {r["worktree"] for r in index if r.get("decision") != "allowed"} == {"dev"}, index


def test_as_root_the_uv_path_builds_an_isolated_repo_through_the_builds_allowance(with_dev, wheelhouse, tmp_path):  # noqa: F811
    """The same allowance on the uv path, as root (a rootful sandbox): uv's isolated build fetches
    setuptools and tinydep from the index UV_DEFAULT_INDEX names, through the build's socket."""
    g = with_dev
    tinydep_wheel(wheelhouse, tmp_path)
    _isolated_alpha(g)
    with local_index(wheelhouse, tmp_path) as (url, asked):
        env = {"PIP_INDEX_URL": url, "UV_DEFAULT_INDEX": url, "UV_CACHE_DIR": str(tmp_path / "host-uv-cache")}
        built = g.inv(g.toplevel, "venv.build", "--workdir", str(g.path("dev")), "--installer", "uv", env=env,
                      check=False, timeout=600)
        assert built.returncode == 0, built.stdout + built.stderr
        assert "installer uv" in built.stdout and "smoke imports ok: alpha:alpha" in built.stdout, built.stdout
        assert any(p.endswith(".whl") and "tinydep" in p for p in asked), asked
    assert not (tmp_path / "host-uv-cache").exists()     # the build's own cache, never the host's
    assert any((g.grouping / ".chtop" / "build-cache" / "dev" / "uv").iterdir())
