"""The fleet's plain functions, which the ``host.*`` tasks and the ``--host`` hooks call.

A host is a place: what it has is asked of its own chtop (``worktree.list --json``,
``session.list --json`` in its toplevel) and read back through ``answers``; nothing of the
workspace model is implemented twice.  Read-only questions to several hosts run at once, each
bounded (an unreachable host is a line that says so, never a hang).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import ChtopError, Refused, UsageError
from ..core.fanout import fan_out
from ..core.gitprobe import rev
from ..core.gitrun import git
from ..core.places import check_worktree_name
from ..core.term import say, warn
from ..workspace.layout import Workspace
from . import answers, approvals, install
from .records import (
    LOCAL,
    Host,
    check_host,
    forget_host,
    get_host,
    load_hosts,
    record_host,
    record_worktree,
    record_worktrees,
    target_problem,
)
from .ssh import LONG_TIMEOUT, Unreachable, close_connection, run_on, ssh_argv


@dataclass
class HostState:
    """What one host answered (``error`` set instead when it did not, or answered nonsense)."""
    host: Host
    error: str | None = None
    version: str | None = None
    worktrees: list = field(default_factory=list)
    sessions: list = field(default_factory=list)
    pending: list = field(default_factory=list)

    @property
    def reachable(self) -> bool:
        return self.error is None


def local_version(ws: Workspace) -> str:
    return rev(ws.toplevel, "HEAD")


def ask_worktrees(host: Host, quiet: bool = False) -> list[dict]:
    out = install.remote_inv(host, "worktree.list", "--json", quiet=quiet).stdout
    return answers.parse_answer(out, answers.WORKTREES, f"host {host.name}: worktree.list")


def ask_sessions(host: Host, quiet: bool = False) -> list[dict]:
    out = install.remote_inv(host, "session.list", "--json", quiet=quiet).stdout
    return answers.parse_answer(out, answers.SESSIONS, f"host {host.name}: session.list")


def host_state(host: Host, what=("version", "worktrees", "sessions")) -> HostState:
    state = HostState(host)
    try:
        if "version" in what:
            state.version = install.remote_version(host)
        if "worktrees" in what:
            state.worktrees = ask_worktrees(host)
            record_worktrees(host.name, [wt["name"] for wt in state.worktrees])
        if "sessions" in what:
            state.sessions = ask_sessions(host)
        if "pending" in what:
            state.pending = approvals.ask_pending(host)
    except ChtopError as exc:          # Unreachable, BadAnswer, a failed command there
        line = str(exc).splitlines()[0]
        state.error = line if line.startswith(f"{host.name}: ") else f"{host.name}: {line}"
    return state


def silent_hosts(states: list[HostState]) -> list[str]:
    """One line for each host that did not answer (or answered nonsense): ``gpu1: did not answer ...``."""
    return [state.error for state in states if not state.reachable]


def say_silent(silent: list[str]) -> int:
    """A listing's closing words: each host that did not answer, on stderr; 1 when there was one
    (the listing is incomplete), else 0."""
    for line in silent:
        warn(line)
    return 1 if silent else 0


def every_host_state(what=("version", "worktrees", "sessions")) -> list[HostState]:
    return fan_out(lambda host: host_state(host, what), load_hosts().values())


# -- host.add / update / remove / list ----------------------------------------------------------

def add_host(ws: Workspace, name: str, target: str, group: str = "ch", python: str = "") -> list[str]:
    """Check the host, mirror this toplevel there, bootstrap it (unless ``python`` names one that
    already has chtop's deps), check its chtop answers, then record it.  Nothing is recorded when a
    step fails; running it again continues where it stopped."""
    if name in load_hosts():
        raise UsageError(f"host {name!r} is already recorded (update it: inv host.update --name {name}; "
                         f"or inv host.remove {name} first)")
    if target_problem(target):
        raise UsageError(f"bad ssh target {target!r}: {target_problem(target)}")
    group = group[2:] if group.startswith("~/") else group       # the login dir there is its home
    host = check_host(Host(name, target, f"{group.rstrip('/')}/{ws.toplevel.name}", python or "python3"))
    notes = install.refuse_missing_tools(host, install.probe_tools(host))
    install.push_checkouts(ws, host)
    if not python:
        host = Host(host.name, host.target, host.toplevel, install.run_bootstrap(host))
    install.init_there(host)
    notes += check_installed(ws, host)
    record_host(host)
    return notes + [f"added host {name}: chtop {local_version(ws)[:12]} in {target}:{host.toplevel} "
                    f"(python {host.python})"]


def check_installed(ws: Workspace, host: Host) -> list[str]:
    """The host runs this toplevel's commit and its chtop answers; else an error saying which."""
    there, here = install.remote_version(host), local_version(ws)
    if there != here:
        raise ChtopError(f"host {host.name}: its toplevel is at {there[:12]}, not this one's {here[:12]}")
    ask_worktrees(host)
    return []


def update_hosts(ws: Workspace, name: str = "", every: bool = False) -> tuple[list[str], int]:
    """Mirror this toplevel's commits to one host (or all), one at a time: (what each was and is,
    how many could not be updated; the others are updated all the same)."""
    if bool(name) == every:
        raise UsageError("host.update needs --name NAME or --all (not both)")
    hosts = list(load_hosts().values()) if every else [get_host(name)]
    lines, failed, here = [], 0, local_version(ws)
    for host in hosts:
        try:
            lines.append(update_host(ws, host, here))
        except ChtopError as exc:
            failed += 1
            lines.append(f"{host.name}: not updated: {exc}")
    return lines, failed


def update_host(ws: Workspace, host: Host, here: str) -> str:
    before = install.remote_version(host)
    behind = install.out_of_date(ws, host)        # a merge-up --host may have moved only a repo's branch
    if not behind:
        return f"{host.name}: up to date (chtop {here[:12]})"
    install.push_checkouts(ws, host)
    install.init_there(host)
    check_installed(ws, host)
    if before == here:
        return f"{host.name}: updated " + ", ".join(f"{m.remote} {m.branch} -> {m.tip[:12]}" for m in behind)
    return f"{host.name}: updated chtop {before[:12]} -> {here[:12]}"


def unlanded(state: HostState, landed: set[tuple[str, str]] = frozenset()) -> list[str]:
    """Each worktree repo there with commits not merged up, uncommitted changes, or that chtop could
    not read; ``landed``: (worktree, repo) whose branch there is in this toplevel's integration
    branch already (merged up here with ``git.merge-up --host``, before ``host.update``)."""
    out = []
    for wt in state.worktrees:
        if wt["problem"]:
            out.append(f"{wt['name']}: {wt['problem']}")
        for repo in wt["repos"]:
            ahead = repo["ahead"] and (wt["name"], repo["repo"]) not in landed
            why = [f"{repo['ahead']} commit(s) not merged up" if ahead else "",
                   "uncommitted changes" if repo["dirty"] else "", repo["problem"] or ""]
            if any(why):
                out.append(f"{wt['name']}/{repo['repo']}: " + ", ".join(w for w in why if w))
    return out


def landed_here(ws: Workspace | None, host: Host, state: HostState) -> set[tuple[str, str]]:
    """(worktree, repo) of the host's worktrees with commits there whose branch tip, as the host's
    toplevel names it, this toplevel's integration branch already holds."""
    asks = [(wt["name"], repo["repo"]) for wt in state.worktrees for repo in wt["repos"] if repo["ahead"]]
    if ws is None or not asks:
        return set()
    top = ws.for_root(ws.toplevel)
    where = {checkout.label: (checkout, mirror)
             for checkout, mirror in zip(top.checkouts(), install.mirrors(top, host), strict=True)}
    asks = [(wt, label) for wt, label in asks if label in where]
    tips = install.remote_branch_tips(host, [(where[label][1].remote, wt) for wt, label in asks]) if asks else []
    landed = set()
    for (wt, label), tip in zip(asks, tips, strict=True):
        checkout = where[label][0]
        if tip and git(top.main_checkout_dir(checkout), ["merge-base", "--is-ancestor", tip,
                                                         f"refs/heads/{top.integration_branch(checkout)}"],
                       check=False).ok:
            landed.add((wt, label))
    return landed


def remove_host(name: str, force: bool = False, ws: Workspace | None = None) -> str:
    """Forget a host (its files there stay); refused while its worktrees hold unlanded work (commits
    neither merged up there nor in ``ws``'s integration branches), or while it cannot be asked
    (``force``: forget it anyway)."""
    host = get_host(name)
    state = host_state(host, ("worktrees",))
    if not force:
        if not state.reachable:
            raise Refused(f"cannot check host {name} for unlanded work: {state.error}\n"
                          f"Forget it anyway (its worktrees there stay as they are): inv host.remove {name} --force")
        problems = unlanded(state, landed_here(ws, host, state))
        if problems:
            raise Refused(f"host {name} holds worktrees with unlanded work:\n  " + "\n  ".join(problems)
                          + f"\nMerge them up (or delete them there), then inv host.remove {name} again")
    forget_host(name)
    close_connection(host)
    return f"removed host {name} (nothing on {host.target} was changed; its toplevel {host.toplevel} stays there)"


PENDING_SHOWN = 5          # requests host.list names on a host's line; the rest are counted


def pending_words(items: list[dict]) -> str:
    """``pending: 2 (pypi.org:443 from dev, x.example:443 from (group))``: a host's ``net.pending``
    answer (checked: each spec a host:port, each worktree a worktree name), newest first."""
    if not items:
        return "pending: none"
    named = [f"{item['spec']} from {item['worktree'] or '(group)'}" for item in items[:PENDING_SHOWN]]
    more = [f"{len(items) - PENDING_SHOWN} more"] if len(items) > PENDING_SHOWN else []
    return f"pending: {len(items)} ({', '.join(named + more)})"


def host_lines(ws: Workspace) -> tuple[list[str], list[str]]:
    """``host.list``: each host, reachable or why not, its chtop version against this one's,
    its worktrees, sessions and pending requests (``inv net.allow DOMAIN --host HOST`` answers one);
    and the lines of the hosts that did not answer."""
    here = local_version(ws)
    lines = []
    states = every_host_state(("version", "worktrees", "sessions", "pending"))
    for state in states:
        host = state.host
        if not state.reachable:
            lines.append(f"{host.name:12} {host.target:20} {state.error.removeprefix(host.name + ': ')}")
            continue
        version = "same chtop as here" if state.version == here else \
            f"behind: chtop {state.version[:12]}, here {here[:12]} (inv host.update --name {host.name})"
        lines.append(f"{host.name:12} {host.target:20} reachable, {version}, "
                     f"{len(state.worktrees)} worktree(s), {len(state.sessions)} session(s), "
                     f"{pending_words(state.pending)}")
        for wt in state.worktrees:
            session = next((s for s in state.sessions if s["worktree"] == wt["name"]), None)
            lines.append(f"  {wt['name']:16} " + (f"session {session['state']}" if session else "no session"))
    return (lines or ["no hosts (add one: inv host.add NAME SSH_TARGET)"]), silent_hosts(states)


# -- the --host hooks of worktree.*, git.status, session.list -----------------------------------

def create_remote_worktree(ws: Workspace, host_name: str, name: str, no_venv: bool = False) -> int:
    """``worktree.create`` in the host's toplevel, which must run this toplevel's commit."""
    check_worktree_name(name)
    host = get_host(host_name)
    there, here = install.remote_version(host), local_version(ws)
    if there != here:
        raise Refused(f"host {host_name} runs chtop {there[:12]}, this toplevel {here[:12]}: "
                      f"inv host.update --name {host_name} first (its worktree would fork from another commit)")
    code = task_there(host_name, "worktree.create", "--name", name, *(["--no-venv"] if no_venv else []))
    if code == 0:
        record_worktree(host_name, name)
        say(f"created worktree {name} on host {host_name} ({host.target}:{worktree_dir_there(host, name)})")
    return code


def delete_remote_worktree(host_name: str, name: str, force: bool = False) -> int:
    """``worktree.delete`` by the host's own chtop, which checks and keeps as a delete here does
    (refused while its commits are not merged up, its branches kept even with ``force``)."""
    code = task_there(host_name, "worktree.delete", "--name", check_worktree_name(name), *(["--force"] if force else []))
    if code == 0:
        record_worktree(host_name, name, present=False)
    return code


def worktree_dir_there(host: Host, name: str) -> str:
    """A worktree's dir on the host: beside its toplevel, as here."""
    return f"{host.toplevel.rsplit('/', 1)[0]}/{name}" if "/" in host.toplevel else name


def task_command_there(host: Host, args: tuple[str, ...], worktree: str = "") -> tuple[list[str], str]:
    """(argv, cwd) of a chtop task run by the host's own chtop, in its toplevel or in ``worktree`` there."""
    cwd = worktree_dir_there(host, check_worktree_name(worktree)) if worktree else host.toplevel
    # in a worktree, tasks.py is looked for at its root only (as chtop's inv does), never in a dir below
    search = ["--search-root", cwd] if worktree else []
    return [host.python, "-m", "invoke", *search, *args], cwd


def task_there(host_name: str, *args: str, worktree: str = "") -> int:
    """A chtop task run by the host's own chtop, in its toplevel (or in ``worktree`` there), its
    output shown as it comes (inert); the task's exit status there, passed through."""
    host = get_host(host_name)
    argv, cwd = task_command_there(host, args, worktree)
    return run_on(host, argv, cwd, shown=True, check=False, timeout=LONG_TIMEOUT).returncode


def task_output_there(host: Host, *args: str, worktree: str = "", timeout: float | None = None):
    """The same task there, not echoed and its output kept (``runner.Result``: the host's words, for
    a caller that shows them inert, as the dashboard does); Unreachable when the host did not answer."""
    argv, cwd = task_command_there(host, args, worktree)
    return run_on(host, argv, cwd, check=False, quiet=True, timeout=timeout)


def must_answer(host_name: str) -> None:
    """Before a terminal is handed to ``ssh -t``: Unreachable, naming the host and what to check, when
    it does not answer (the call opens the shared connection the terminal's ssh then uses)."""
    host = get_host(host_name)
    try:
        run_on(host, ["true"])
    except Unreachable as exc:
        raise Unreachable(f"{exc}: check that the host is up and that `ssh {host.target} true` works without a "
                          "prompt (inv host.list shows every host's state)") from None


def terminal_task_argv_there(host_name: str, *args: str, worktree: str) -> list[str]:
    """``ssh -t`` into a task of the host's own chtop in its worktree (a sandbox's shell, an agent)."""
    host = get_host(host_name)
    argv, cwd = task_command_there(host, args, worktree)
    return ssh_argv(host, argv, cwd, tty=True)


def go_argv_there(host_name: str, name: str, agent: bool = False) -> list[str]:
    """``chtop go NAME --host HOST``: ``ssh -t`` into a login shell in the worktree there (with
    ``agent``: its agent session, as ``session.attach --host``)."""
    if agent:
        return attach_argv_there(host_name, name)
    host = get_host(host_name)
    return ssh_argv(host, ["sh", "-c", 'exec "${SHELL:-/bin/sh}" -l'],
                    worktree_dir_there(host, check_worktree_name(name)), tty=True)


def attach_argv_there(host_name: str, name: str) -> list[str]:
    """``ssh -t`` into the host's ``session.attach --name NAME`` (its tmux; detaching returns here)."""
    host = get_host(host_name)
    return ssh_argv(host, [host.python, "-m", "invoke", "session.attach", "--name", check_worktree_name(name)],
                    host.toplevel, tty=True)


def lines_per_worktree(render) -> tuple[list[str], list[str]]:
    """``render(host name, host, worktree)``'s lines for every worktree of every host that
    answered, and a line for each host that did not."""
    lines, states = [], every_host_state(("worktrees",))
    for state in states:
        for wt in state.worktrees:
            lines += render(state.host.name, state.host, wt)
    return lines, silent_hosts(states)


def worktree_lines() -> tuple[list[str], list[str]]:
    """``worktree.list``'s lines for every host's worktrees: ``HOST:NAME`` (the host column)."""
    from ..workspace.worktrees import describe_record

    def render(name, host, wt):
        head = f"{name}:{wt['name']}  ({host.target}:{wt['root']})" + (f"  {wt['problem']}" if wt["problem"] else "")
        return [head, *(describe_record(repo) for repo in wt["repos"])]

    return lines_per_worktree(render)


def status_lines() -> tuple[list[str], list[str]]:
    """``git.status``'s relations for every host's worktrees, as the toplevel shows its own."""
    def render(name, host, wt):
        said = [line for line in (relation_line(name, wt["name"], repo) for repo in wt["repos"]) if line]
        return said or [f"{name}:{wt['name']} is up to date with its integration branches"]

    return lines_per_worktree(render)


def relation_line(host: str, worktree: str, repo: dict) -> str:
    where = f"{host}:{worktree}/{repo['repo']}"
    if repo["problem"]:
        return f"{where}: {repo['problem']}"
    parts = []
    if repo["branch"] != worktree:
        parts.append(f"on branch {repo['branch'] or '(detached)'}, not {worktree}")
    if repo["ahead"] or repo["behind"]:
        parts.append(f"{repo['ahead']} commit(s) ahead of, {repo['behind']} behind {repo['integration']}")
    if repo["dirty"]:
        parts.append("uncommitted changes")
    return f"{where}: " + "; ".join(parts) if parts else ""


def session_states() -> list[HostState]:
    """Every host's sessions (``session.list``), asked at once, each within its bound."""
    return every_host_state(("sessions",))


__all__ = ["LOCAL", "Unreachable", "add_host", "update_hosts", "remove_host", "host_lines",
           "create_remote_worktree", "task_there", "task_output_there", "attach_argv_there", "go_argv_there", "worktree_lines", "status_lines",
           "session_states"]
