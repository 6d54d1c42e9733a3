"""What ``inv notify.setup``, ``notify.status`` and ``notify.test`` say and do (the tasks stay thin)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from ..core import runner
from ..core.places import notify_config_path
from ..proxy import control
from . import config, ntfy


def qr_code(text: str) -> str | None:
    """A QR code of ``text`` drawn in the terminal by ``qrencode``, when it is installed (else None)."""
    if not shutil.which("qrencode"):
        return None
    result = runner.run(["qrencode", "-t", "UTF8", "-m", "1", text], check=False, quiet=True, timeout=10)
    return result.stdout if result.ok else None


def setup_text(cfg: config.NotifyConfig, path: Path | None = None) -> str:
    path = path or notify_config_path()
    lines = [f"wrote {path} (mode 0600; the secret stays on this host)",
             "", "subscribe to this topic in the ntfy app (server and topic):",
             f"  {cfg.topic_url}"]
    drawn = qr_code(cfg.topic_url)
    if drawn:
        lines += ["", drawn.rstrip()]
    lines += ["", f"held requests are pushed after {cfg.held_after:g}s without an answer at a terminal, "
              f"waiting agents after {cfg.waiting_after:g}s; buttons: {', '.join(cfg.buttons)}",
              "the notifier starts with each group's proxy (inv net.start, or any sandbox launch); "
              "`inv notify.test` sends a test message"]
    return "\n".join(lines)


def status_text(cfg: config.NotifyConfig | None, group_dir: Path | None) -> tuple[str, bool]:
    """The settings (never the secret), and whether this group's notifier runs."""
    if cfg is None:
        return f"phone notifications: off (no {notify_config_path()}; `inv notify.setup` makes one)", False
    running = group_dir is not None and control.notifier_running(group_dir)
    lines = [f"server:       {cfg.server}", f"topic:        {cfg.topic}  (subscribe to this one)",
             f"reply topic:  {cfg.reply_topic}", f"token:        {'set' if cfg.token else 'none'}",
             f"held after:   {cfg.held_after:g}s   waiting after: {cfg.waiting_after:g}s",
             f"buttons:      {', '.join(cfg.buttons)}",
             f"notifier:     {'running' if running else 'not running'}"
             + (f" for {group_dir}" if group_dir else "")]
    return "\n".join(lines), running


def send_test(cfg: config.NotifyConfig) -> dict:
    """A test message (no buttons) to chtop's topic."""
    return ntfy.publish(cfg, "chtop test", f"chtop on {socket.gethostname()} can reach you", tags=["wave"])
