"""agent.*: the agents' logins, held on the host (``inv agent.login``)."""

import os
from pathlib import Path

from ..cli.taskdef import task
from ..core.term import say
from .common import lazy, reports_errors

store = lazy("agents.login_store")
targets = lazy("workspace.targets")
passthrough = lazy("core.passthrough")


@task(name="login", help={
    "from_": "import claude's login file at this path (e.g. ~/.claude/.credentials.json); it is MOVED "
             "into the group's store (a second holder refreshing it would log the group out)",
    "status": "only say whether the group holds a login and when its access token expires (never a token)"})
@reports_errors
def login(c, from_="", status=False):
    """Log the group in to Claude once, on the host: the proxy holds the login and refreshes it."""
    group = targets.group_and_policy_for(Path.cwd())[0]
    if not status:
        if from_:
            store.import_login(group, Path(from_))
        else:
            store.login_with_cli(group, lambda env: passthrough.run_interactive(
                ["claude", "auth", "login"], env={**os.environ, **env}))
    say(store.status_text(group))
