"""Text from the agent reaches your terminal inert: control characters shown as `cat -v` shows them.

A changed file whose diff carries OSC 2 (window title), OSC 52 (clipboard write), cursor-up plus
erase-line (hides the line above) or a C1 CSI, a file or branch name with control characters, a
junk ``packed-refs`` line that git quotes in its error: ``inv git.diff`` and ``inv git.status``
(their stdout bytes, as your terminal gets them) and the dashboard's cells and diff pane show them
as visible text.  Colour from git's ``--color`` stays when stdout is a terminal, and nothing else.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

# what an agent writes into a file it changes
HOSTILE = ("title \x1b]2;pwned-title\x07 clip \x1b]52;c;cm0gLXJmIH4=\x07 "
           "hide \x1b[1A\x1b[2K c1 \u009b2J del \x7f bell \x07 end\n")
MARKUP = "[@click=app.decide('group')]x[/] [red]red[/]"
JUNK_REF = "[@click=app.decide('group')]x[/]\x1b]2;junk\x07"       # a line git quotes in its error
SGR = re.compile(rb"\x1b\[[0-9;]*m")
RAW = (b"\x1b", b"\x07", b"\x00", b"\x7f", "\u009b".encode())


def raw_controls(data: bytes) -> list[bytes]:
    return [c for c in RAW if c in data]


def test_inert_shows_control_characters_as_cat_v_does():
    from chtop_tasks.core.term import inert, inert_keeping_colour

    assert inert("a\x1b]2;t\x07b") == "a^[]2;t^Gb"
    assert inert("\x00\x1b[1A\x1b[2K\x7f\r") == "^@^[[1A^[[2K^?^M"
    assert inert("\u009b2J \u0085") == "M-^[2J M-^E"          # C1 controls, as cat -v shows the byte
    assert inert("keep\ttabs\nand lines ü €") == "keep\ttabs\nand lines ü €"
    assert inert("if ok:\u202e\u2066 # }\u2069\u2066") == "if ok:<U+202E><U+2066> # }<U+2069><U+2066>"
    assert inert_keeping_colour("\x1b[31mred\x1b[0m\x1b]2;t\x07", open(os.devnull)) == "^[[31mred^[[0m^[]2;t^G"


def agent_edits(g):
    """What the agent leaves in dev: a hostile change, an untracked file with ESC in its name, and beta
    on a branch whose name carries a C1 control."""
    dev = g.path("dev")
    (dev / "alpha" / "alpha.txt").write_text("line 1\n" + HOSTILE + MARKUP + "\n")
    (dev / "alpha" / "evil\x1b]2;name\x07.txt").write_text("x\n")
    git(dev / "beta", "checkout", "-q", "-b", "side\u009b2J")
    return dev


def typed_inv(g) -> Path:
    """The `inv` you type (chtop's, as ./bootstrap links it), for this workspace."""
    from test_inv_discovery import CHTOP_INV, console_script

    return console_script(g.base / "bin", sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV)


def inv_bytes(g, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``inv ARGS`` typed in ``cwd``: its stdout and stderr bytes, as your terminal would get them."""
    return subprocess.run([str(typed_inv(g)), *args], cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=300)


@pytest.mark.parametrize("task", ["git.diff", "git.status"])
def test_git_diff_and_status_print_the_agents_text_inert(with_dev, task):
    g = with_dev
    dev = agent_edits(g)
    proc = inv_bytes(g, dev, task)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert raw_controls(out) == [], out
    if task == "git.diff":
        assert b"^[]2;pwned-title^G" in proc.stdout and b"^[]52;c;" in proc.stdout, proc.stdout
        assert b"^[[1A^[[2K" in proc.stdout and b"M-^[2J" in proc.stdout
    else:
        assert b"side" in proc.stdout and b"M-^[2J" in proc.stdout, proc.stdout


def test_git_diff_on_a_terminal_keeps_gits_colour_and_nothing_else(with_dev):
    pexpect = pytest.importorskip("pexpect")
    g = with_dev
    dev = agent_edits(g)
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    child = pexpect.spawn(str(typed_inv(g)), ["git.diff"], cwd=str(dev),
                          env=dict(env, TERM="xterm-256color"), timeout=120)
    child.expect(pexpect.EOF)
    out = child.before
    assert SGR.search(out), out                             # git's colour came through
    rest = SGR.sub(b"", out)
    assert raw_controls(rest) == [], rest
    assert b"^[]2;pwned-title^G" in rest and b"^[]52;c;" in rest


def junk_packed_refs(g, worktree: str, repo: str) -> None:
    """The agent's private store's packed-refs: a line git quotes in its error text."""
    store = g.grouping / ".chtop" / "git" / worktree / f"{repo}.git"
    packed = store / "packed-refs"
    refs = [line for line in packed.read_text().splitlines(keepends=True) if not line.startswith("#")]
    packed.write_text(JUNK_REF + "\n" + "".join(refs))     # no "sorted" header: git reads each line


def test_the_dash_shows_the_agents_text_literally_in_cells_and_diff_pane(with_dev):
    from test_dash import dash_with_rows, wait_for

    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.worktrees import create_worktree

    g = with_dev
    dev = agent_edits(g)
    g.commit(dev / "alpha", "alpha.txt", "line 1\n" + HOSTILE + MARKUP + "\n", "hostile change")
    create_worktree(find_workspace(g.toplevel), "feat")
    junk_packed_refs(g, "feat", "alpha")

    async def scenario():
        async with dash_with_rows(g, size=(200, 50)) as (app, pilot, table):
            rows = {str(table.get_row_at(i)[0]): [table.get_row_at(i)[j] for j in range(4)]
                    for i in range(table.row_count)}
            beta_cell = rows["dev"][3]
            assert str(beta_cell).startswith("sideM-^[2J "), str(beta_cell)
            junk_cell = str(rows["feat"][2])
            assert "[@click=app.decide('group')]x[/]" in junk_cell, junk_cell      # git shows ESC as '?' itself
            for cell in rows["dev"] + rows["feat"]:
                assert not isinstance(cell, str) and not any(c in str(cell) for c in "\x1b\x07\u009b"), cell
            diff = app.query_one("#diff")
            await pilot.press("f")
            await wait_for(pilot, lambda: "^[]2;pwned-title^G" in str(diff.render()), what="the full diff")
            shown = str(diff.render())
            assert MARKUP in shown and "^[]52;c;" in shown and "\x1b" not in shown, shown

    asyncio.run(scenario())


# -- no agent text handed to Rich/Textual as markup -------------------------------------------

DASH = Path(__file__).resolve().parents[2] / "chtop_tasks" / "dash"
WIDGET_CALLS = {"update", "add_row", "update_cell", "add_column", "notify", "write", "Static", "Label",
                "set_title", "push_screen_message"}


def shown_safely(node: ast.expr) -> bool:
    """A string constant (chtop's own), a ``plain(...)`` (inert, never markup), or ``*map(plain, ...)``."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Starred):
        inner = node.value
        return (isinstance(inner, ast.Call) and getattr(inner.func, "id", None) == "map"
                and getattr(inner.args[0], "id", None) == "plain")
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "plain"


def widget_calls_with_unsafe_text(path: Path) -> list[str]:
    wrong = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name in ("from_markup", "from_ansi") or any(k.arg == "markup" and not
                                                         (isinstance(k.value, ast.Constant) and k.value.value is False)
                                                         for k in node.keywords):
            wrong.append(f"{path.name}:{node.lineno}: {name} parses markup")
        if name not in WIDGET_CALLS or (name == "update" and not path.name == "app.py"):
            continue
        shown = node.args[2:3] if name == "update_cell" else node.args
        shown += [k.value for k in node.keywords if k.arg in ("renderable", "content", "message", "label", "value")]
        wrong += [f"{path.name}:{node.lineno}: {name}({ast.unparse(a)})" for a in shown if not shown_safely(a)]
    return wrong


def test_the_dash_hands_widgets_no_markup_strings():
    """Every text the dash gives a widget is ``plain(...)`` (term.inert, in a rich Text: never parsed
    as markup) or chtop's own constant; nothing parses markup or ANSI."""
    wrong = [w for path in sorted(DASH.glob("*.py")) for w in widget_calls_with_unsafe_text(path)]
    assert wrong == [], "\n".join(wrong)


def test_the_source_walk_sees_a_markup_string_handed_to_a_widget(tmp_path):
    bad = tmp_path / "app.py"
    bad.write_text("def f(table, static, name):\n    table.add_row(name, key=name)\n"
                   "    static.update(f'diff of {name}')\n    table.update_cell(1, 2, name)\n"
                   "    static.update(plain(name))\n")
    assert len(widget_calls_with_unsafe_text(bad)) == 3


def test_net_log_shows_the_agents_request_fields_inert_on_one_line(with_dev):
    """The human proxy log carries the agent's method, host and the reason: `inv net.log` tails it."""
    from chtop_tasks.proxy.logs import RequestLog, net_dir

    g = with_dev
    log = RequestLog(net_dir(g.grouping))
    log.record({"decision": "bad", "method": "G\x1b]2;m\x07ET", "host": "x\x1b]52;c;eA==\x07.example",
                "port": 443, "status": 400, "worktree": "dev", "reason": "junk\n2026-01-01 00:00:00 ALLOWED forged"})
    log.close()
    proc = inv_bytes(g, g.path("dev"), "net.log")
    assert proc.returncode == 0, proc.stderr
    assert raw_controls(proc.stdout) == [] and b"^[]2;m^G" in proc.stdout and b"^[]52;c;" in proc.stdout
    assert b"\n2026-01-01 00:00:00 ALLOWED forged" not in proc.stdout and b"junk^J2026" in proc.stdout


def test_session_log_shows_the_agents_screen_inert_unless_raw(with_dev):
    from chtop_tasks.sessions import records

    g = with_dev
    screen = records.screen_path(g.grouping, "dev")
    screen.parent.mkdir(parents=True, exist_ok=True)
    screen.write_text("agent says \x1b]2;pwned\x07 and \u009b2J\n")
    shown = inv_bytes(g, g.path("dev"), "session.log")
    assert shown.returncode == 0, shown.stderr
    assert raw_controls(shown.stdout) == [] and b"agent says ^[]2;pwned^G and M-^[2J" in shown.stdout
    raw_log = records.log_path(g.grouping, "dev")
    raw_log.write_bytes(b"\x1b[1mbold\x1b[0m\n")
    assert inv_bytes(g, g.path("dev"), "session.log", "--raw").stdout == b"\x1b[1mbold\x1b[0m\n"


def test_rebase_down_shows_gits_conflict_message_naming_the_agents_file_inert(with_dev):
    """git names the conflicted file as it is ("Merge conflict in PATH"): rebase-down shows it inert."""
    g = with_dev
    dev = g.path("dev")
    name = "notes\x1b]52;c;cm0gLXJmIH4=\x07.txt"
    g.push_upstream_commit("alpha", name, "upstream\n")
    g.commit(dev / "alpha", name, "the agent's\n", "agent: notes \x1b]2;subject\x07")
    proc = inv_bytes(g, dev, "git.rebase-down")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout + proc.stderr
    assert b"Merge conflict in notes^[]52;c;cm0gLXJmIH4=^G.txt" in out, out
    assert raw_controls(out) == [], out
