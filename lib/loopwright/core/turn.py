"""What one turn of the session did, as read from its transcript: the read position
persisted between Stops, and the increment a Stop hands the engine. Data only; the
reading is state.transcript's."""

from __future__ import annotations

from loopwright.core.record import REQUIRED, Record

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


class Cursor(Record):
    """How far the transcript has been read, persisted between ticks."""

    FIELDS = (
        ("path", None),
        ("offset", None),
        ("last_id", None),
        ("last_usage", {}),
        ("last_ts", None),
    )

    path: str | None
    offset: int | None
    last_id: str | None  # id of the last assistant message counted
    last_usage: dict[str, int]
    last_ts: str | None  # timestamp of the newest message counted

    @classmethod
    def from_dict(cls, d: dict | None) -> Cursor:
        d = d or {}
        return cls(
            d.get("path"),
            d.get("offset"),
            d.get("last_id"),
            dict(d.get("last_usage") or {}),
            d.get("last_ts"),
        )

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "offset": self.offset,
            "last_id": self.last_id,
            "last_usage": self.last_usage,
            "last_ts": self.last_ts,
        }


class Increment(Record):
    """What the new part of the transcript says."""

    FIELDS = (
        ("cursor", REQUIRED),
        ("used_tool", False),
        ("final_message_id", None),
        ("final_blocks", []),
        ("usage", {}),
        ("compacted", False),
        ("nonce_seen", False),
        ("recount_guard", None),
        ("bytes_read", 0),
        ("bad_lines", 0),
        ("notes", []),
        ("opened", False),
        ("lagging", False),
        ("requests", 0),
    )

    cursor: Cursor
    used_tool: bool
    final_message_id: str | None
    final_blocks: list[str]  # text blocks of the final message
    usage: dict[str, dict[str, int]]  # model -> field -> tokens
    compacted: bool
    nonce_seen: bool
    recount_guard: str | None  # after a rewind: messages at or before this time were counted already
    bytes_read: int
    bad_lines: int
    notes: list[str]
    opened: bool  # the transcript was there to read
    lagging: bool  # the read gave up before the turn's final message arrived
    requests: int  # model responses with usage (one per message id): what a turn's cost is made of

    @property
    def final_text(self) -> str | None:
        return "\n".join(self.final_blocks) if self.final_blocks else None
