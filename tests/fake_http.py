"""What the fake model APIs (fake_anthropic, fake_openai, fake_gemini) share: scripted turns, a JSON request
handler and a threaded server on a free port of 127.0.0.1 (HTTPS with test certs) that records every request."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    """One scripted model turn: ``kind`` is "text" or the fake's tool ("bash", "shell"), ``value`` its text
    or command."""

    kind: str
    value: str


def text(value: str) -> Turn:
    """A model turn that answers ``value`` and ends the turn."""
    return Turn("text", value)


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler that reads a JSON body and answers JSON."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def serving(handler, host: str = "127.0.0.1", tls: dict | None = None) -> http.server.ThreadingHTTPServer:
    """A threaded HTTP server on a free port of ``host``, over TLS with ``tls``' ``cert`` and ``key``
    when given, serving in a thread of its own; ``shutdown()`` ends it."""
    httpd = http.server.ThreadingHTTPServer((host, 0), handler)
    httpd.daemon_threads = True
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls["cert"], tls["key"])
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


class RecordingServer:
    """The server half of a fake API: ``serve(Handler)`` starts it; ``requests`` records each request
    (``_log``); ``url`` is where it listens; ``close()`` stops it.  ``__init__`` of a fake sets
    ``requests`` and ``_lock`` before serving."""

    requests: list[dict]
    _lock: threading.Lock

    def serve(self, handler: type[http.server.BaseHTTPRequestHandler], host: str, tls: dict | None) -> None:
        self.scheme = "https" if tls else "http"
        self.httpd = serving(handler, host, tls)
        self.port = self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def _log(self, method: str, path: str, body, headers=None) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "body": body,
                                  "headers": {k.lower(): v for k, v in (headers or {}).items()}})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
