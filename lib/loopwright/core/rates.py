"""Dollar cost from token usage: the per-model rate table and how model names match it.

Rates are US dollars per million tokens for input, output, cache writes and cache
reads. A model name matches the table entry that is the longest prefix of its
normalised name (lower case; a trailing ``-YYYYMMDD`` date, ``-latest`` or a
``[1m]``-style context tag removed), so ``claude-sonnet-4-5-20250929`` prices as
``claude-sonnet-4-5``. A model with no match is reported, and priced at the
highest rate in the table, so that an unknown model can never make a dollar
ceiling look further away than it is.

A project's CLAUDE.md may lay its own rows over the table, but a committed CLAUDE.md
is not the user's word: a row priced below the built-in row its model name matches
(a row of zeros for ``claude-sonnet-4-5`` would switch the dollar ceiling off) counts
at the built-in rates, field by field, unless the user confirmed the project's rates
when starting the loop (``--accept-project-rates``, which records the rows it saw in
loop.json as ``accepted_rates``). Higher rates, and rows for models the built-in
table does not know, count as written.
"""

from __future__ import annotations

from loopwright.core.record import REQUIRED, Record

FIELDS = ("input", "output", "cache_write", "cache_read")
USAGE_TO_RATE = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}

BUILT_IN_SOURCE = "built-in default"
CLAUDE_MD_SOURCE = "CLAUDE.md Loop Cost Rates"
MAX_RATE = 1000.0  # dollars per million tokens: far above any list price, far below overflow

# Published list prices (USD per million tokens; cache writes at the 5-minute rate).
BUILT_IN: dict[str, dict[str, float]] = {
    "claude-opus-4-5": {"input": 5.0, "output": 25.0, "cache_write": 6.25, "cache_read": 0.50},
    "claude-opus-4-1": {"input": 15.0, "output": 75.0, "cache_write": 18.75, "cache_read": 1.50},
    "claude-opus-4": {"input": 15.0, "output": 75.0, "cache_write": 18.75, "cache_read": 1.50},
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.30},
    "claude-sonnet-4": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.30},
    "claude-3-7-sonnet": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.30},
    "claude-3-5-sonnet": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.30},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_write": 1.25, "cache_read": 0.10},
    "claude-3-5-haiku": {"input": 0.80, "output": 4.0, "cache_write": 1.0, "cache_read": 0.08},
    "claude-3-opus": {"input": 15.0, "output": 75.0, "cache_write": 18.75, "cache_read": 1.50},
    "claude-3-haiku": {"input": 0.25, "output": 1.25, "cache_write": 0.30, "cache_read": 0.03},
}


def _without_suffix(name: str) -> str:
    """``name`` less one trailing ``[...]`` (a context-size tag), ``-YYYYMMDD`` or ``-latest``."""
    if name.endswith("]"):
        start = name.find("[", name.rfind("]", 0, len(name) - 1) + 1, len(name) - 1)
        if start >= 0:
            return name[:start]
    if len(name) >= 9 and name[-9] == "-" and name[-8:].isdecimal():
        return name[:-9]
    if name.endswith("-latest"):
        return name[: -len("-latest")]
    return name


def normalise_model(name: str) -> str:
    name = name.strip().lower()
    while True:
        stripped = _without_suffix(name)
        if stripped == name:
            return name
        name = stripped


class RateTable(Record):
    FIELDS = (
        ("rates", REQUIRED),
        ("source", REQUIRED),
    )

    rates: dict[str, dict[str, float]]
    source: str

    def match(self, model: str) -> str | None:
        norm = normalise_model(model)
        best = None
        for key in self.rates:
            k = normalise_model(key)
            if (norm == k or norm.startswith((k + "-", k + "@"))) and (
                best is None or len(k) > len(normalise_model(best))
            ):
                best = key
        return best

    def highest(self) -> dict[str, float]:
        return {f: max(r[f] for r in self.rates.values()) for f in FIELDS}

    def cost(self, tokens_by_model: dict[str, dict[str, int]]) -> tuple[float, list[str]]:
        """Dollars for cumulative usage per model, and the models that matched no entry."""
        total, unknown = 0.0, []
        for model, usage in tokens_by_model.items():
            key = self.match(model)
            if key is None:
                unknown.append(model)
                rate = self.highest()
            else:
                rate = self.rates[key]
            for ufield, rfield in USAGE_TO_RATE.items():
                total += usage.get(ufield, 0) * rate[rfield] / 1_000_000
        return total, sorted(unknown)


def lowered(overrides: dict[str, dict[str, float]] | None) -> dict[str, dict]:
    """The project rows priced below the built-in row their model name matches:
    ``{row: {"built_in": key, "fields": [the fields that are lower]}}``."""
    built_in = RateTable(BUILT_IN, BUILT_IN_SOURCE)
    out: dict[str, dict] = {}
    for key, row in (overrides or {}).items():
        base = built_in.match(key)
        low = [f for f in FIELDS if base is not None and row[f] < BUILT_IN[base][f]]
        if low:
            out[key] = {"built_in": base, "fields": low}
    return out


def confirmed(key: str, row: dict[str, float], accepted: dict | None) -> bool:
    """Whether the user confirmed this very row when starting the loop."""
    return isinstance(accepted, dict) and accepted.get(key) == row


def table(
    overrides: dict[str, dict[str, float]] | None, accepted: dict[str, dict[str, float]] | None = None
) -> RateTable:
    """The built-in table with a project's CLAUDE.md rows laid over it. A row below the
    built-in one its model matches is raised to it, field by field, unless ``accepted``
    (loop.json's ``accepted_rates``) holds that row as it is."""
    if not overrides:
        return RateTable(dict(BUILT_IN), BUILT_IN_SOURCE)
    merged = dict(BUILT_IN)
    kept: list[str] = []
    for key, row in overrides.items():
        low = lowered({key: row}).get(key)
        if low is not None and not confirmed(key, row, accepted):
            base = BUILT_IN[low["built_in"]]
            row = {f: max(row[f], base[f]) for f in FIELDS}
            kept.append(key)
        merged[key] = row
    return RateTable(merged, CLAUDE_MD_SOURCE + (f" ({kept_note(kept)})" if kept else ""))


def kept_note(keys: list[str]) -> str:
    """Which project rows count at the built-in rates, for ``rate_table_source``."""
    shown = ", ".join(k[:64] for k in keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    return f"built-in rates count where they are higher, for {shown}"
