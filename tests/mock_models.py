"""Scripted stand-ins for the models' HTTP APIs, served on 127.0.0.1 by a thread.

    Call(name, args)    a step: the model calls this tool with these arguments
    Say(text)           a step: the model answers with text and ends its turn
    MockModel           one server speaking one dialect (`anthropic`, `responses`,
                        `gemini`); it records every request, and also stands as the
                        agents' HTTP(S) proxy so that a try at any other host is
                        refused and recorded (`strays`; a path here it does not
                        serve: `unserved`)
    texts()             every string in a request body, joined: what the model was told

The script is followed by the conversation itself, not by counting requests: the step
answered is the one after the tool results the request already holds, so a side request
(a title, a summary, a retry) never moves the script on. Past its end the model says
"done". A request that offers no tools (the agents' side calls) is answered "done" too.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import orjson

__all__ = ["Call", "MockModel", "Recorded", "Say", "texts"]


@dataclass(frozen=True, slots=True)
class Call:
    """The model calls tool `name` with `args` (text: a freeform tool's input, as Codex's
    apply_patch takes it)."""

    name: str
    args: dict[str, object] | str


@dataclass(frozen=True, slots=True)
class Say:
    """The model answers `text` and ends its turn."""

    text: str


Step = Call | Say


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request the model received: its path and parsed JSON body."""

    path: str
    body: dict[str, object]
    tools: bool = field(default=False)  # it offered tools: the agent's own loop

    def text(self) -> str:
        """Every string of the conversation (not of the tools' descriptions), one per
        line."""
        return texts([self.body.get(k) for k in _CONVERSATION])


_CONVERSATION = ("system", "messages", "instructions", "input", "systemInstruction", "contents")


def texts(value: object) -> str:
    """Every string inside a JSON value, joined by newlines (keys left out)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return "\n".join(found)


# -- how many tool results a conversation holds, per dialect ------------------------------


def _anthropic_results(body: dict[str, object]) -> int:
    count = 0
    for message in _list(body.get("messages")):
        if isinstance(message, dict):
            content = message.get("content")
            count += sum(1 for b in _list(content)
                         if isinstance(b, dict) and b.get("type") == "tool_result")  # fmt: skip
    return count


def _responses_results(body: dict[str, object]) -> int:
    kinds = [str(item.get("type", "")) for item in _list(body.get("input"))
             if isinstance(item, dict)]  # fmt: skip
    return sum(1 for kind in kinds if kind.endswith("_output"))


def _gemini_results(body: dict[str, object]) -> int:
    count = 0
    for content in _list(body.get("contents")):
        if isinstance(content, dict):
            count += sum(1 for p in _list(content.get("parts"))
                         if isinstance(p, dict) and "functionResponse" in p)  # fmt: skip
    return count


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


_RESULTS = {"anthropic": _anthropic_results, "responses": _responses_results,
            "gemini": _gemini_results}  # fmt: skip


def _offers_tools(dialect: str, body: dict[str, object]) -> bool:
    tools = body.get("tools")
    if dialect == "gemini":
        return any(isinstance(t, dict) and t.get("functionDeclarations") for t in _list(tools))
    return bool(_list(tools))


# -- the answers, per dialect -------------------------------------------------------------


def _sse(events: list[tuple[str | None, dict[str, object]]]) -> bytes:
    out = bytearray()
    for name, data in events:
        if name is not None:
            out += b"event: " + name.encode() + b"\n"
        out += b"data: " + orjson.dumps(data) + b"\n\n"
    return bytes(out)


def _anthropic(step: Step, body: dict[str, object]) -> tuple[bytes, str]:
    model = str(body.get("model", "claude-mock"))
    usage = {"input_tokens": 10, "output_tokens": 5,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}  # fmt: skip
    if isinstance(step, Call):
        block: dict[str, object] = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}",
                                    "name": step.name, "input": step.args}  # fmt: skip
        stop = "tool_use"
    else:
        block = {"type": "text", "text": step.text}
        stop = "end_turn"
    message: dict[str, object] = {
        "id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant",
        "model": model, "content": [block], "stop_reason": stop, "stop_sequence": None,
        "usage": usage,
    }  # fmt: skip
    if not body.get("stream"):
        return orjson.dumps(message), "application/json"
    start = dict(block, input={}) if isinstance(step, Call) else dict(block, text="")
    delta = ({"type": "input_json_delta", "partial_json": orjson.dumps(step.args).decode()}
             if isinstance(step, Call) else {"type": "text_delta", "text": step.text})  # fmt: skip
    events: list[tuple[str | None, dict[str, object]]] = [
        ("message_start", {"type": "message_start",
                           "message": dict(message, content=[], stop_reason=None)}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": start}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return _sse(events), "text/event-stream"


def _responses(step: Step, body: dict[str, object]) -> tuple[bytes, str]:
    rid = f"resp_{uuid.uuid4().hex[:20]}"
    if isinstance(step, Call):
        item: dict[str, object] = {
            "type": "function_call", "id": f"fc_{uuid.uuid4().hex[:20]}",
            "call_id": f"call_{uuid.uuid4().hex[:20]}", "name": step.name,
            "arguments": orjson.dumps(step.args).decode(), "status": "completed",
        }  # fmt: skip
        if isinstance(step.args, str):  # a freeform (custom) tool
            del item["arguments"]
            item.update(type="custom_tool_call", id=f"ctc_{uuid.uuid4().hex[:20]}",
                        input=step.args)  # fmt: skip
    else:
        text = {"type": "output_text", "text": step.text, "annotations": []}
        item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:20]}", "role": "assistant",
                "status": "completed", "content": [text]}  # fmt: skip
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 15}  # fmt: skip
    response = {"id": rid, "object": "response", "status": "completed", "output": [item],
                "model": str(body.get("model", "gpt-mock")), "usage": usage}  # fmt: skip
    events: list[tuple[str | None, dict[str, object]]] = [
        ("response.created", {"type": "response.created",
                              "response": dict(response, status="in_progress", output=[])}),
        ("response.output_item.added", {"type": "response.output_item.added",
                                        "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done",
                                       "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": response}),
    ]  # fmt: skip
    return _sse(events), "text/event-stream"


def _gemini(step: Step, body: dict[str, object], stream: bool) -> tuple[bytes, str]:
    part: dict[str, object] = (
        {"functionCall": {"name": step.name, "args": step.args}} if isinstance(step, Call)
        else {"text": step.text}
    )  # fmt: skip
    answer = {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP",
                        "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                          "totalTokenCount": 15},
        "modelVersion": "gemini-mock",
    }  # fmt: skip
    del body
    if stream:
        return _sse([(None, answer)]), "text/event-stream"
    return orjson.dumps(answer), "application/json"


class MockModel:
    """A scripted model API on 127.0.0.1 (`url`), in one dialect; a context manager."""

    def __init__(self, dialect: str, script: list[Step]) -> None:
        if dialect not in _RESULTS:
            msg = f"unknown dialect {dialect!r}"
            raise ValueError(msg)
        self.dialect = dialect
        self.script = list(script)
        self.requests: list[Recorded] = []
        self.strays: list[str] = []  # other hosts the agent tried to reach
        self.unserved: list[str] = []  # requests here for what the mock does not serve
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"mock-{dialect}", daemon=True)  # fmt: skip

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT"""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> MockModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def turns(self) -> list[Recorded]:
        """The requests of the agent's own loop (those that offered tools)."""
        with self._lock:
            return [r for r in self.requests if r.tools]

    def told(self) -> str:
        """Everything the agent's loop sent the model, one string per line."""
        return "\n".join(r.text() for r in self.turns())

    def answer(self, path: str, body: dict[str, object]) -> tuple[bytes, str]:
        """Record one request and build its answer."""
        tools = _offers_tools(self.dialect, body)
        with self._lock:
            self.requests.append(Recorded(path, body, tools))
        done = _RESULTS[self.dialect](body)
        step: Step = self.script[done] if tools and done < len(self.script) else Say("done")
        if self.dialect == "anthropic":
            return _anthropic(step, body)
        if self.dialect == "responses":
            return _responses(step, body)
        return _gemini(step, body, "streamGenerateContent" in path)

    def stray(self, what: str, *, here: bool = False) -> None:
        """Note a request for another host (or, `here`, one this mock does not serve)."""
        with self._lock:
            (self.unserved if here else self.strays).append(what)


def _handler(model: MockModel) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads `requests` and `strays`."""

        def _send(self, code: int, data: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_CONNECT(self) -> None:
            model.stray(f"CONNECT {self.path}")
            self._send(403, b"")

        def do_GET(self) -> None:
            target = urlsplit(self.path)
            if target.netloc:  # a plain-HTTP proxy request for another host
                model.stray(f"GET {self.path}")
                self._send(403, b"")
                return
            model.stray(f"GET {target.path}", here=True)
            self._send(404, b'{"error": {"message": "not served by the mock"}}')

        def do_HEAD(self) -> None:
            model.stray(f"HEAD {self.path}", here=True)
            self._send(404, b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            target = urlsplit(self.path)
            if target.netloc:
                model.stray(f"POST {self.path}")
                self._send(403, b"")
                return
            try:
                body = orjson.loads(raw) if raw else {}
            except orjson.JSONDecodeError:
                body = {}
            if not isinstance(body, dict) or not _served(model.dialect, target.path):
                model.stray(f"POST {target.path}", here=True)
                self._send(404, b'{"error": {"message": "not served by the mock"}}')
                return
            data, kind = model.answer(self.path, body)
            self._send(200, data, kind)

    return Handler


def _served(dialect: str, path: str) -> bool:
    if dialect == "anthropic":
        return path.endswith("/v1/messages")
    if dialect == "responses":
        return path.endswith("/responses")
    return ":generateContent" in path or ":streamGenerateContent" in path


@contextlib.contextmanager
def serving(dialect: str, script: list[Step]) -> Iterator[MockModel]:
    """A MockModel running for the `with` block."""
    with MockModel(dialect, script) as model:
        yield model
