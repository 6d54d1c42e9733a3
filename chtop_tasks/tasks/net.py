"""net.*: the per-group egress proxy and its allow/deny lists."""

import os
import sys

from invoke import Exit, task

from ..errors import ChtopError
from ..proxy import commands, control
from ..proxy import watch as watching


def _fail(exc: ChtopError):
    raise Exit(str(exc), exc.exit_code)


@task
def start(c):
    """Start the group's egress proxy (no-op when it runs); print its URL."""
    try:
        group, policy = commands.locate()
        print(control.ensure_proxy(group, policy).url)
    except ChtopError as exc:
        _fail(exc)


@task
def stop(c):
    """Stop the group's egress proxy (running sandboxes lose the network)."""
    try:
        group, _ = commands.locate()
    except ChtopError as exc:
        _fail(exc)
    pid = control.stop_proxy(group)
    print(f"stopped proxy pid {pid}" if pid else "proxy was not running")


@task
def status(c):
    """Show pid, URL, socket, list sizes and request counts (exit 3 when stopped)."""
    try:
        text, running = commands.format_status(commands.locate()[0])
    except ChtopError as exc:
        _fail(exc)
    print(text)
    if not running:
        raise Exit(code=3)


@task
def url(c):
    """Print the proxy URL (http://127.0.0.1:PORT), stable across restarts."""
    try:
        group, _ = commands.locate()
        running = control.proxy_status(group)
        print(running.url if running else f"http://127.0.0.1:{control.proxy_port(group)}")
    except ChtopError as exc:
        _fail(exc)


@task(help={"follow": "keep printing new lines as they come (Ctrl-C to stop)",
            "lines": "how many of the last lines to show (default 40)"})
def log(c, follow=False, lines=40):
    """Show the proxy's human log (--follow to tail it)."""
    try:
        path = commands.log_path(commands.locate()[0])
    except ChtopError as exc:
        _fail(exc)
    if not path.exists():
        raise Exit(f"no log yet at {path}", 1)
    argv = ["tail", "-n", str(int(lines))] + (["-F"] if follow else []) + [str(path)]
    os.execvp("tail", argv)


def _remainder():
    try:
        from ..argv import remainder_args
    except ImportError:  # the lead's helper not there yet
        argv = sys.argv
        return argv[argv.index("--") + 1:] if "--" in argv else []
    return remainder_args()


def _add(kind, domain, worktree, private):
    specs = ([domain] if domain else []) + _remainder()
    if private:
        specs = [s + " private" for s in specs]
    try:
        _, policy = commands.locate()
        for line in commands.add_entries(policy, specs, kind, worktree or None):
            print(line)
    except ChtopError as exc:
        _fail(exc)


_LIST_HELP = {
    "domain": "a domain (covers its subdomains) or *.domain; more after `--`",
    "worktree": "write the per-worktree layer of this worktree instead of the group list",
}


@task(positional=["domain"], help=dict(_LIST_HELP, private=(
    "the domain may resolve to loopback/private/link-local addresses (intended)")))
def allow(c, domain=None, worktree="", private=False):
    """Allow DOMAIN (more after --) for every worktree, or --worktree NAME only."""
    _add("allow", domain, worktree, private)


@task(positional=["domain"], help=dict(_LIST_HELP, private="(ignored for deny)"))
def deny(c, domain=None, worktree="", private=False):
    """Deny DOMAIN (more after --) for good; deny wins, never prompted again."""
    _add("deny", domain, worktree, False)


@task
def pending(c):
    """List blocked domains not yet allowed or denied, newest first."""
    try:
        print(commands.format_pending(*commands.locate()))
    except ChtopError as exc:
        _fail(exc)


@task
def watch(c):
    """Prompt for each blocked domain and hold the request until you answer."""
    try:
        group, policy = commands.locate()
        raise Exit(code=watching.watch(group, policy))
    except ChtopError as exc:
        _fail(exc)
