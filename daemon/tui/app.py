"""The live view: a table of every unit, what needs a person first, redrawn when the
daemon says something changed (storyd.tui.follow), never on a timer.

Enter opens a unit (storyd.tui.screens.Detail), `r` previews its reconcile, `a` applies
it after a confirmation, `/` filters by text, `?` lists the keys, `q` quits (exit 0).
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Input, Static

from storyd.api.topview import Row, age, label, rows
from storyd.tui.follow import Follower

__all__ = ["TopApp", "run"]

_STYLE = {"error": "bold red", "warning": "yellow", "working": "", "done": "green"}
_DEBOUNCE = 0.1  # seconds: a burst of events is one reload


class TopApp(App[int]):
    """`storyd top`."""

    TITLE = "storyd top"
    AUTO_FOCUS = "DataTable"
    CSS = """
    #status { height: 1; background: $boost; }
    #sessions { height: auto; max-height: 5; color: $text-muted; }
    #filter { display: none; }
    #filter.shown { display: block; }
    DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit_top", "quit"),
        Binding("r", "reconcile(False)", "reconcile preview"),
        Binding("a", "reconcile(True)", "apply"),
        Binding("slash", "filter", "filter"),
        Binding("question_mark", "keys", "keys"),
    ]

    def __init__(
        self,
        workspaces: list[str] | None = None,
        socket: str | None = None,
        in_flight: bool = False,
        follow: bool = True,
    ) -> None:
        super().__init__()
        self.workspaces = workspaces
        self.socket = socket
        self.in_flight = in_flight
        self.rows: list[Row] = []
        self.shown: list[Row] = []
        self.link = "connecting"
        self.source = ""
        self.pattern = ""
        self.reloads = 0  # how many times the units were read (tests, bench)
        self._pending = False
        self._follower = (
            Follower(
                socket,
                workspaces[0] if workspaces and len(workspaces) == 1 else None,
                lambda event: self.call_from_thread(self.changed),
                lambda text: self.call_from_thread(self.set_link, text),
            )
            if follow
            else None
        )

    def compose(self) -> ComposeResult:
        yield Static("storyd top: reading…", id="status")
        yield Static("", id="sessions")
        yield Input(placeholder="filter: unit, format, workspace or resume point", id="filter")
        table: DataTable[str] = DataTable(cursor_type="row", zebra_stripes=False)
        table.add_columns("format", "unit", "progress", "age", "resume", "worst finding")
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.reload()
        if self._follower is not None:
            self._follower.start()

    def on_unmount(self) -> None:
        if self._follower is not None:
            self._follower.stop()

    # reading -------------------------------------------------------------------------

    def changed(self) -> None:
        """Something changed: read again shortly (once for a burst)."""
        if not self._pending:
            self._pending = True
            self.set_timer(_DEBOUNCE, self.reload)

    def reload(self) -> None:
        """Read the units on a thread; show them when read."""
        self._pending = False
        self.run_worker(self._read, thread=True, exclusive=True, group="read")

    def _read(self) -> None:
        from storyd.api.units import units

        try:
            found = units(self.workspaces, in_flight=self.in_flight, socket=self.socket)
        except Exception as exc:  # shown, not raised: the view stays up
            self.call_from_thread(self.set_link, f"cannot read the units: {exc}")
            return
        made = rows(found.units)
        from storyd.api.sessionlist import sessions_in_flight

        mine = {row.key[0] for row in made}
        agents = [e for e in sessions_in_flight() if e.get("workspace") in mine]
        self.call_from_thread(self.show, made, found.source, agents)

    def show(
        self, made: list[Row], source: str, agents: list[dict[str, object]] | None = None
    ) -> None:
        """Fill the table with `made` (the cursor stays on the same unit), and the agents'
        sessions on those workspaces above it."""
        import time

        from storyd.api.topview import session_line

        self.reloads += 1
        self.rows, self.source = made, source
        if agents is not None:
            now, many = time.time(), len({r.key[0] for r in made}) > 1
            lines = [session_line(e, now, many, made) for e in agents[:5]]
            self.query_one("#sessions", Static).update(Text("\n".join(lines)))
        self.redraw()

    def redraw(self) -> None:
        import time

        table = self.query_one(DataTable)
        keep = self.current()
        pattern = self.pattern.lower()
        self.shown = [r for r in self.rows if not pattern or pattern in _haystack(r)]
        many = len({r.key[0] for r in self.rows}) > 1
        now = time.time()
        table.clear()
        for row in self.shown:
            style = _STYLE[row.rank]
            cells = (
                str(row.unit.get("format")), label(row, many), row.progress(),
                age(now - row.changed) if row.changed else "-", row.point(), row.finding(),
            )  # fmt: skip
            table.add_row(*(Text(c, style=style) for c in cells), key="\0".join(row.key))
        if keep is not None:
            for index, row in enumerate(self.shown):
                if row.key == keep.key:
                    table.move_cursor(row=index)
                    break
        self.status()

    def set_link(self, text: str) -> None:
        """The link to the daemon changed (`live`, `daemon gone: reconnecting`, …)."""
        self.link = text
        self.status()

    def status(self) -> None:
        counts = {name: 0 for name in ("error", "warning", "working", "done")}
        for row in self.rows:
            counts[row.rank] += 1
        parts = ", ".join(f"{n} {name}" for name, n in counts.items())
        shown = f" (filter {self.pattern!r}: {len(self.shown)})" if self.pattern else ""
        self.query_one("#status", Static).update(
            Text(f"{len(self.rows)} units: {parts}{shown}  [{self.link}]")
        )

    def current(self) -> Row | None:
        """The unit under the cursor."""
        table = self.query_one(DataTable)
        if not self.shown or table.cursor_row is None or table.cursor_row >= len(self.shown):
            return None
        return self.shown[table.cursor_row]

    # keys ----------------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        from storyd.tui.screens import Detail

        row = self.current()
        if row is not None:
            self.push_screen(Detail(row))

    def action_quit_top(self) -> None:
        self.exit(0)

    def action_keys(self) -> None:
        from storyd.tui.screens import Keys

        self.push_screen(Keys())

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.pattern = event.value.strip()
        box = self.query_one("#filter", Input)
        if not self.pattern:
            box.remove_class("shown")
        self.query_one(DataTable).focus()
        self.redraw()

    def action_reconcile(self, apply: bool) -> None:
        from storyd.tui.screens import Reconcile

        row = self.current()
        if row is not None:
            self.push_screen(Reconcile(row, apply), lambda _done: self.changed())


def _haystack(row: Row) -> str:
    return " ".join((*row.key, str(row.unit.get("format")), row.point(), row.finding())).lower()


def run(
    workspaces: list[str] | None = None, socket: str | None = None, in_flight: bool = False
) -> int:
    """Run the live view until `q`; its exit code."""
    code = TopApp(workspaces, socket, in_flight).run()
    return code if isinstance(code, int) else 0
