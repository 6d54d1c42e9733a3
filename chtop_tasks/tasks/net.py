"""net.*: the per-group egress proxy and its allow/deny lists."""

import json as json_
import os

from ..cli.taskdef import task
from ..core.argv import remainder_args
from ..core.errors import ChtopError
from ..core.term import say, warn
from .common import lazy, reports_errors

approvals = lazy("proxy.approvals")
control = lazy("proxy.control")
fleet = lazy("hosts.fleet")
report = lazy("proxy.report")
watching = lazy("proxy.watch")


@task
@reports_errors
def start(c):
    """Start the group's egress proxy (no-op when it runs); print its URL."""
    group, policy = report.locate()
    say(control.ensure_proxy(group, policy).url)


@task(help={"force": "stop it even while sandboxes run (their requests wait until the next net.start)"})
@reports_errors
def stop(c, force=False):
    """Stop the group's egress proxy (refused while sandboxes run, unless --force)."""
    group = report.locate()[0]
    served = control.sandboxes_served(group)
    if served and not force:
        raise ChtopError(f"{served} running sandbox(es) reach the network through this proxy; stopping "
                         f"it strands them until the next `net.start`.\n`net.restart` replaces it "
                         f"without stranding them; `net.stop --force` stops it anyway", 2)
    pid = control.stop_proxy(group)
    stranded = f" ({served} running sandbox(es) wait for the next net.start)" if served else ""
    say((f"stopped proxy pid {pid}" if pid else "proxy was not running") + stranded)


@task
@reports_errors
def restart(c):
    """Replace the group's proxy (new code, new settings); running sandboxes hand over to the new one."""
    group, policy = report.locate()
    old, endpoint = control.restart_proxy(group, policy)
    say(f"restarted proxy: pid {old} -> {endpoint.pid} {endpoint.url}" if old
        else f"proxy was not running; started pid {endpoint.pid} {endpoint.url}")


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
            "lines": "how many of the last lines to show (default 40)",
            "decisions": "show the approvals audit log (who allowed or denied what, when, in which scope)"})
@reports_errors
def log(c, follow=False, lines=40, decisions=False):
    """Show the proxy's human log (--follow to tail it; --decisions: the approvals audit log)."""
    if decisions:
        say(approvals.format_decisions(report.locate()[0], int(lines)))
        return 0
    path = report.log_path(report.locate()[0])
    if not path.exists():
        say(f"no log yet at {path}")
        return 1
    os.execvp("tail", ["tail", "-n", str(int(lines))] + (["-F"] if follow else []) + [str(path)])


def _add(kind, domain, worktree, private, once=False, ttl="", host=""):
    domains = ([domain] if domain else []) + remainder_args()
    if host:
        return _add_there(host, kind, domains, worktree, private, once, ttl)
    group, policy = report.locate()
    for line in approvals.decide_all(group, policy, domains, "cli", worktree=worktree or None, once=once,
                                     ttl=ttl or None, private=private, deny=(kind == "deny")):
        say(line)


def _add_there(host, kind, domains, worktree, private, once, ttl):
    """The same decision taken by the host's own ``net.allow``/``net.deny`` (its lists, its proxy);
    the domains after ``--``, so none is read there as a flag."""
    flags = (["--worktree", worktree] if worktree else []) + (["--private"] if private else []) + \
        (["--once"] if once else []) + (["--for", ttl] if ttl else [])
    return fleet.task_there(host, f"net.{kind}", *flags, "--", *domains)


_LIST_HELP = {
    "domain": "a domain (covers its subdomains) or *.domain; more after `--`",
    "worktree": "write the per-worktree layer of this worktree instead of the group list",
    "host": "decide on this recorded host (inv host.list): its own net.allow/net.deny, for its proxy",
}


@task(positional=["domain"], help=dict(
    _LIST_HELP,
    private="the domain may resolve to loopback/private/link-local addresses (intended)",
    once="let only the request(s) held now through (while net.watch or dash is attached); the next is blocked",
    for_="allow for a while only, e.g. 90s, 15m, 2h, 1d (with --worktree: that worktree only)"))
@reports_errors
def allow(c, domain=None, worktree="", private=False, once=False, for_="", host=""):
    """Allow DOMAIN (more after --): for the group, --worktree NAME only, --once, or --for 2h."""
    return _add("allow", domain, worktree, private, once, for_, host)


@task(positional=["domain"], help=dict(_LIST_HELP, private="(ignored for deny)"))
@reports_errors
def deny(c, domain=None, worktree="", private=False, host=""):
    """Deny DOMAIN (more after --) for good; deny wins, never prompted again."""
    if private:
        warn("--private is ignored for deny")
    return _add("deny", domain, worktree, False, host=host)


@task(help={"json": "print them as JSON (host, port, spec, worktree, count, last, held, waiting): "
                    "what another machine's dashboard reads"})
@reports_errors
def pending(c, json=False):
    """List blocked domains not yet allowed or denied, newest first (--json: as data)."""
    if json:
        print(json_.dumps(approvals.pending_requests(*report.locate())), flush=True)
        return 0
    say(approvals.format_pending(*report.locate()))


@task(help={"seconds": "how long to stay attached (default 30)"})
@reports_errors
def hold(c, seconds=30):
    """Hold blocked requests open for SECONDS without prompting (for answers from another machine)."""
    return watching.hold_open(report.locate()[0], float(seconds))


@task
@reports_errors
def watch(c):
    """Prompt for each blocked domain and hold the request until you answer."""
    group, policy = report.locate()
    if control.proxy_status(group):     # answers are written: the --dir group gets its own lists first
        policy = approvals.writable_policy_dir(group, policy)
    return watching.watch(group, policy)
