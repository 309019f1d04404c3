"""The live view's other screens: a unit's detail, the reconcile preview and its
confirmed apply, the keys. Each closes with Escape (or `q`)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from storyd.api.topview import Row

__all__ = ["Detail", "Keys", "Reconcile"]

KEYS = """storyd top: keys

  up/down, PgUp/PgDn   move through the units
  Enter                the unit's detail: findings with evidence, tasks, history
  r                    preview the reconcile of the unit's state file
  a                    apply that reconcile (asks first)
  /                    filter by text (unit, format, workspace, resume point); Enter
                       with an empty filter shows every unit again
  ?                    this list
  Escape               back
  q                    quit
"""


class _Text(Screen[None]):
    """A scrollable page of text."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("q", "app.pop_screen", "back"),
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(self.text), id="body")
        yield Footer()


class Keys(_Text):
    """`?`"""

    def __init__(self) -> None:
        super().__init__(KEYS)


class Detail(_Text):
    """Enter: the unit's findings with evidence, tasks with commits, history."""

    def __init__(self, row: Row) -> None:
        super().__init__("\n".join(_detail(row)))


def _detail(row: Row) -> list[str]:
    """The row's detail; a failure to draw it is said in the page, never raised (the
    view stays up whatever a finding holds)."""
    from storyd.api.unitdetail import detail_lines

    try:
        return _fleet_lines(row) if row.unit.get("machine") else detail_lines(row.unit)
    except Exception as exc:  # a bug must not take the live view down: said, not raised
        return [
            f"{row.unit.get('format')} {row.unit.get('unit')}",
            f"  the detail cannot be drawn: internal error: {type(exc).__name__}: {exc}",
        ]


def _fleet_lines(row: Row) -> list[str]:
    """A fleet unit's detail: what its machine published (the summary, not its findings,
    tasks or history: those are read on that machine, `storyd top` there)."""
    unit = row.unit
    codes = unit.get("codes")
    return [
        f"{unit.get('format')} {unit.get('unit')} (on {unit.get('machine')})",
        f"  workspace   {unit.get('workspace')}",
        f"  state file  {unit.get('stateFile')}",
        f"  progress    {row.progress()}",
        f"  resume at   {row.point()}",
        f"  findings    {unit.get('findings') or 0}, worst {unit.get('worst') or '-'}: "
        + (", ".join(map(str, codes)) if isinstance(codes, list) and codes else "-"),
        f"  published   {unit.get('when') or '-'}",
        "",
        f"its findings with their evidence, tasks and history: storyd top on {unit.get('machine')}",
    ]


def _plan(row: Row, apply: bool) -> tuple[str, bool]:
    """The reconcile of the row's state file (and unit): its text, whether it changes
    anything. Errors come back as text."""
    from storyd.api.plantext import plan_text
    from storyd.api.reconciling import reconcile, selection
    from storyd.core.errors import StorydError

    workspace, state_file, unit = row.key
    try:
        done = reconcile(workspace, selection(workspace, state_file=state_file, unit=unit),
                         apply=apply)  # fmt: skip
    except StorydError as exc:
        return f"reconcile: {exc.message}", False
    if apply:
        return ("applied: " if done.applied else "nothing to apply\n") + plan_text(done.plan), False
    text = plan_text(done.plan) or "nothing to reconcile: the state file agrees with git\n"
    return text, done.plan.changed


class Reconcile(ModalScreen[bool]):
    """`r` (preview) and `a` (preview, then `y` applies): the plan for the unit."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(False)", "back"),
        Binding("q", "dismiss(False)", "back"),
        Binding("y", "apply", "apply"),
        Binding("n", "dismiss(False)", "no"),
    ]
    DEFAULT_CSS = "Reconcile { background: $background 80%; } #plan { padding: 1; }"

    def __init__(self, row: Row, confirm: bool) -> None:
        super().__init__()
        self.row = row
        self.confirm = confirm
        self.changes = False

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("planning…", id="plan")
        yield Footer()

    def on_mount(self) -> None:
        text, self.changes = _plan(self.row, False)
        if self.confirm and self.changes:
            text += "\napply these changes? y applies, n or Escape does not\n"
        elif self.confirm:
            text += "\nnothing to apply (Escape)\n"
        self.query_one("#plan", Static).update(Text(text))

    def action_apply(self) -> None:
        if not (self.confirm and self.changes):
            return
        text, _ = _plan(self.row, True)
        self.changes = False
        self.query_one("#plan", Static).update(Text(text + "\n(Escape to go back)"))
