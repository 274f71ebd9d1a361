"""A table for a terminal: a header and aligned columns, each cell one line with its control
characters shown as escapes. A column is a header and a function of the row, so that a
command adds one by adding one entry."""

from __future__ import annotations

from loopwright.core.termsafe import one_line

GAP = "  "


class Column:
    def __init__(self, header: str, cell, *, right: bool = False, width: int | None = None) -> None:
        self.header, self.cell, self.right, self.width = header, cell, right, width

    def text(self, row) -> str:
        """The cell, one line, cut to ``width`` (with an ellipsis) when the column has one."""
        value = one_line(self.cell(row))
        if self.width is not None and len(value) > self.width:
            value = value[: self.width - 1] + "…"
        return value


def lines(columns: list[Column], rows: list) -> list[str]:
    """The header and one line per row, each column as wide as its widest cell. The last
    column is not padded (no trailing spaces)."""
    cells = [[c.header for c in columns]] + [[c.text(r) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    out = []
    for line in cells:
        parts = []
        for i, (column, value) in enumerate(zip(columns, line)):
            last = i == len(columns) - 1
            if column.right:
                parts.append(value.rjust(widths[i]))
            else:
                parts.append(value if last else value.ljust(widths[i]))
        out.append(GAP.join(parts).rstrip())
    return out
