"""A client's error worded for a person: what Claude Code's stream-json says, bounded, on one
line, with credentials masked."""

from __future__ import annotations

from loopwright.core import clienterror as ce

# What Claude Code 2.1.197 prints (stream-json) for an HTTP 400 "prompt is too long".
TOO_LONG = {
    "type": "result",
    "subtype": "success",
    "is_error": True,
    "api_error_status": 400,
    "result": "Prompt is too long · the request is ~215000 tokens (limit 200000)",
}
ASSISTANT = {"type": "assistant", "error": "invalid_request", "message": {"content": []}}


def test_an_api_error_names_its_status_kind_and_text():
    kind = ce.api_error_kind(ASSISTANT)
    assert kind == "invalid_request"
    assert ce.from_result(TOO_LONG, kind) == (
        "API error 400 invalid_request: Prompt is too long · the request is ~215000 tokens (limit 200000)"
    )
    assert ce.exit_cause(1, "API error 401") == "the client exited (code 1): API error 401"
    assert ce.exit_cause(1, None) == "the client exited (code 1)"


def test_a_turn_that_went_well_is_no_error():
    assert ce.from_result({"type": "result", "subtype": "success", "is_error": False, "result": "ok"}) is None
    assert ce.from_result(None) is None
    assert ce.api_error_kind({"type": "assistant", "message": {"content": []}}) is None
    failed = {"type": "result", "subtype": "error_max_budget_usd", "is_error": False}
    assert ce.from_result(failed) == "the client's turn failed (error_max_budget_usd)"


def test_stderr_gives_its_last_lines_on_one_line():
    tail = "starting\n\nError: connect ECONNREFUSED\n  at x\n  at y\n"
    assert ce.from_stderr(tail) == "Error: connect ECONNREFUSED | at x | at y"
    assert ce.from_stderr("\n \n") is None


def test_credentials_are_masked_and_the_rest_kept():
    text = (
        "401 for https://bob:hunter2@proxy.example/v1 with x-api-key: sk-ant-api03-AbCdEf123456 "
        "Authorization: Bearer eyJhbGciOi.J9x token=ghp_0123456789abcdefABCDEF password=pw1 "
        "AKIAABCDEFGHIJKLMNOP; the request exceeds the token maximum, basic authentication failed"
    )
    out = ce.scrub(text)
    for secret in ("hunter2", "sk-ant", "eyJhbGciOi", "ghp_0123", "pw1", "AKIAABCD"):
        assert secret not in out, out
    assert "https://bob:[REDACTED]@proxy.example/v1" in out
    assert "the token maximum, basic authentication failed" in out


def test_a_cause_is_bounded_and_on_one_line():
    out = ce.scrub("x" * 2000 + "\n\x1b[31m")
    assert len(out) == ce.LIMIT and out.endswith("…") and "\n" not in out
    assert ce.scrub("a\nb\x1b[2J") == "a\\nb\\e[2J"


def test_a_notification_line_names_the_client_error_once():
    from loopwright.runner.notify import summary

    error = "API error 401 authentication_failed: Invalid API key"
    ended = {"event": "loop_ended", "loop": "x", "outcome": "STOPPED:stall_limit", "last_error": error}
    assert summary(dict(ended, reason=f"the client exited (code 1): {error}; already recovered 3 times")) == (
        f"loopwright: loop x ended STOPPED:stall_limit: the client exited (code 1): {error}; already "
        "recovered 3 times"
    )
    assert summary(dict(ended, reason="interrupted")).endswith(f": interrupted (last client error: {error})")
