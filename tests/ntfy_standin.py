"""A local stand-in of ntfy's HTTP API, as a real HTTP server on 127.0.0.1 (in a thread).

- ``POST /`` with a JSON body (``topic``, ``title``, ``message``, ``actions``...): publish;
- ``POST /<topic>`` with a plain body: publish that text (what a phone's http action does);
- ``GET /<topic>/json[?since=ID|UNIXTIME|all]``: a stream of JSON lines, ``open`` first, then
  the cached messages after ``since``, then new ones as they come, ``keepalive`` meanwhile.

``stop()`` and ``start()`` take the server away and bring it back on the same port (its
message cache kept, as ntfy's is); ``token`` makes it answer 401 without ``Bearer <token>``.
"""

from __future__ import annotations

import http.server
import json
import secrets
import threading
import time
import urllib.request
from urllib.parse import parse_qs, urlsplit

KEEPALIVE = 1.0


class Broker:
    """The topics' messages (kept across restarts) and who listens now."""

    def __init__(self):
        self.cond = threading.Condition()
        self.messages: list[dict] = []
        self.requests: list[tuple[str, str, dict]] = []      # method, path, headers
        self.subscribers: dict[str, int] = {}

    def publish(self, topic: str, fields: dict) -> dict:
        with self.cond:
            msg = {"id": secrets.token_hex(6), "time": int(time.time()), "event": "message", "topic": topic}
            msg.update({k: v for k, v in fields.items() if k != "topic"})
            msg.setdefault("message", "")
            self.messages.append(msg)
            self.cond.notify_all()
            return msg

    def after(self, topic: str, since: str) -> list[dict]:
        """The cached messages of ``topic`` after message id ``since``, from unix time ``since``, or all."""
        mine = [m for m in self.messages if m["topic"] == topic]
        ids = [m["id"] for m in mine]
        if since in ids:
            return mine[ids.index(since) + 1:]
        if since.isdigit():
            return [m for m in mine if m["time"] >= int(since)]
        return mine if since == "all" else []


def _handler(standin: NtfyStandin):
    broker = standin.broker

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):
            pass

        def _authorized(self) -> bool:
            broker.requests.append((self.command, self.path, dict(self.headers)))
            if standin.token and self.headers.get("Authorization") != f"Bearer {standin.token}":
                self._answer(401, {"code": 40101, "error": "unauthorized"})
                return False
            return True

        def _answer(self, code: int, body: dict) -> None:
            data = (json.dumps(body) + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            if not self._authorized():
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = urlsplit(self.path).path.strip("/")
            if not path:
                fields = json.loads(body)
                if len(fields.get("actions") or []) > 3:
                    self._answer(400, {"code": 40018, "error": "invalid request: too many actions"})
                    return
                self._answer(200, broker.publish(fields["topic"], fields))
            else:
                self._answer(200, broker.publish(path, {"message": body.decode(errors="replace")}))

        def do_GET(self):
            if not self._authorized():
                return
            parts = urlsplit(self.path)
            topic, _, kind = parts.path.strip("/").partition("/")
            if kind != "json":
                self._answer(404, {"error": "not found"})
                return
            since = parse_qs(parts.query).get("since", [None])[0]
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            with broker.cond:
                broker.subscribers[topic] = broker.subscribers.get(topic, 0) + 1
                broker.cond.notify_all()
            try:
                self._line({"id": secrets.token_hex(6), "time": int(time.time()), "event": "open", "topic": topic})
                with broker.cond:
                    pending = broker.after(topic, since) if since else []
                    cursor = len(broker.messages)
                while not standin.stopped.is_set():
                    for msg in pending:
                        self._line(msg)
                    if not pending:
                        self._line({"id": secrets.token_hex(6), "time": int(time.time()), "event": "keepalive",
                                    "topic": topic})
                    with broker.cond:
                        if cursor == len(broker.messages):
                            broker.cond.wait(KEEPALIVE)
                        pending = [m for m in broker.messages[cursor:] if m["topic"] == topic]
                        cursor = len(broker.messages)
            except OSError:
                pass
            finally:
                with broker.cond:
                    broker.subscribers[topic] -= 1
                    broker.cond.notify_all()

        def _line(self, obj: dict) -> None:
            self.wfile.write((json.dumps(obj) + "\n").encode())
            self.wfile.flush()

    return Handler


class NtfyStandin:
    def __init__(self, token: str = ""):
        self.token = token
        self.broker = Broker()
        self.stopped = threading.Event()
        self.port = 0
        self.httpd = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.stopped.clear()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Take the server away: no new connections, open streams cut."""
        self.stopped.set()
        with self.broker.cond:
            self.broker.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- what tests look at ------------------------------------------------------------------------
    def published(self, topic: str) -> list[dict]:
        with self.broker.cond:
            return [m for m in self.broker.messages if m["topic"] == topic]

    def wait_published(self, topic: str, count: int = 1, timeout: float = 20.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        with self.broker.cond:
            while len([m for m in self.broker.messages if m["topic"] == topic]) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{count} message(s) on {topic} expected; have {self.broker.messages}"
                self.broker.cond.wait(left)
            return [m for m in self.broker.messages if m["topic"] == topic]

    def wait_subscribed(self, topic: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self.broker.cond:
            while self.broker.subscribers.get(topic, 0) < 1:
                left = deadline - time.monotonic()
                assert left > 0, f"nobody subscribed to {topic}"
                self.broker.cond.wait(left)

    def tap(self, action: dict) -> None:
        """What the phone does when a button is tapped: the action's HTTP request, as it says."""
        req = urllib.request.Request(action["url"], data=action.get("body", "").encode(),
                                     method=action.get("method", "POST"), headers=action.get("headers", {}))
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10).read()
