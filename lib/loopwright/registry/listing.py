"""What a list of fleet loops reads of each row (`fleet ls`, the page), each column bounded."""

from __future__ import annotations

from loopwright.core.jsonhead import object_head

# A row's text is whatever its writer put there, so no column is read whole. The spec's first
# characters hold its limits and its goal's first line (json_text writes the goal after the
# limits); other text columns are read whole up to a size no loopwright writes. A column read
# in part is named in the row's ``cut``.
LIST_SPEC = 4000
LIST_TEXT = 16_384
TEXT_TYPES = ("text", "character varying", "character")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def listed_row(row: dict, decode) -> dict:
    """A row as a list read it (see LIST_SPEC), through ``decode`` (queue.loop_row): a column
    cut short is named in ``cut``; a JSON column cut short reads as None, except the spec, whose
    first members are kept (jsonhead.object_head)."""
    cut = [
        k for k, v in row.items() if isinstance(v, str) and len(v) > (LIST_SPEC if k == "spec" else LIST_TEXT)
    ]
    head = row.get("spec") if "spec" in cut else None
    out = decode({k: (v[:LIST_TEXT] if k in cut and k != "spec" else v) for k, v in row.items()})
    if head is not None:
        out["spec"] = object_head(head[:LIST_SPEC])
    out["cut"] = cut
    return out


class Listing:
    """The columns a list reads, each bounded: found once per registry from the table itself,
    so that a column added later is listed too."""

    def listed_columns(self) -> str:
        memo = self.__dict__.get("_listed_columns")
        if memo is None:
            memo = self.__dict__["_listed_columns"] = ", ".join(self._bounded(*c) for c in self._columns())
        return memo

    def _columns(self) -> list[tuple[str, bool]]:
        """(name, whether it may hold text) of each fleet_loops column."""
        with self.backend.tx() as tx:
            if self.backend.dialect == "postgres":
                rows = tx.rows(
                    "SELECT column_name AS name, data_type AS type FROM information_schema.columns "
                    "WHERE table_name = 'fleet_loops' AND table_schema = current_schema() "
                    "ORDER BY ordinal_position"
                )
                return [(r["name"], r["type"] in TEXT_TYPES) for r in rows]
            return [(r["name"], True) for r in tx.rows("PRAGMA table_info(fleet_loops)")]  # any column may

    def _bounded(self, name: str, text: bool) -> str:
        col = _quoted(name)
        if not text:
            return col
        size = (LIST_SPEC if name == "spec" else LIST_TEXT) + 1  # one more: to know it was cut
        if self.backend.dialect == "postgres":
            return f"substr({col}, 1, {size}) AS {col}"
        part = f"substr({col}, 1, {size})"
        return f"CASE WHEN typeof({col}) IN ('text', 'blob') THEN {part} ELSE {col} END AS {col}"
