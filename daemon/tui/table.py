"""The live view's table kept in step with its rows: only what changed is touched.

A reload of 1,000 units where one changed updates that row's changed cells
(`DataTable.update_cell`), adds and removes the rows that came and went, and puts the
rows back in rank order (`DataTable.sort`) only when the order moved; every other row
keeps its cell objects. A change of most rows (a new filter) refills the table whole:
Textual's `remove_row` renumbers every row, so many removals cost more than a refill.

A cell is updated with `update_width` only when it is wider than its column: Textual
measures the whole column again for each updated cell narrower than the column (in
`_update_column_widths`, on idle), so 1,000 ages going from `9s` to `10s` that way
took 26 s; a column never narrows until the next refill.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

__all__ = ["COLUMNS", "Cells", "Sync"]

COLUMNS = ("format", "unit", "progress", "age", "resume", "worst finding", "claim")
Cells = tuple[str, tuple[str, ...]]  # (style, the cells' text)


class Sync:
    """Keeps one DataTable showing `apply`'s rows, keyed by the unit's key."""

    def __init__(self, table: DataTable[Text]) -> None:
        self.table = table
        self.columns = table.add_columns(*COLUMNS)
        self.drawn: dict[str, Cells] = {}  # what each row shows now
        self.order: list[str] = []  # the row keys, top to bottom
        self.touched = 0  # rows added or changed by the last apply (tests, bench)
        self.touched_total = 0  # and by every apply so far (a later apply may touch none)

    def apply(self, wanted: dict[str, Cells]) -> None:
        """Show `wanted` (row key -> its cells), in its order."""
        table = self.table
        gone = [key for key in self.drawn if key not in wanted]
        new = [key for key in wanted if key not in self.drawn]
        if len(gone) + len(new) > max(8, len(wanted) // 2):
            self.refill(wanted)
            return
        for key in gone:
            table.remove_row(key)
            del self.drawn[key]
        touched = 0
        for key, (style, cells) in wanted.items():
            old = self.drawn.get(key)
            if old == (style, cells):
                continue
            touched += 1
            if old is None:
                table.add_row(*(Text(c, style=style) for c in cells), key=key)
            else:
                for column, was, cell in zip(self.columns, old[1], cells, strict=True):
                    if old[0] != style or was != cell:
                        wider = cell_len(cell) > table.columns[column].content_width
                        table.update_cell(key, column, Text(cell, style=style),
                                          update_width=wider)  # fmt: skip
            self.drawn[key] = (style, cells)
        self.touched = touched
        self.touched_total += touched
        order = list(wanted)
        if order != self.order:
            place = {key: index for index, key in enumerate(order)}
            units = {id(table.get_cell(key, self.columns[1])): place[key] for key in order}
            # the key function sees the cells, not the row key: the unit cell's identity
            table.sort(self.columns[1], key=lambda cell: units[id(cell)])
            self.order = order

    def refill(self, wanted: dict[str, Cells]) -> None:
        """Clear the table and add every row of `wanted` (the first fill, a new filter)."""
        table = self.table
        table.clear()
        for key, (style, cells) in wanted.items():
            table.add_row(*(Text(c, style=style) for c in cells), key=key)
        self.drawn = dict(wanted)
        self.order = list(wanted)
        self.touched = len(wanted)
        self.touched_total += len(wanted)
