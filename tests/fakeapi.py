"""A scripted, offline Anthropic Messages-API server for end-to-end tests.

The real Claude Code CLI is pointed at this server with
``ANTHROPIC_BASE_URL=<server.url>``; every model call it makes is answered
from a script instead of a real model.  Standard library only.

Usage::

    from tests import fakeapi   # or: import fakeapi

    script = [
        fakeapi.bash("touch out.txt", text="Creating the file."),
        fakeapi.text("Done."),
    ]
    with fakeapi.ScriptedServer(script) as server:
        run_claude(..., server=server)          # see tests/claude_cli.py
        assert server.remaining == 0
        assert not server.exhausted_requests
        req = server.conversation_requests[1]
        assert "tool_result" in repr(req.body["messages"][-1])

Replies
-------
A script is a list whose items are consumed in order, one per *conversation*
request.  An item is one of:

* a :class:`Reply` built with :func:`text`, :func:`bash`, :func:`tool` or
  :func:`error` (an HTTP error; :func:`prompt_too_long` (400), :func:`unauthorized` (401)
  and :func:`overloaded` (529) are the usual ones);
* a plain ``str`` (shorthand for ``text(s)``);
* a callable ``f(request) -> Reply | str`` that receives the
  :class:`Request` being answered (``request.body`` is the parsed JSON,
  ``request.last_user_text()`` the text of the last user message), so a test
  can decide from what the client sent.

``usage`` (a dict with any of ``input_tokens``, ``output_tokens``,
``cache_creation_input_tokens``, ``cache_read_input_tokens``; missing keys get
:data:`DEFAULT_USAGE`) and ``model`` (default: the server's ``model``,
``"claude-sonnet-4-5"`` unless given) can be set per reply.  Every message
gets a unique ``msg_...`` id and every tool use a unique ``toolu_...`` id
(``Reply.message_id`` / ``Reply.tool_use_ids`` are filled in when the reply
is sent).

Helper vs conversation requests
-------------------------------
A ``POST /v1/messages`` whose body has no (or an empty) ``tools`` list is a
*helper* call the CLI makes on the side (session title, topic detection,
...).  Helper calls never consume the script; they are answered by
``helper`` (default: a short text) and recorded with ``is_helper=True``.

Judge requests
--------------
loopwright's completion judge (``--judge``) runs ``claude -p`` with no tools, so its
request is a helper call too. With ``judge=[...]`` (a second script) a helper request
whose system prompt contains ``judge_marker`` (default :data:`JUDGE_MARKER`, the text
``lib/loopwright/core/judge.py`` puts there) is answered from that script instead,
recorded with ``is_judge=True`` (``server.judge_requests``); ``judge_default`` answers
once it runs out (else the exhausted text, recorded as exhausted). A judge reply
without a model carries the model the request asked for.

When the script is exhausted the server answers ``default`` if one was
given; otherwise it answers the text :data:`EXHAUSTED_TEXT` and records the
request in ``server.exhausted_requests`` so tests can assert it never
happened.

Other endpoints
---------------
``POST /v1/messages/count_tokens`` answers a rough token count; ``HEAD`` /
``GET`` of any path answer ``200 {}`` (Claude Code 2.1.197 sends one
``HEAD /`` at start-up); a ``POST`` to any other path answers ``404`` with an
API-style error.  Every request is recorded in ``server.requests``; those
other than ``HEAD /``, ``/v1/messages`` and ``count_tokens`` are also
appended to ``server.unknown_requests`` (and written to stderr when
``log_unknown=True``).

Streaming requests (``"stream": true``, what the CLI sends) are answered with
SSE events ``message_start``, ``content_block_start``,
``content_block_delta`` (``text_delta`` / ``input_json_delta``),
``content_block_stop``, ``message_delta`` (``stop_reason`` and usage) and
``message_stop``; non-streaming requests get the whole message as JSON.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_USAGE",
    "EXHAUSTED_TEXT",
    "Reply",
    "Request",
    "ScriptedServer",
    "bash",
    "error",
    "last_user_text",
    "overloaded",
    "prompt_too_long",
    "text",
    "tool",
    "unauthorized",
]

DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_USAGE = {
    "input_tokens": 13,
    "output_tokens": 7,
    "cache_creation_input_tokens": 5,
    "cache_read_input_tokens": 3,
}
EXHAUSTED_TEXT = "[fakeapi: script exhausted]"
JUDGE_MARKER = "loopwright completion judge"
HELPER_TEXT = "fakeapi helper reply"

_CHUNK = 24  # characters per streamed delta


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


# --------------------------------------------------------------------------
# Replies
# --------------------------------------------------------------------------


@dataclass
class Reply:
    """One assistant message (or an HTTP error) the server will send.

    ``content`` holds API content blocks without ids; tool-use ids are
    generated when the reply is rendered.
    """

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None  # None: "tool_use" if any tool use else "end_turn"
    usage: dict[str, int] | None = None
    model: str | None = None
    # error replies
    status: int = 200
    error_type: str | None = None
    error_message: str | None = None
    delay: float = 0.0  # seconds the server waits before answering (a hung response)
    release: Any = None  # a threading.Event: with it, the answer waits for it (at most ``delay``)
    # filled in when sent
    message_id: str | None = None
    tool_use_ids: list[str] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        return self.status != 200

    def effective_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        if any(b.get("type") == "tool_use" for b in self.content):
            return "tool_use"
        return "end_turn"

    def effective_usage(self) -> dict[str, int]:
        usage = dict(DEFAULT_USAGE)
        usage.update(self.usage or {})
        return usage


def text(s: str, usage: dict[str, int] | None = None, model: str | None = None) -> Reply:
    """A plain text answer ending the turn (stop_reason ``end_turn``)."""
    return Reply(content=[{"type": "text", "text": s}], usage=usage, model=model)


def tool(
    name: str,
    input: dict[str, Any],
    text: str | None = None,
    usage: dict[str, int] | None = None,
    model: str | None = None,
) -> Reply:
    """A ``tool_use`` of tool ``name`` (optionally preceded by a text block)."""
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    content.append({"type": "tool_use", "name": name, "input": dict(input)})
    return Reply(content=content, usage=usage, model=model)


def bash(
    command: str,
    text: str | None = None,
    usage: dict[str, int] | None = None,
    model: str | None = None,
    description: str = "Run a command",
) -> Reply:
    """A ``tool_use`` of the CLI's ``Bash`` tool; the CLI really runs it."""
    return tool(
        "Bash",
        {"command": command, "description": description},
        text=text,
        usage=usage,
        model=model,
    )


def error(status: int = 529, error_type: str = "overloaded_error", message: str = "Overloaded") -> Reply:
    """An HTTP error answer (note: the CLI retries 429/5xx with back-off)."""
    return Reply(status=status, error_type=error_type, error_message=message)


def prompt_too_long(tokens: int = 215_000, limit: int = 200_000) -> Reply:
    """HTTP 400 ``invalid_request_error`` "prompt is too long", as the API answers a request
    over the model's context window (the CLI does not retry it)."""
    return error(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {limit} maximum")


def overloaded() -> Reply:
    """HTTP 529 ``overloaded_error`` (the CLI retries it unless CLAUDE_CODE_MAX_RETRIES=0)."""
    return error(529, "overloaded_error", "Overloaded")


def unauthorized() -> Reply:
    """HTTP 401 ``authentication_error``: a key the API does not take."""
    return error(401, "authentication_error", "invalid x-api-key")


def hang(seconds: float, then: Reply | None = None, release: threading.Event | None = None) -> Reply:
    """``then`` (a plain text by default), sent only after ``seconds``: a response that hangs.
    With ``release``, it is sent as soon as the test sets that event (``seconds`` at most);
    without, when the server stops (the client is gone by then: a hang for the whole test)."""
    reply = then or text("(after a long wait)")
    reply.delay = seconds
    reply.release = release
    return reply


ReplyLike = Union[Reply, str, Callable[["Request"], Union[Reply, str]]]


def _as_reply(item: ReplyLike, request: Request) -> Reply:
    if callable(item) and not isinstance(item, Reply):
        item = item(request)
    if isinstance(item, str):
        item = text(item)
    if not isinstance(item, Reply):
        raise TypeError(f"fakeapi: script item produced {type(item).__name__}, expected Reply or str")
    # a fresh copy so a Reply object can be reused in a script
    return Reply(
        content=json.loads(json.dumps(item.content)),
        stop_reason=item.stop_reason,
        usage=item.usage,
        model=item.model,
        status=item.status,
        error_type=item.error_type,
        error_message=item.error_message,
        delay=item.delay,
        release=item.release,
    )


# --------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "text":
        return block.get("text", "")
    if block.get("type") == "tool_result":
        inner = block.get("content", "")
        if isinstance(inner, str):
            return inner
        if isinstance(inner, list):
            return "\n".join(_block_text(b) for b in inner)
    return ""


def last_user_text(body: dict[str, Any]) -> str:
    """Text of the last ``user`` message of a request body.

    Text blocks and ``tool_result`` contents are joined with newlines (this
    includes any ``<system-reminder>`` blocks the CLI adds).
    """
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        parts = [_block_text(b) for b in content or []]
        return "\n".join(p for p in parts if p)
    return ""


@dataclass
class Request:
    """One HTTP request received by the server."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or None
    is_helper: bool = False
    is_judge: bool = False
    exhausted: bool = False
    reply: Reply | None = None

    @property
    def is_conversation(self) -> bool:
        return self.path_only == "/v1/messages" and not self.is_helper

    @property
    def path_only(self) -> str:
        return self.path.split("?", 1)[0]

    def last_user_text(self) -> str:
        return last_user_text(self.body or {})

    def system_text(self) -> str:
        system = (self.body or {}).get("system")
        if isinstance(system, list):
            return "\n".join(_block_text(b) for b in system)
        return system if isinstance(system, str) else ""

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name") for t in (self.body or {}).get("tools") or []]


# --------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _chunks(s: str) -> Iterable[str]:
    if not s:
        yield ""
        return
    for i in range(0, len(s), _CHUNK):
        yield s[i : i + _CHUNK]


class ScriptedServer:
    """Context manager running the scripted API on ``127.0.0.1:<free port>``.

    Attributes: ``url``, ``requests`` (every :class:`Request`, in order),
    ``conversation_requests``, ``helper_requests``, ``exhausted_requests``,
    ``unknown_requests``, ``remaining`` (script items not yet used).
    """

    def __init__(
        self,
        replies: Iterable[ReplyLike] = (),
        default: ReplyLike | None = None,
        *,
        helper: ReplyLike | None = None,
        model: str = DEFAULT_MODEL,
        log_unknown: bool = True,
        judge: Iterable[ReplyLike] | None = None,
        judge_default: ReplyLike | None = None,
        judge_marker: str = JUDGE_MARKER,
    ) -> None:
        self._script: list[ReplyLike] = list(replies)
        self._next = 0
        self._judge: list[ReplyLike] | None = None if judge is None else list(judge)
        self._judge_next = 0
        self.judge_default = judge_default
        self.judge_marker = judge_marker
        self.default = default
        self.helper = helper
        self.model = model
        self.log_unknown = log_unknown
        self.requests: list[Request] = []
        self.unknown_requests: list[Request] = []
        self._lock = threading.Lock()
        # Set when the server stops: a hung reply waits on it, so a "never answered" response
        # is never answered while the test runs, however slow the machine, and no handler
        # thread outlives the server by its delay.
        self._closing = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script bookkeeping -------------------------------------------------

    def add(self, *replies: ReplyLike) -> None:
        """Append replies to the script (also allowed while running)."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script) - self._next

    @property
    def judge_remaining(self) -> int:
        with self._lock:
            return len(self._judge or []) - self._judge_next

    @property
    def judge_requests(self) -> list[Request]:
        return [r for r in list(self.requests) if r.is_judge]

    @property
    def conversation_requests(self) -> list[Request]:
        return [r for r in list(self.requests) if r.is_conversation]

    @property
    def helper_requests(self) -> list[Request]:
        return [r for r in list(self.requests) if r.is_helper]

    @property
    def exhausted_requests(self) -> list[Request]:
        return [r for r in list(self.requests) if r.exhausted]

    @staticmethod
    def last_user_text(request: Request | dict[str, Any]) -> str:
        body = request.body if isinstance(request, Request) else request
        return last_user_text(body or {})

    def _choose(self, request: Request) -> Reply:
        """Pick (and consume) the reply for a /v1/messages request."""
        with self._lock:
            if request.is_helper and self._judge is not None and self.judge_marker in request.system_text():
                request.is_judge = True
                item = self._next_judge(request)
            elif request.is_helper:
                item: ReplyLike = self.helper if self.helper is not None else text(HELPER_TEXT)
            elif self._next < len(self._script):
                item = self._script[self._next]
                self._next += 1
            elif self.default is not None:
                item = self.default
            else:
                request.exhausted = True
                item = text(EXHAUSTED_TEXT)
        # callables run outside the lock so they may call server methods
        reply = _as_reply(item, request)
        if request.is_judge and reply.model is None:
            reply.model = (request.body or {}).get("model")
        return reply

    def _next_judge(self, request: Request) -> ReplyLike:
        """The judge script's next reply (call with the lock held)."""
        if self._judge_next < len(self._judge):
            self._judge_next += 1
            return self._judge[self._judge_next - 1]
        if self.judge_default is not None:
            return self.judge_default
        request.exhausted = True
        return text(EXHAUSTED_TEXT)

    # -- lifecycle ----------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ScriptedServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fakeapi", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- rendering ----------------------------------------------------------

    def _finish(self, reply: Reply) -> dict[str, Any]:
        """Assign ids; return the full (non-streaming) message."""
        reply.message_id = _new_id("msg_")
        content = []
        for block in reply.content:
            block = dict(block)
            if block.get("type") == "tool_use":
                block["id"] = _new_id("toolu_")
                reply.tool_use_ids.append(block["id"])
            content.append(block)
        return {
            "id": reply.message_id,
            "type": "message",
            "role": "assistant",
            "model": reply.model or self.model,
            "content": content,
            "stop_reason": reply.effective_stop_reason(),
            "stop_sequence": None,
            "usage": reply.effective_usage(),
        }

    def _sse_events(self, message: dict[str, Any]) -> Iterable[bytes]:
        usage = message["usage"]
        start_usage = dict(usage, output_tokens=1)
        yield _sse(
            "message_start",
            {
                "type": "message_start",
                "message": dict(message, content=[], stop_reason=None, usage=start_usage),
            },
        )
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                yield _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                for piece in _chunks(block["text"]):
                    yield _sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
            elif block["type"] == "tool_use":
                yield _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
                for piece in _chunks(json.dumps(block["input"])):
                    yield _sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
            else:
                raise ValueError(f"fakeapi: unsupported block type {block['type']!r}")
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": usage,
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence default logging
        pass

    # -- helpers --------------------------------------------------------------

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _record(self, body: Any) -> Request:
        req = Request(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        self.owner.requests.append(req)
        return req

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", _new_id("req_"))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _unknown(self, req: Request, status: int, payload: Any) -> None:
        self.owner.unknown_requests.append(req)
        if self.owner.log_unknown:
            print(f"[fakeapi] unhandled {req.method} {req.path}", file=sys.stderr)
        self._send_json(status, payload)

    # -- verbs ----------------------------------------------------------------

    def do_HEAD(self) -> None:
        # The CLI probes ``HEAD /`` once at start-up (connectivity check).
        req = self._record(None)
        if req.path_only == "/":
            self._send_json(200, {})
        else:
            self._unknown(req, 200, {})

    def do_GET(self) -> None:
        self._unknown(self._record(None), 200, {})

    def do_POST(self) -> None:
        body = self._read_body()
        req = self._record(body)
        path = req.path_only
        if path == "/v1/messages/count_tokens":
            size = len(json.dumps(body or {}))
            self._send_json(200, {"input_tokens": max(1, size // 4)})
            return
        if path != "/v1/messages" or not isinstance(body, dict):
            self._unknown(
                req,
                404,
                {"type": "error", "error": {"type": "not_found_error", "message": f"fakeapi: {path}"}},
            )
            return
        req.is_helper = not body.get("tools")
        reply = self.owner._choose(req)
        req.reply = reply
        if reply.release is not None:
            reply.release.wait(reply.delay)
        elif reply.delay:
            self.owner._closing.wait(reply.delay)
        if reply.is_error:
            self._send_json(
                reply.status,
                {"type": "error", "error": {"type": reply.error_type, "message": reply.error_message}},
            )
            return
        message = self.owner._finish(reply)
        if not body.get("stream"):
            self._send_json(200, message)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", _new_id("req_"))
        self.end_headers()
        self.close_connection = True
        try:
            for event in self.owner._sse_events(message):
                self.wfile.write(event)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
