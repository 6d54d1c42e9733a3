"""A scripted local fake of OpenAI's Responses and Chat Completions APIs, for driving the real ``codex`` and
``kimi`` CLIs in tests.

Usage::

    from fake_openai import FakeOpenAI, text, shell

    api = FakeOpenAI([shell("ls"), text("done")])     # listens on 127.0.0.1:api.port
    # codex -c openai_base_url=<api.url>/v1 exec ...   with CODEX_API_KEY set
    api.requests            # every request: {"method", "path", "body" (parsed JSON or None), "headers"}
    api.conversations()     # the "input" list of each scripted POST .../responses
    api.close()

Each ``POST .../responses`` takes the next turn of the script; when it is used up the answer is the
text ``FakeOpenAI.DONE``.  A turn is ``text("...")`` (an assistant message) or ``shell("cmd")`` (a call
of codex's ``exec`` tool, whose JavaScript runs the command with ``tools.exec_command``; codex sends its
output in the next request).  The answer is a stream of server-sent events, the ones codex needs:
``response.created``, ``response.output_item.added``, ``response.output_text.delta`` (text),
``response.output_item.done`` and ``response.completed``.  A GET of ``.../responses`` (codex's
WebSocket) answers 426, so codex goes on over HTTPS at once; any other request gets ``200 {}`` (GET
``.../models``: an empty list).  ``FakeOpenAI(script, tls=certs)`` serves HTTPS with ``certs``
({"cert", "key"}).

Each ``POST .../chat/completions`` (kimi-cli, OpenAI-compatible) takes the next turn too, answered as a
stream of ``chat.completion.chunk`` events ending in ``data: [DONE]``: a text turn is one ``content``
delta, a shell turn one ``tool_calls`` delta calling the function ``FakeOpenAI(shell_tool=...)`` (kimi's
``Shell``) with ``{"command": ...}``.  ``conversations()`` holds their ``messages`` lists.
"""

from __future__ import annotations

import itertools
import json
import threading

from fake_http import JsonHandler, RecordingServer, Turn, text


def shell(command: str) -> Turn:
    """A model turn that runs ``command`` with codex's shell tool."""
    return Turn("shell", command)


def _item(turn: Turn, ident: str) -> dict:
    if turn.kind == "shell":
        source = (f'// @exec: {{"yield_time_ms": 240000}}\n'
                  f"const r = await tools.exec_command({{cmd: {json.dumps(turn.value)}, yield_time_ms: 240000}});\n"
                  "text(r);\n")
        return {"type": "custom_tool_call", "id": f"ctc_{ident}", "call_id": f"call_{ident}", "name": "exec",
                "input": source, "status": "completed"}
    return {"type": "message", "id": f"msg_{ident}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": turn.value, "annotations": []}]}


def sse_events(turn: Turn, ident: str):
    """The streaming events of one response, in the order the API sends them."""
    response = {"id": f"resp_{ident}", "object": "response", "status": "in_progress", "output": []}
    yield "response.created", {"type": "response.created", "response": response}
    item = _item(turn, ident)
    yield "response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                         "item": {**item, "content": []} if turn.kind == "text" else item}
    if turn.kind == "text":
        yield "response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                             "output_index": 0, "content_index": 0, "delta": turn.value}
    yield "response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    yield "response.completed", {"type": "response.completed",
                                 "response": {**response, "status": "completed", "output": [item], "usage": usage}}


def chat_chunks(turn: Turn, ident: str, model: str, shell_tool: str):
    """The streamed chunks of one chat completion, in the order the API sends them."""
    head = {"id": f"chatcmpl-{ident}", "object": "chat.completion.chunk", "created": 1700000000, "model": model}
    if turn.kind == "shell":
        call = {"index": 0, "id": f"call_{ident}", "type": "function",
                "function": {"name": shell_tool, "arguments": json.dumps({"command": turn.value})}}
        delta, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        delta, finish = {"role": "assistant", "content": turn.value}, "stop"
    yield {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


class FakeOpenAI(RecordingServer):
    """The fake API server: ``FakeOpenAI(script)``, then ``.url``; ``.close()`` at the end."""

    DONE = "The fake API has no more turns."

    def __init__(self, script: list[Turn] | None = None, host: str = "127.0.0.1", tls: dict | None = None,
                 shell_tool: str = "Shell"):
        self.script = list(script or [])
        self.shell_tool = shell_tool
        self.requests: list[dict] = []
        self.turns_served = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        server = self

        class Handler(JsonHandler):
            def do_HEAD(self):
                server._log(self.command, self.path, None, self.headers)
                self._json({})

            def do_GET(self):
                server._log(self.command, self.path, None, self.headers)
                if self.path.split("?")[0].endswith("/responses"):     # codex tries a WebSocket first
                    return self._json({"error": {"message": "no WebSocket here"}}, status=426)
                if self.path.split("?")[0].endswith("/models"):
                    return self._json({"object": "list", "data": [], "models": []})
                self._json({})

            def do_POST(self):
                body = self._body()
                server._log(self.command, self.path, body, self.headers)
                path = self.path.split("?")[0]
                if not path.endswith(("/responses", "/chat/completions")) or not isinstance(body, dict):
                    return self._json({})
                turn, ident = server._next_turn()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                if path.endswith("/responses"):
                    events = [f"event: {event}\ndata: {json.dumps(data)}\n\n" for event, data in sse_events(turn, ident)]
                else:
                    chunks = chat_chunks(turn, ident, str(body.get("model", "")), server.shell_tool)
                    events = [f"data: {json.dumps(data)}\n\n" for data in chunks] + ["data: [DONE]\n\n"]
                for event in events:
                    self.wfile.write(event.encode())
                    self.wfile.flush()
                self.close_connection = True

        self.serve(Handler, host, tls)

    def _next_turn(self) -> tuple[Turn, str]:
        with self._lock:
            turn = self.script[self.turns_served] if self.turns_served < len(self.script) else text(self.DONE)
            self.turns_served += 1
        return turn, f"{next(self._ids):06d}"

    def conversations(self) -> list[list]:
        """The ``input`` of every POST .../responses (the ``messages`` of a chat completion), in order."""
        with self._lock:
            return [r["body"].get("input", r["body"].get("messages")) for r in self.requests
                    if isinstance(r["body"], dict) and ("input" in r["body"] or "messages" in r["body"])]

