"""net.*: the per-group egress proxy and its allow/deny lists."""

import os

from invoke import task

from ..argv import remainder_args
from ..proxy import control, report
from ..proxy import watch as watching
from ..term import say
from .common import reports_errors


@task
@reports_errors
def start(c):
    """Start the group's egress proxy (no-op when it runs); print its URL."""
    group, policy = report.locate()
    say(control.ensure_proxy(group, policy).url)


@task
@reports_errors
def stop(c):
    """Stop the group's egress proxy (running sandboxes lose the network)."""
    pid = control.stop_proxy(report.locate()[0])
    say(f"stopped proxy pid {pid}" if pid else "proxy was not running")


@task
@reports_errors
def status(c):
    """Show pid, URL, socket, list sizes and request counts (exit 3 when stopped)."""
    text, running = report.format_status(report.locate()[0])
    say(text)
    return 0 if running else 3


@task
@reports_errors
def url(c):
    """Print the proxy URL (http://127.0.0.1:PORT), stable across restarts."""
    group, _ = report.locate()
    running = control.proxy_status(group)
    say(running.url if running else f"http://127.0.0.1:{control.proxy_port(group)}")


@task(help={"follow": "keep printing new lines as they come (Ctrl-C to stop)",
            "lines": "how many of the last lines to show (default 40)"})
@reports_errors
def log(c, follow=False, lines=40):
    """Show the proxy's human log (--follow to tail it)."""
    path = report.log_path(report.locate()[0])
    if not path.exists():
        say(f"no log yet at {path}")
        return 1
    os.execvp("tail", ["tail", "-n", str(int(lines))] + (["-F"] if follow else []) + [str(path)])


def _add(kind, domain, worktree, private):
    specs = ([domain] if domain else []) + remainder_args()
    if private:
        specs = [s + " private" for s in specs]
    group, policy = report.locate()
    for line in report.add_entries(policy, specs, kind, worktree or None, group):
        say(line)


_LIST_HELP = {
    "domain": "a domain (covers its subdomains) or *.domain; more after `--`",
    "worktree": "write the per-worktree layer of this worktree instead of the group list",
}


@task(positional=["domain"], help=dict(_LIST_HELP, private=(
    "the domain may resolve to loopback/private/link-local addresses (intended)")))
@reports_errors
def allow(c, domain=None, worktree="", private=False):
    """Allow DOMAIN (more after --) for every worktree, or --worktree NAME only."""
    _add("allow", domain, worktree, private)


@task(positional=["domain"], help=dict(_LIST_HELP, private="(ignored for deny)"))
@reports_errors
def deny(c, domain=None, worktree="", private=False):
    """Deny DOMAIN (more after --) for good; deny wins, never prompted again."""
    _add("deny", domain, worktree, False)


@task
@reports_errors
def pending(c):
    """List blocked domains not yet allowed or denied, newest first."""
    say(report.format_pending(*report.locate()))


@task
@reports_errors
def watch(c):
    """Prompt for each blocked domain and hold the request until you answer."""
    group, policy = report.locate()
    if control.proxy_status(group):     # answers are written: the --dir group gets its own lists first
        policy = report.writable_policy_dir(group, policy)
    return watching.watch(group, policy)
