"""What every API handler of the monitor reads a request with: size-limited JSON bodies, whole
numbers from the query, and the one-line error an API call answers with."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from loopwright.core import jsoncodec

MAX_BODY = 64 * 1024


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def body_bytes(request: Request) -> bytes:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise ApiError(413, f"the body is larger than {MAX_BODY} bytes")
    return raw


async def body(request: Request) -> dict:
    raw = await body_bytes(request)
    try:
        data = jsoncodec.loads(raw or b"{}")
    except jsoncodec.DecodeError as exc:
        raise ApiError(400, f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


def count(value: str | None, what: str) -> int | None:
    """A whole number from the query string (None when absent)."""
    if value is None:
        return None
    if not value.isdigit() or len(value) > 15:
        raise ApiError(400, f"{what} must be a whole number")
    return int(value)
