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

import json
import threading

from fake_http import JsonHandler, RecordingServer
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


class FakeGemini(RecordingServer):
    """The fake API server: ``FakeGemini(script)``, then ``.url``; ``.close()`` at the end."""

    DONE = "The fake API has no more turns."

    def __init__(self, script: list[Turn] | None = None, host: str = "127.0.0.1", tls: dict | None = None):
        self.script = list(script or [])
        self.requests: list[dict] = []
        self.turns_served = 0
        self._lock = threading.Lock()
        server = self

        class Handler(JsonHandler):
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

        self.serve(Handler, host, tls)

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

