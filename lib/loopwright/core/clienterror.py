"""Why a headless Claude Code client gave up, in one short line a person can act on.

Claude Code 2.1 reports an API error it gave up on in its stream-json output: the turn's
assistant message says what kind of error it was (``"error": "invalid_request"``) and the
``result`` event carries ``is_error``, the HTTP status (``api_error_status``) and the text it
shows a user ("Prompt is too long · …"). A client that died without a result leaves its last
stderr lines. Either is copied into a loop's journal, its progress, its report, the fleet's
row and timeline, and notifications, so it is bounded and scrubbed of credentials first: an
error can quote a header, a URL with a password or a key. Pure: the runner observes, this
words it.
"""

from __future__ import annotations

import re

from loopwright.core.termsafe import one_line

LIMIT = 500  # characters of a cause kept anywhere
STDERR_LINES = 3  # of a client that died without a result
MARK = "[REDACTED]"

# Credentials an error text can quote. Each pattern is linear (no nested repeats).
_SECRETS = (
    # Anthropic, OpenAI-style, GitHub, Slack and AWS key shapes.
    re.compile(r"\bsk-(?:ant-)?[A-Za-z0-9_-]{8,}"),
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,})"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{8,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # An Authorization header's credentials (a word with a digit or a base64 sign in it: "basic
    # authentication" is words, not a credential).
    re.compile(r"(?i)\b(bearer|basic)\s+(?=[A-Za-z._~-]*[0-9+/=])[A-Za-z0-9._~+/=-]{8,}"),
    # key=value and "key": "value" forms of a named secret.
    re.compile(
        r"(?i)\b((?:x-)?api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd"
        r"|authorization)(\"?\s*[:=]\s*\"?)[^\s\"',;&]+"
    ),
)
# user:password@ in a URL.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^/\s@]*@")


def scrub(text: object, limit: int = LIMIT) -> str:
    """``text`` on one line, credentials replaced by MARK, at most ``limit`` characters."""
    out = one_line(str(text).strip())
    out = _URL_PASSWORD.sub(rf"\1:{MARK}@", out)
    for pattern in _SECRETS:
        out = pattern.sub(_masked, out)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _masked(m: re.Match) -> str:
    """A named secret keeps its name (``api_key=[REDACTED]``); a bare key is all masked."""
    if m.lastindex == 2:
        return m.group(1) + m.group(2) + MARK
    if m.lastindex == 1:
        return f"{m.group(1)} {MARK}"
    return MARK


def api_error_kind(event: dict) -> str | None:
    """The kind of API error an assistant message of the stream reports (Claude Code puts it in
    the event's ``error``: invalid_request, authentication_failed, rate_limit, server_error…)."""
    if event.get("type") != "assistant":
        return None
    kind = event.get("error")
    if isinstance(kind, str) and kind.strip():
        return kind.strip()[:64]
    message = event.get("message")
    if event.get("isApiErrorMessage") or (isinstance(message, dict) and message.get("isApiErrorMessage")):
        return "api_error"  # older clients flagged the message only
    return None


def from_result(result: dict | None, kind: str | None = None) -> str | None:
    """The error a client's ``result`` event reports, worded; None for a turn that went well.
    ``kind`` is the last :func:`api_error_kind` the stream showed."""
    if not isinstance(result, dict) or not (result.get("is_error") or _failed_subtype(result)):
        return None
    status = result.get("api_error_status")
    text = result.get("result")
    text = text if isinstance(text, str) and text.strip() else ""
    if isinstance(status, int) and not isinstance(status, bool):
        head = f"API error {status}" + (f" {kind}" if kind else "")
    else:
        head = "the client's turn failed" + (f" ({result['subtype']})" if _failed_subtype(result) else "")
    return scrub(f"{head}: {text}" if text else head)


def _failed_subtype(result: dict) -> bool:
    subtype = result.get("subtype")
    return isinstance(subtype, str) and subtype.startswith("error")


def from_stderr(tail: str) -> str | None:
    """The last few lines a client printed on stderr, as one line; None when it printed none."""
    lines = [ln.strip() for ln in str(tail).splitlines() if ln.strip()]
    return scrub(" | ".join(lines[-STDERR_LINES:])) if lines else None


def exit_cause(code: int | None, error: str | None) -> str:
    """Why the runner brings a client back (or gives up on it): its exit and its error."""
    return f"the client exited (code {code})" + (f": {error}" if error else "")
