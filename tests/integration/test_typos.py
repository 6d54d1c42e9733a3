"""A wrong worktree name, a name given as a word, a command typed outside a workspace: each is
answered with what is wrong and the command that fixes it (exit 2), as the user types it with
chtop's own ``inv`` and ``chtop``."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO_ROOT
from test_inv_discovery import CHTOP_INV, console_script

CHTOP = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
         "from chtop_tasks.cli.chtop import main; main()", str(REPO_ROOT)]


def typed(tmp_path, cwd, *args, env=None):
    """``inv ARGS`` typed in ``cwd`` (chtop's inv, as ./bootstrap installs it); ``chtop ...`` when
    the first word is ``chtop``."""
    if args[0] == "chtop":
        argv = [*CHTOP, *args[1:]]
    else:
        bin_dir = console_script(tmp_path / "bin", sys.executable, chtop_tree=REPO_ROOT, code=CHTOP_INV).parent
        argv = [str(bin_dir / "inv"), *args]
    return subprocess.run(argv, cwd=cwd, env=dict(os.environ, **(env or {})), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


def test_a_worktree_name_given_as_a_word_gets_the_name_form(with_dev, tmp_path):
    g = with_dev
    for binary, extra in (("inv", ()), ("chtop", ("--no-venv",))):
        words = (binary, "worktree.create", *extra, "dev2") if binary == "chtop" else ("worktree.create", "dev2")
        r = typed(tmp_path, g.toplevel, *words)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "No idea what" not in r.stderr
        assert f"{binary} worktree.create --name dev2{' --no-venv' if extra else ''}" in r.stderr, r.stderr
    assert not g.path("dev2").exists()
    r = typed(tmp_path, g.toplevel, "worktree.delete", "dve")
    assert r.returncode == 2 and "inv worktree.delete --name dve" in r.stderr, r.stderr


def test_a_mistyped_worktree_name_gets_did_you_mean_wherever_one_is_taken(with_dev, tmp_path):
    g = with_dev
    for where, args in ((g.toplevel, ("worktree.delete", "--name", "dve")),
                        (g.path("dev"), ("session.stop", "--name", "dve")),
                        (g.path("dev"), ("session.log", "--name", "dve")),
                        (g.path("dev"), ("session.attach", "--name", "dve")),
                        (g.toplevel, ("net.allow", "example.com", "--worktree", "dve"))):
        r = typed(tmp_path, where, *args)
        assert r.returncode == 2, (args, r.stdout + r.stderr)
        assert f"no worktree 'dve' in {g.grouping} (worktrees: dev); did you mean 'dev'?" in r.stderr, (args, r.stderr)
    r = typed(tmp_path, g.toplevel, "worktree.delete", "--name", "zzz")
    assert r.returncode == 2 and "no worktree 'zzz'" in r.stderr and "did you mean" not in r.stderr, r.stderr
    assert g.path("dev").is_dir()


def test_inv_and_chtop_outside_a_workspace_say_where_to_go(with_dev, tmp_path):
    g = with_dev
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = tmp_path / "xdg"
    for args in (("worktree.list",), ("chtop", "worktree.list")):
        r = typed(tmp_path, elsewhere, *args, env={"XDG_CONFIG_HOME": str(config)})
        assert r.returncode == 2, r.stdout + r.stderr
        assert "Can't find any collection" not in r.stderr
        assert "not inside a chtop workspace" in r.stderr and "Run this from the toplevel" in r.stderr
        assert f'name your grouping dir in {config}/chtop/config.toml, e.g. the line:  group = "~/ch"' in r.stderr
    (config / "chtop").mkdir(parents=True)
    (config / "chtop" / "config.toml").write_text(f'group = "{g.grouping}"\n')
    for args in (("worktree.list",), ("chtop", "worktree.list")):
        r = typed(tmp_path, elsewhere, *args, env={"XDG_CONFIG_HOME": str(config)})
        assert r.returncode == 2 and f"cd {g.toplevel}    or:  chtop go NAME" in r.stderr, r.stderr
