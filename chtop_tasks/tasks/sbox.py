"""sbox.*: the worktree's sandbox (rootless podman, proxy-only network)."""

from pathlib import Path

from ..argv import remainder_args
from ..runner import format_command
from ..taskdef import task
from ..term import say
from .common import lazy, reports_errors

places = lazy("places")
sandbox = lazy("sandbox")

_COMMON_HELP = {
    "dir": "sandbox this directory instead of the current worktree (policy: ~/.config/chtop/sandbox)",
    "network": "proxy (default: no network but the egress proxy), host (host network, warned), "
               "open (host network, no proxy: debugging only, warned)",
    "allow_self_edit": "let the agent WRITE chtop's own code in this worktree (tasks.py, chtop_tasks/, "
                       "sandbox/, ...), which you later run on the host: review before running it",
}


def _request(command, interactive, purpose, dir, network, allow_self_edit):  # noqa: A002
    target = places.target_for(Path.cwd(), Path(dir) if dir else None)
    return sandbox.LaunchRequest(target, command, interactive=interactive, purpose=purpose, network=network,
                                 allow_self_edit=allow_self_edit, cwd=Path.cwd(), replace_process=True)


@task(help={**_COMMON_HELP, "dry_run": "print the podman command line and exit: nothing is started or written",
            "host": "run it in the sandbox of worktree --name on this recorded host (the host's own sbox.run; "
                    "its output inert)",
            "name": "with --host: the worktree there"})
@reports_errors
def run(c, dir=None, network="proxy", allow_self_edit=False, dry_run=False, host="", name=""):  # noqa: A002
    """Run a command in this worktree's sandbox: inv sbox.run -- CMD [ARGS...]."""
    if host or name:
        return _run_there(host, name, network, dry_run, dir, allow_self_edit)
    request = _request(remainder_args(), False, "run", dir, network, allow_self_edit)
    if dry_run:
        plan = sandbox.plan_launch(request.target, request.command, interactive=False, purpose="run",
                                   network=network, allow_self_edit=allow_self_edit, cwd=request.cwd)
        sandbox.show_warnings(plan)
        say(format_command(plan.argv))
        return 0
    return sandbox.launch(request)


def _run_there(host, name, network, dry_run, dir, allow_self_edit) -> int:  # noqa: A002
    """``sbox.run`` by the host's own chtop in its worktree ``name``: the host is a place."""
    from ..errors import UsageError
    from ..hosts.fleet import task_there

    if not host or not name:
        raise UsageError("sbox.run --host HOST needs --name NAME (the worktree there), and --name needs --host "
                         "(here, run it in the worktree: cd ../NAME)")
    if dir or allow_self_edit:
        raise UsageError("sbox.run --host runs in the host's worktree --name: --dir and --allow-self-edit "
                         "work on the host itself")
    flags = [*(["--network", network] if network != "proxy" else []), *(["--dry-run"] if dry_run else [])]
    return task_there(host, "sbox.run", *flags, "--", *remainder_args(), worktree=name)


@task(help=_COMMON_HELP)
@reports_errors
def shell(c, dir=None, network="proxy", allow_self_edit=False):  # noqa: A002
    """Interactive bash in this worktree's sandbox (sees what the agent sees)."""
    from ..passthrough import stdin_is_terminal

    tty = stdin_is_terminal()          # no terminal: bash reads commands from stdin, no pty
    return sandbox.launch(_request(sandbox.shell_command(interactive=tty), tty, "shell", dir, network,
                                   allow_self_edit))


@task(help={"dir": "list the --dir sandboxes (group ~/.config/chtop) instead of this workspace's"})
@reports_errors
def ps(c, dir=False):  # noqa: A002
    """The running sandboxes of this group: name, worktree, purpose, network, status, limits."""
    rows = sandbox.list_sandboxes(places.group_dir_for(Path.cwd(), dir))
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


@task(help=_AGENT_HELP)
@reports_errors
def claude(c, dir=None, network="proxy", allow_self_edit=False, image=False):  # noqa: A002
    """Claude Code in this worktree's sandbox, no permission prompts: inv sbox.claude [-- ARGS]."""
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
