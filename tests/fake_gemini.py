"""A scripted local fake of Google's Gemini API (generativelanguage), for driving the real ``gemini`` CLI in tests.

Usage::

    from fake_gemini import FakeGemini, shell, text

    api = FakeGemini([shell("ls"), text("done")])     # listens on 127.0.0.1:api.port
    # GOOGLE_GEMINI_BASE_URL=<api.url> GEMINI_API_KEY=... gemini -p ...
    api.requests            # every request: {"method", "path" (query included), "body", "headers"}
    api.conversations()     # the "contents" list of each scripted streamGenerateContent
    api.close()

Each ``POST .../models/M:streamGenerateContent`` takes the next turn of the script; when it is used up the
answer is the text ``FakeGemini.DONE``.  A turn is ``text("...")`` or ``shell("cmd")`` (a call of the
CLI's ``run_shell_command`` tool; the CLI sends its output in the next request).  The answer is one
server-sent event (``data: {...}``) holding a candidate whose finish reason is ``STOP``, with usage.
``POST ...:generateContent`` (the CLI's own side questions) answers a JSON text (what its model router
reads) without taking a turn, ``...:countTokens`` a count, any other request ``200 {}``.  ``FakeGemini(script, tls=certs)`` serves
HTTPS with ``certs`` ({"cert", "key"}).
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading

from fake_openai import Turn, shell, text

__all__ = ["FakeGemini", "shell", "text"]

SIDE_ANSWER = json.dumps({"complexity_reasoning": "a test", "complexity_score": 1})    # its model router asks
USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


def _part(turn: Turn) -> dict:
    if turn.kind == "shell":
        return {"functionCall": {"name": "run_shell_command", "args": {"command": turn.value}}}
    return {"text": turn.value}


def candidate_answer(turn: Turn, model: str) -> dict:
    """One generateContent answer (a whole one, or the single event of a stream) holding ``turn``."""
    return {"candidates": [{"content": {"role": "model", "parts": [_part(turn)]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": USAGE, "modelVersion": model}


class FakeGemini:
    """The fake API server: ``FakeGemini(script)``, then ``.url``; ``.close()`` at the end."""

    DONE = "The fake API has no more turns."

    def __init__(self, script: list[Turn] | None = None, host: str = "127.0.0.1", tls: dict | None = None):
        self.script = list(script or [])
        self.scheme = "https" if tls else "http"
        self.requests: list[dict] = []
        self.turns_served = 0
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
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
                self.wfile.write(data)

            def do_GET(self):
                server._log(self.command, self.path, None, self.headers)
                self._json({"models": []} if self.path.split("?")[0].endswith("/models") else {})

            def do_POST(self):
                body = self._body()
                server._log(self.command, self.path, body, self.headers)
                path = self.path.split("?")[0]
                model = path.rsplit("/", 1)[-1].split(":")[0]
                if path.endswith(":countTokens"):
                    return self._json({"totalTokens": 10})
                if path.endswith(":generateContent"):
                    return self._json(candidate_answer(text(SIDE_ANSWER), model))
                if not path.endswith(":streamGenerateContent"):
                    return self._json({})
                turn = server._next_turn()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(f"data: {json.dumps(candidate_answer(turn, model))}\r\n\r\n".encode())
                self.wfile.flush()
                self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls["cert"], tls["key"])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def _log(self, method: str, path: str, body, headers=None) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "body": body,
                                  "headers": {k.lower(): v for k, v in (headers or {}).items()}})

    def _next_turn(self) -> Turn:
        with self._lock:
            turn = self.script[self.turns_served] if self.turns_served < len(self.script) else text(self.DONE)
            self.turns_served += 1
        return turn

    def conversations(self) -> list[list]:
        """The ``contents`` of every POST ...:streamGenerateContent, in order."""
        with self._lock:
            return [r["body"]["contents"] for r in self.requests
                    if r["path"].split("?")[0].endswith(":streamGenerateContent") and isinstance(r["body"], dict)]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
