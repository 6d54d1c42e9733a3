"""sbox.*: the worktree's sandbox (rootless podman, proxy-only network)."""

from pathlib import Path

from ..cli.taskdef import task
from ..core.argv import remainder_args
from ..core.runner import format_command
from ..core.term import say
from .common import lazy, reports_errors

targets = lazy("workspace.targets")
sandbox = lazy("sandbox")

_COMMON_HELP = {
    "dir": "sandbox this directory instead of the current worktree (policy: ~/.config/chtop/sandbox)",
    "network": "proxy (default: no network but the egress proxy), host (host network, warned), "
               "open (host network, no proxy: debugging only, warned)",
    "allow_self_edit": "let the agent WRITE chtop's own code in this worktree (tasks.py, chtop_tasks/, "
                       "sandbox/, ...), which you later run on the host: review before running it",
}


def _request(command, interactive, purpose, dir, network, allow_self_edit):  # noqa: A002
    target = targets.target_for(Path.cwd(), Path(dir) if dir else None)
    return sandbox.LaunchRequest(target, command, interactive=interactive, purpose=purpose, network=network,
                                 allow_self_edit=allow_self_edit, cwd=Path.cwd(), replace_process=True)


_WHERE_HELP = {
    "name": "the worktree whose sandbox to use, here or on the host chtop recorded for it (default: this one)",
    "host": "the host worktree --name is on (default: where chtop recorded it; 'local': this machine); "
            "there, the host's own sbox task runs (its output inert)",
}


def _remote_place(task_name: str, name: str, host: str, dir, allow_self_edit):  # noqa: A002
    """The host worktree --name/--host name (None: here, and when --name names one here, the current
    dir is now that worktree, as if the task ran in it)."""
    import os

    from ..core.errors import UsageError
    from ..hosts.where import named_place

    place = named_place(name, host, task_name)
    if place is None:
        return None
    if dir or (allow_self_edit and place.remote):
        raise UsageError(f"{task_name} --name runs in that worktree: --dir (and, on a host, --allow-self-edit) "
                         "work in the worktree itself")
    if not place.remote:
        os.chdir(place.root)
        return None
    return place


def _exec_there(place, *args: str) -> int:
    """A terminal task of the host's own chtop in the worktree there (``ssh -t``); never returns."""
    import os
    import sys

    from ..core.runner import echo
    from ..hosts.fleet import must_answer, terminal_task_argv_there

    must_answer(place.host.name)
    argv = terminal_task_argv_there(place.host.name, *args, worktree=place.name)
    echo(argv)
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 0  # not reached


def _network_flags(network: str) -> list[str]:
    return ["--network", network] if network != "proxy" else []


@task(help={**_COMMON_HELP, "dry_run": "print the podman command line and exit: nothing is started or written",
            **_WHERE_HELP})
@reports_errors
def run(c, dir=None, network="proxy", allow_self_edit=False, dry_run=False, host="", name=""):  # noqa: A002
    """Run a command in this worktree's sandbox: inv sbox.run -- CMD [ARGS...]."""
    place = _remote_place("sbox.run", name, host, dir, allow_self_edit)
    if place:
        from ..hosts.fleet import task_there

        return task_there(place.host.name, "sbox.run", *_network_flags(network), *(["--dry-run"] if dry_run else []),
                          "--", *remainder_args(), worktree=place.name)
    request = _request(remainder_args(), False, "run", dir, network, allow_self_edit)
    if dry_run:
        plan = sandbox.plan_launch(request.target, request.command, interactive=False, purpose="run",
                                   network=network, allow_self_edit=allow_self_edit, cwd=request.cwd)
        sandbox.show_warnings(plan)
        say(format_command(plan.argv))
        return 0
    return sandbox.launch(request)


@task(help={**_COMMON_HELP, **_WHERE_HELP})
@reports_errors
def shell(c, dir=None, network="proxy", allow_self_edit=False, host="", name=""):  # noqa: A002
    """Interactive bash in this worktree's sandbox (sees what the agent sees)."""
    from ..core.passthrough import stdin_is_terminal

    place = _remote_place("sbox.shell", name, host, dir, allow_self_edit)
    if place:
        return _exec_there(place, "sbox.shell", *_network_flags(network))

    tty = stdin_is_terminal()          # no terminal: bash reads commands from stdin, no pty
    return sandbox.launch(_request(sandbox.shell_command(interactive=tty), tty, "shell", dir, network,
                                   allow_self_edit))


@task(help={"dir": "list the --dir sandboxes (group ~/.config/chtop) instead of this workspace's"})
@reports_errors
def ps(c, dir=False):  # noqa: A002
    """The running sandboxes of this group: name, worktree, purpose, network, status, limits."""
    rows = sandbox.list_sandboxes(targets.group_dir_for(Path.cwd(), dir))
    if not rows:
        say("no sandboxes running")
        return 0
    for line in sandbox.format_sandbox_table(rows):
        say(line)


# -- agents: claude, agent, build-image (logic in chtop_tasks/agents/) --

_AGENT_HELP = {
    **_COMMON_HELP,
    "image": "run from the local image (inv sbox.build-image; rebuilt first when its inputs changed) "
             "instead of the host's own /usr and /etc",
}


def _launch(name, dir, image, network, allow_self_edit):  # noqa: A002
    from ..agents.registry import launch

    return launch(name, remainder_args(), Path.cwd(), dir=Path(dir) if dir else None, image=image,
                  network=network, allow_self_edit=allow_self_edit)


@task(help={**_AGENT_HELP, **_WHERE_HELP})
@reports_errors
def claude(c, dir=None, network="proxy", allow_self_edit=False, image=False, host="", name=""):  # noqa: A002
    """Claude Code in this worktree's sandbox, no permission prompts: inv sbox.claude [-- ARGS]."""
    place = _remote_place("sbox.claude", name, host, dir, allow_self_edit)
    if place:
        return _exec_there(place, "sbox.claude", *_network_flags(network), *(["--image"] if image else []),
                           "--", *remainder_args())
    return _launch("claude", dir, image, network, allow_self_edit)


@task(help={**_AGENT_HELP, "agent": "the agent CLI: claude, kimi, codex, gemini or one you registered "
                                    "(~/.config/chtop/agents.toml); without it, list them"})
@reports_errors
def agent(c, agent=None, dir=None, network="proxy", allow_self_edit=False, image=False):  # noqa: A002
    """Any registered agent CLI in the sandbox: inv sbox.agent --agent kimi [-- ARGS]."""
    if not agent:
        from ..agents.registry import describe, load_registry

        say(describe(load_registry()))
        return 0
    return _launch(agent, dir, image, network, allow_self_edit)


@task(help={"force": "rebuild even when the inputs have not changed"})
@reports_errors
def build_image(c, force=False):
    """Build the local sandbox image from containers/ (a no-op when it is up to date)."""
    from ..agents.image import ensure_image

    ensure_image(force=force)
