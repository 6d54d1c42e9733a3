"""``chtop go NAME``: jump into a worktree by name (and to its agent), via a shell function.

A program cannot change its shell's directory, so ``chtop shell-init bash``
prints a ``chtop`` shell function (the way direnv and zoxide hook in):
``chtop go NAME [--agent]`` asks the real command for the directory
(``chtop go --print-dir NAME``), cds there, and with ``--agent`` runs
``chtop go --attach NAME``; every other ``chtop`` command passes through.
A worktree on another host (``hosts.where``) answers ``--host=HOST`` instead of
a directory, and the function runs ``chtop go --host=HOST NAME``: ``ssh -t`` there.

The group is the one around the current directory, else the one the user's
config names (``~/.config/chtop/config.toml``: ``group = "~/ch"``).  A
missing worktree is offered for creation only when stdin is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from ..core import term
from ..core.errors import ChtopError, NotInWorkspace, UsageError, WorkspaceError
from ..core.places import check_worktree_name, read_user_config, user_config_dir
from ..workspace.suggest import closest_worktree, no_worktree_message

SHELLS = ("bash", "zsh")
CONFIG_NAME = "config.toml"

# POSIX enough for bash and zsh alike.  Only `go` is handled here; the directory comes back on
# stdout (the real command sends everything else it prints to stderr).
SHELL_FUNCTION = r"""# chtop shell integration ({shell}): eval "$(chtop shell-init {shell})"
chtop() {{
  if [ "$1" = go ]; then
    shift
    case " $* " in
      *" --host "*) command chtop go "$@"; return $? ;;
    esac
    local __chtop_dir
    __chtop_dir="$(command chtop go --print-dir "$@")" || return $?
    [ -n "$__chtop_dir" ] || return 1
    case "$__chtop_dir" in
      --host=*) command chtop go "$__chtop_dir" "$@"; return $? ;;
    esac
    builtin cd -- "$__chtop_dir" || return $?
    case " $* " in
      *" --agent "*) command chtop go --attach "$@" ;;
    esac
  else
    command chtop "$@"
  fi
}}
"""


def shell_init(shell: str) -> str:
    if shell not in SHELLS:
        raise UsageError(f"chtop shell-init: unknown shell {shell!r}; use one of: {', '.join(SHELLS)}\n"
                         f'e.g. add to ~/.bashrc:  eval "$(chtop shell-init bash)"')
    return SHELL_FUNCTION.format(shell=shell)


# -- which group ---------------------------------------------------------------------------------

def config_path() -> Path:
    return user_config_dir() / CONFIG_NAME


def configured_group() -> Path | None:
    """``group = "..."`` from the user's chtop config, or None when unset."""
    path, data = read_user_config()
    value = data.get("group")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f'{path}: group must be a path, e.g. group = "~/ch"')
    return Path(value).expanduser()


def toplevel_in(grouping: Path) -> Path:
    """The toplevel of a grouping dir: its one child that is a chtop container repo's main clone."""
    from ..workspace.layout import MARKERS

    found = [d for d in sorted(grouping.iterdir()) if d.is_dir() and (d / ".git").is_dir()
             and all((d / m).is_file() for m in MARKERS)] if grouping.is_dir() else []
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} ({', '.join(d.name for d in found)})"
        raise WorkspaceError(f"{grouping}: {what} chtop toplevel in it; set `group` in {config_path()} "
                             "to a grouping dir holding exactly one")
    return found[0]


def current_toplevel(cwd: Path | None = None):
    """The toplevel Workspace of the group around ``cwd``, else of the configured group."""
    from ..workspace.layout import find_workspace

    try:
        ws = find_workspace(Path(cwd or Path.cwd()))
        return ws.for_root(ws.toplevel)
    except NotInWorkspace:
        pass
    grouping = configured_group()
    if grouping is None:
        raise WorkspaceError(f"not inside a chtop workspace, and no group in {config_path()}; "
                             f'cd into one, or add the line:  group = "~/ch"')
    return find_workspace(toplevel_in(grouping))


def existing_worktree(top, name: str):
    """The feature worktree ``name`` of ``top``'s group, or None when there is none."""
    from ..workspace.layout import find_workspace

    root = top.worktree_root(name)
    if name in top.reserved_names() or not (root / ".git").is_file():
        return None
    return find_workspace(root)


# -- the real command's side ---------------------------------------------------------------------

def offer_create(top, name: str, venv: bool, stdin=None) -> bool:
    """Ask on the terminal whether to create ``name``; never without one, nor when ``name`` is
    close to an existing worktree's (a typo is answered with that name instead)."""
    stdin = stdin or sys.stdin
    if not stdin.isatty() or closest_worktree(top.grouping, name):
        return False
    sys.stderr.write(f"{no_worktree_message(top.grouping, name)}.\nCreate worktree {name} now "
                     f"(inv worktree.create --name {name}{'' if venv else ' --no-venv'})? [y/N] ")
    sys.stderr.flush()
    return stdin.readline().strip().lower() in ("y", "yes")


def create(top, name: str, venv: bool):
    from ..workspace.worktrees import closing_hints, create_worktree

    build = None
    if venv:
        from ..venv.sandboxed import build_workspace_venv as build
    new_ws = create_worktree(top, name, build)
    print(closing_hints(new_ws), file=sys.stderr)
    return new_ws


def resolve(name: str, venv: bool = True, cwd: Path | None = None):
    """The worktree to go to, created on a yes at the terminal; UsageError when there is none."""
    check_worktree_name(name)
    top = current_toplevel(cwd)
    if name == top.toplevel.name:       # `chtop go top`: the toplevel, not a worktree to make
        return top
    ws = existing_worktree(top, name)
    if ws is not None:
        return ws
    if offer_create(top, name, venv):
        return create(top, name, venv)
    close = closest_worktree(top.grouping, name)
    fix = (f"go there:  chtop go {close}" if close else
           f"make it with:\n  cd {top.toplevel} && inv worktree.create --name {name}")
    raise UsageError(f"{no_worktree_message(top.grouping, name)}; {fix}")


def attach_or_start(ws) -> int:
    """Attach the worktree's live agent session, starting one first when there is none."""
    from ..dash import sessions_adapter as sessions

    session = sessions.session_of(ws.grouping, ws.name)
    if session is None or session.get("state") not in sessions.LIVE_STATES:
        print(f"starting a {sessions.DEFAULT_AGENT} session in {ws.name} ...", file=sys.stderr, flush=True)
        sessions.start_session(ws, sessions.DEFAULT_AGENT, [], False)
        session = sessions.session_of(ws.grouping, ws.name) or {"worktree": ws.name}
    sys.stdout.flush()
    return sessions.attach(ws.grouping, sessions.session_name(session))


def parse_go(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="chtop go", description="cd into worktree NAME of this group")
    ap.add_argument("name")
    ap.add_argument("--agent", action="store_true", help="attach its agent session (start one if none)")
    ap.add_argument("--no-venv", action="store_true", help="when creating it, skip building its .venv")
    ap.add_argument("--host", default="", help="the host the worktree is on (default: where chtop recorded it; "
                                                "'local': this machine): a shell there over ssh -t (or its agent "
                                                "session, --agent)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--print-dir", action="store_true", help=argparse.SUPPRESS)
    mode.add_argument("--attach", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)          # a usage error exits 2 with argparse's message


def remote_place(name: str, host: str = "", cwd: Path | None = None):
    """The host worktree ``name`` is on (``host``: the one the user named, checked against the
    records); None when it is here, or nowhere (``resolve`` offers to create it here)."""
    from ..hosts.where import Nowhere, locate

    check_worktree_name(name)
    top = current_toplevel(cwd)
    if name == top.toplevel.name and not host:
        return None
    try:
        place = locate(top, name, host)
    except Nowhere:
        if host:
            raise
        return None
    return place if place.remote else None


def go(argv: list[str]) -> int:
    args = parse_go(argv)
    place = remote_place(args.name, args.host)
    if place and args.print_dir:          # the shell function runs `chtop go --host=HOST NAME` itself
        print(f"--host={place.host.name}")
        return 0
    if place:
        from ..core.runner import echo
        from ..hosts.fleet import go_argv_there

        argv = go_argv_there(place.host.name, args.name, args.agent)
        echo(argv)
        sys.stdout.flush()
        os.execvp(argv[0], argv)
    if args.attach:
        return attach_or_start(existing_or_fail(args.name))
    if args.print_dir:
        real_stdout = os.dup(1)
        with contextlib.ExitStack() as stack:
            os.dup2(2, 1)                       # whatever else runs prints to stderr
            stack.callback(os.dup2, real_stdout, 1)
            ws = resolve(args.name, venv=not args.no_venv)
            sys.stdout.flush()
        os.write(real_stdout, f"{ws.root}\n".encode())
        os.close(real_stdout)
        return 0
    ws = resolve(args.name, venv=not args.no_venv)
    print(f"chtop go changes your shell's directory only through its shell function; add to ~/.bashrc:\n"
          f'  eval "$(chtop shell-init bash)"\nthe worktree is {ws.root}', file=sys.stderr)
    print(ws.root)
    return attach_or_start(ws) if args.agent else 0


def existing_or_fail(name: str):
    check_worktree_name(name)
    top = current_toplevel()
    ws = existing_worktree(top, name)
    if ws is None:
        raise UsageError(no_worktree_message(top.grouping, name))
    return ws


def main(argv: list[str]) -> int:
    """``chtop shell-init SHELL`` and ``chtop go ...``; errors as the tasks report them."""
    try:
        if argv[0] == "shell-init":
            if len(argv) != 2:
                raise UsageError("usage: chtop shell-init bash|zsh")
            sys.stdout.write(shell_init(argv[1]))
            return 0
        return go(argv[1:])
    except ChtopError as exc:
        term.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
