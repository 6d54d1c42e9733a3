"""notify.*: phone notifications through ntfy (held requests and waiting agents)."""

from ..cli.taskdef import task
from ..core.errors import ChtopError
from ..core.term import say
from .common import lazy, reports_errors

config = lazy("notify.config")
report = lazy("notify.report")
net_report = lazy("proxy.report")


@task(auto_shortflags=False, help={"server": "the ntfy server (default https://ntfy.sh, or your own)",
            "token": "an access token, where the server needs one",
            "held_after": "seconds a held request waits for an answer at a terminal before it is pushed (0: at once)",
            "waiting_after": "seconds an agent waits for you before its session is pushed",
            "new": "new random topics and secret (the app must subscribe again; old buttons stop working)"})
@reports_errors
def setup(c, server="", token=None, held_after=None, waiting_after=None, new=False):
    """Set up phone notifications: random topics and secret; prints the topic to subscribe to."""
    cfg = config.setup(server or None, token, held_after, waiting_after, new=new)
    say(report.setup_text(cfg))


@task
@reports_errors
def status(c):
    """Show the phone notification settings (never the secret) and whether the notifier runs."""
    try:
        group = net_report.locate()[0]
    except ChtopError:
        group = None
    text, _ = report.status_text(config.load(), group)
    say(text)


@task
@reports_errors
def test(c):
    """Send a test message to the phone (exit 1 when the server cannot be reached)."""
    cfg = config.load()
    if cfg is None:
        raise ChtopError("phone notifications are not set up: run `inv notify.setup`", 3)
    report.send_test(cfg)
    say(f"sent a test message to {cfg.topic_url}")
