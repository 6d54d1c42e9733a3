"""The ntfy HTTP client (standard library only): publish as JSON, subscribe to a topic's JSON stream.

The same requests go to ntfy.sh or a self-hosted server: ``POST <server>/``
with ``{"topic", "title", "message", "actions"}``, and ``GET
<server>/<topic>/json`` (one JSON object a line; ``open``, ``keepalive`` and
``message`` events).  The connection is the host's own: proxy variables in
the environment are ignored (never the agents' proxy), and a redirect is
refused (nothing goes anywhere but the configured server).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import quote

from ..core.errors import ChtopError
from .config import NotifyConfig

PUBLISH_TIMEOUT = 15.0
READ_TIMEOUT = 90.0          # ntfy sends a keepalive every 45 s by default
MAX_LINE = 65536


class NtfyError(ChtopError):
    """The server could not be reached, or refused the request."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"refusing a redirect to {newurl}", headers, fp)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())


def _headers(cfg: NotifyConfig, **extra: str) -> dict:
    headers = dict(extra)
    if cfg.token:
        headers["Authorization"] = f"Bearer {cfg.token}"
    return headers


def _open(req: urllib.request.Request, timeout: float):
    try:
        return _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode(errors="replace").strip() if exc.fp else ""
        raise NtfyError(f"{req.full_url}: {exc.code} {exc.reason}" + (f" ({detail})" if detail else "")) from None
    except (urllib.error.URLError, OSError) as exc:
        raise NtfyError(f"{req.full_url}: {getattr(exc, 'reason', exc)}") from None


def http_action(cfg: NotifyConfig, label: str, body: str, clear: bool = True) -> dict:
    """A button that, tapped, POSTs ``body`` to the reply topic (the phone makes the request);
    ``clear``: the tap also clears the notification."""
    action = {"action": "http", "label": label, "url": cfg.reply_url, "method": "POST", "body": body,
              "clear": clear}
    if cfg.token:
        action["headers"] = _headers(cfg)
    return action


def publish(cfg: NotifyConfig, title: str, message: str, actions: list[dict] | None = None,
            tags: list[str] | None = None, topic: str | None = None) -> dict:
    """Publish one message to ``topic`` (chtop's topic by default); the server's JSON answer."""
    msg = {"topic": topic or cfg.topic, "title": title, "message": message}
    if actions:
        msg["actions"] = actions
    if tags:
        msg["tags"] = tags
    req = urllib.request.Request(cfg.server + "/", data=json.dumps(msg).encode(), method="POST",
                                 headers=_headers(cfg, **{"Content-Type": "application/json"}))
    with _open(req, PUBLISH_TIMEOUT) as resp:
        try:
            return json.loads(resp.read(MAX_LINE) or b"{}")
        except ValueError:
            return {}


def subscribe(cfg: NotifyConfig, topic: str, since: str | None = None,
              read_timeout: float = READ_TIMEOUT) -> Iterator[dict]:
    """The topic's events as they come (``since``: a message id or ``all``/a time, to catch up first).
    Ends when the server closes the stream; NtfyError when it cannot be reached or goes silent."""
    url = f"{cfg.server}/{quote(topic)}/json" + (f"?since={quote(since)}" if since else "")
    req = urllib.request.Request(url, headers=_headers(cfg))
    with _open(req, read_timeout) as resp:
        while True:
            try:
                line = resp.readline(MAX_LINE)
            except (OSError, ValueError) as exc:      # a read timeout, a reset, a broken chunk
                raise NtfyError(f"{url}: {exc or 'no data'}") from None
            if not line:
                return
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event
