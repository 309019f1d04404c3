"""The live view: a table of every unit, what needs a person first, redrawn when the
daemon says something changed (storyd.tui.follow), never on a timer.

Enter opens a unit (storyd.tui.screens.Detail), `r` previews its reconcile, `a` applies
it after a confirmation, `/` filters by text, `?` lists the keys, `q` quits (exit 0).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Input, Static

from storyd.api.topview import Row, age, counts, label, rows, waiting_first
from storyd.tui.follow import Follower
from storyd.tui.table import Cells, Sync

__all__ = ["TopApp", "run"]

_STYLE = {"waiting": "bold yellow", "error": "bold red", "warning": "yellow", "working": "",
          "done": "green"}  # fmt: skip
_GAP = 0.1  # seconds: reads start at most this often (a burst of events: two reads)


class Feed(Protocol):
    """Another source of units than this machine's daemon (storyd.fleet.feed's, for
    `--fleet`): it calls back on each change and on its link's state."""

    def bind(self, on_event: Any, on_state: Any) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def read(self) -> tuple[list[dict[str, Any]], str]: ...


class TopApp(App[int]):
    """`storyd top` (with a `feed`: `storyd top --fleet`)."""

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
        feed: Feed | None = None,
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
        self._reading = False  # a read is under way
        self._again = False  # an event came during it: read once more after
        self._timer = False  # a read waits for the gap
        self._last = 0.0  # when the last read started (monotonic)
        self._records: Any = None  # the watch of the hooks' records (storyd.tui.agents)
        self._claims: Any = None  # the watch of the claims database (storyd.tui.agents)
        self._lease_end = 0.0  # the next shown lease's end: read again then
        self._agents_due = False  # a read of the sessions is scheduled
        self.feed = feed
        on_event = lambda event: self._later(self.changed)  # noqa: E731
        on_state = lambda text: self._later(self.set_link, text)  # noqa: E731
        if feed is not None:
            feed.bind(on_event, on_state)
        self._follower: Feed | Follower | None = feed if feed is not None else (
            Follower(socket, workspaces[0] if workspaces and len(workspaces) == 1 else None,
                     on_event, on_state)
            if follow
            else None
        )  # fmt: skip

    def compose(self) -> ComposeResult:
        yield Static("storyd top: reading…", id="status")
        yield Static("", id="sessions")
        yield Input(placeholder="filter: unit, format, workspace or resume point", id="filter")
        table: DataTable[Text] = DataTable(cursor_type="row", zebra_stripes=False)
        self.sync = Sync(table)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.reload()
        if self._follower is not None:
            self._follower.start()
        if self.feed is None:
            from storyd.tui.agents import RecordsWatch, claims_watch

            self._records = RecordsWatch(lambda: self._later(self.agents_changed))
            self._records.start()
            self._claims = claims_watch(lambda: self._later(self.changed))
            self._claims.start()

    def on_unmount(self) -> None:
        if self._follower is not None:
            self._follower.stop()
        for watch in (self._records, self._claims):
            if watch is not None:
                watch.stop()

    def agents_changed(self) -> None:
        """A hook wrote a session's record: read the sessions again shortly (once for a
        burst), without reading the units."""
        if not self._agents_due:
            self._agents_due = True
            self.set_timer(_GAP, lambda: self.run_worker(self._read_agents, thread=True,
                                                         exclusive=True, group="agents"))

    def _read_agents(self) -> None:
        self._agents_due = False
        agents = self._sessions({row.key[0] for row in self.rows})
        self._later(self.agents_read, agents)

    @staticmethod
    def _sessions(mine: set[str]) -> list[dict[str, object]]:
        from storyd.api.sessionlist import sessions_in_flight

        return [e for e in sessions_in_flight() if e.get("workspace") in mine]

    # reading -------------------------------------------------------------------------

    def _later(self, call: Any, *args: object) -> None:
        """`call(*args)` on the app's thread, from a follower's; dropped once the app
        has stopped (a last word from a follower that was closing)."""
        import contextlib

        with contextlib.suppress(RuntimeError):
            self.call_from_thread(call, *args)

    def changed(self) -> None:
        """Something changed: read now, unless a read is under way (then once more
        after it) or the last one began less than _GAP ago (then at the gap's end)."""
        import time

        if self._reading:
            self._again = True
            return
        if self._timer:
            return
        wait = self._last + _GAP - time.monotonic()
        if wait > 0:
            self._timer = True
            self.set_timer(wait, self.reload)
        else:
            self.reload()

    def reload(self) -> None:
        """Read the units on a thread; show them when read."""
        import time

        self._timer, self._again, self._reading = False, False, True
        self._last = time.monotonic()
        self.run_worker(self._read, thread=True, exclusive=True, group="read")

    def _read_done(self) -> None:
        self._reading = False
        if self._again:
            self.changed()

    def _read(self) -> None:
        from storyd.api.units import units

        if self.feed is not None:
            fleet, where = self.feed.read()
            if self.in_flight:
                fleet = [u for u in fleet if u.get("resumePoint") != "all-done"]
            self.call_from_thread(self.show, rows(fleet, stat=False), where, None)
            self.call_from_thread(self._read_done)
            return
        try:
            found = units(self.workspaces, in_flight=self.in_flight, socket=self.socket)
        except Exception as exc:  # shown, not raised: the view stays up
            self.call_from_thread(self.set_link, f"cannot read the units: {exc}")
            self.call_from_thread(self._read_done)
            return
        from storyd.api.claimview import attach

        made = rows(attach(found.units))
        agents = self._sessions({row.key[0] for row in made})
        made = waiting_first(made, agents)
        self.call_from_thread(self.show, made, found.source, agents)
        self.call_from_thread(self._read_done)

    def show(
        self, made: list[Row], source: str, agents: list[dict[str, object]] | None = None
    ) -> None:
        """Fill the table with `made` (the cursor stays on the same unit), and the agents'
        sessions on those workspaces above it."""
        self.reloads += 1
        self.rows, self.source = made, source
        if agents is not None:
            self.show_agents(agents)
        self.redraw()
        self._at_lease_end()

    def _at_lease_end(self) -> None:
        """A lease that ends unrenewed writes nothing: read again when the first shown
        one ends, so its row says `abandoned`."""
        import time

        from storyd.api.claimview import lease_end

        ends = [lease_end(r.unit.get("claim")) for r in self.rows]
        first = min((e for e in ends if e is not None), default=None)
        if first is None or first == self._lease_end:
            return
        self._lease_end = first
        self.set_timer(max(0.0, first - time.time()) + 1.0, self.changed)

    def agents_read(self, agents: list[dict[str, object]]) -> None:
        """The sessions read again: shown above the table, and the units a session now
        waits on (or no longer does) ranked again."""
        self.show_agents(agents)
        if self.feed is None:
            self.rows = waiting_first(self.rows, agents)
            self.redraw()

    def show_agents(self, agents: list[dict[str, object]]) -> None:
        """The agents' sessions on the shown workspaces, above the table."""
        import time

        from storyd.api.topview import session_line

        now, many = time.time(), len({r.key[0] for r in self.rows}) > 1
        lines = [session_line(e, now, many, self.rows) for e in agents[:5]]
        self.query_one("#sessions", Static).update(Text("\n".join(lines)))

    def redraw(self) -> None:
        """Show the rows that pass the filter: only the rows that changed are touched
        (storyd.tui.table); the cursor stays on the same unit."""
        import time

        keep = self.current()
        pattern = self.pattern.lower()
        self.shown = [r for r in self.rows if not pattern or pattern in _haystack(r)]
        many = len({r.key[0] for r in self.rows}) > 1
        now = time.time()
        wanted: dict[str, Cells] = {}
        for row in self.shown:
            cells = (
                str(row.unit.get("format")), label(row, many), row.progress(),
                age(now - row.changed) if row.changed else "-", row.point(), row.finding(),
                row.claim(now),
            )  # fmt: skip
            wanted["\0".join(row.key)] = (_STYLE[row.rank], cells)
        self.sync.apply(wanted)
        if keep is not None and (key := "\0".join(keep.key)) in wanted:
            self.sync.table.move_cursor(row=self.sync.table.get_row_index(key))
        self.status()

    def set_link(self, text: str) -> None:
        """The link to the daemon changed (`live`, `daemon gone: reconnecting`, …)."""
        self.link = text
        self.status()

    def status(self) -> None:
        parts = counts(self.rows)
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
        if row is not None and row.unit.get("machine"):
            self.notify(f"{row.key[0]}: reconcile it on its machine (storyd reconcile there)")
        elif row is not None:
            self.push_screen(Reconcile(row, apply), lambda _done: self.changed())


def _haystack(row: Row) -> str:
    return " ".join((*row.key, str(row.unit.get("format")), row.point(), row.finding())).lower()


def run(
    workspaces: list[str] | None = None,
    socket: str | None = None,
    in_flight: bool = False,
    feed: Feed | None = None,
) -> int:
    """Run the live view until `q`; its exit code: 0 after `q`, 70 when the view died
    (Textual has printed why), never 0 for a crash."""
    app = TopApp(workspaces, socket, in_flight, feed=feed)
    code = app.run()
    if app.return_code:  # an exception ended the app: Textual sets 1 and returns None
        return 70
    return code if isinstance(code, int) else 0
