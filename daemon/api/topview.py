"""`storyd top`'s rows and its plain frame: every unit, ordered by what needs a person
first (an agent's session waiting for its user on it, errors, then warnings, then work
in progress, then done), one line each; a claimed unit's line says its claim after the
resume point (holder, token, age, the lease's end or `abandoned`: storyd.api.claimview).

Here, under the doors, because two doors draw the same rows: `storyd top --once` prints
the frame as text (no Textual needed), and the live view (storyd.tui) fills its table
from `rows`. Nothing here reads a socket; `last_change` stats the state file.
"""

from __future__ import annotations

import os
import time

from storyd.api.render import bar, paint, unreadable_line

__all__ = [
    "RANKS", "Row", "age", "claim_cell", "counts", "frame", "label", "rank", "rows", "session_line",
    "session_unit", "waiting_first", "worst_finding",
]

RANKS = ("waiting", "error", "warning", "working", "done")
CELLS = 10  # the progress bar's cells: a row fits 80 columns
PROGRESS_W = CELLS + 10
_SEVERITY = {"error": 0, "warning": 1, "info": 2}


def worst_finding(unit: dict[str, object]) -> dict[str, object] | None:
    """The unit's most severe finding (the first of that severity), or None."""
    found = [f for f in unit.get("findingList") or () if isinstance(f, dict)]  # type: ignore[attr-defined]
    if not found:
        if unit.get("worst"):  # a fleet summary: the worst severity and the codes only
            codes = unit.get("codes") or ["?"]
            return {"severity": unit["worst"], "code": codes[0]}  # type: ignore[index]
        return None
    return min(found, key=lambda f: _SEVERITY.get(str(f.get("severity")), 3))


def rank(unit: dict[str, object]) -> str:
    """What the unit asks of a person: `error` (it broke, or an error finding),
    `warning`, `working` (not all done), `done`."""
    worst = worst_finding(unit)
    severity = worst.get("severity") if worst else None
    if unit.get("error") or unit.get("unreadable") is True or severity == "error":
        return "error"
    if severity == "warning":
        return "warning"
    return "done" if unit.get("resumePoint") == "all-done" else "working"


def age(seconds: float | None) -> str:
    """`12s`, `5m`, `3h`, `4d`; `-` when unknown."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def last_change(unit: dict[str, object]) -> float | None:
    """When the unit's state file last changed (its mtime), or None."""
    try:
        return os.stat(os.path.join(str(unit["workspace"]), str(unit["stateFile"]))).st_mtime
    except (OSError, KeyError, ValueError):
        return None


class Row:
    """One unit as the view shows it: its rank, key (workspace, stateFile, unit), the
    cells, and the unit summary itself (for the detail)."""

    __slots__ = ("changed", "key", "rank", "unit", "worst")

    def __init__(self, unit: dict[str, object], changed: float | None) -> None:
        self.unit = unit
        self.rank = rank(unit)
        self.worst = worst_finding(unit)
        self.changed = changed
        where = str(unit.get("workspace"))
        if unit.get("machine"):  # a fleet summary: workspaces of several machines
            where = f"{unit['machine']}:{where}"
        self.key = (where, str(unit.get("stateFile")), str(unit.get("unit")))

    def progress(self) -> str:
        """`[####------] 2/5`"""
        done, total = int(self.unit.get("done") or 0), int(self.unit.get("total") or 0)  # type: ignore[call-overload]
        return f"{bar(done, total, CELLS)} {done}/{total}"

    def point(self) -> str:
        """The resume point, or `unreadable`."""
        return str(self.unit.get("resumePoint") or "unreadable")

    def claim(self, now: float) -> str:
        """The unit's claim, short: `alice #3 5m, 14m left` (holder, token, age, the
        lease's end), `alice #3 abandoned`; empty when nobody claimed it
        (storyd.api.claimview's `claim` field)."""
        return claim_cell(self.unit.get("claim"), now)

    def finding(self) -> str:
        """The worst finding, short: `warning: stale (+2)` (`error: …` for a unit that
        broke); the detail has the rest."""
        if self.unit.get("error"):
            return f"error: {self.unit['error']}"
        worst = self.worst
        if worst is None:
            return ""
        listed = self.unit.get("findingList")
        count = len(listed) if isinstance(listed, list) else self.unit.get("findings")
        more = (count if isinstance(count, int) else 1) - 1
        extra = f" (+{more})" if more > 0 else ""
        return f"{worst.get('severity')}: {worst.get('code')}{extra}"


def claim_cell(field: object, now: float) -> str:
    """A `claim` field (storyd.api.claimview) in a table's cell; empty for none."""
    if not isinstance(field, dict):
        return ""
    from storyd.core.isotime import parse_epoch

    task = f" {field['task']}" if field.get("task") else ""
    head = f"{field.get('owner')} #{field.get('token')}{task}"
    if field.get("state") == "abandoned":
        return f"{head} abandoned"
    granted = parse_epoch(str(field.get("granted")))
    ends = parse_epoch(str(field.get("expires")))
    held = f" {age(now - granted)}" if granted is not None else ""
    left = f", {age(ends - now)} left" if ends is not None else ""
    return head + held + left


def rows(units: list[dict[str, object]], *, stat: bool = True) -> list[Row]:
    """The units as rows, what needs a person first; within a rank by workspace, then
    unit. `stat` false leaves the last change unknown (no stat per unit)."""
    made = [Row(u, last_change(u) if stat and not u.get("machine") else None) for u in units]
    _order(made)
    return made


def _order(made: list[Row]) -> None:
    order = {name: i for i, name in enumerate(RANKS)}
    made.sort(key=lambda r: (order[r.rank], r.key[0], r.key[2]))


def waiting_first(found: list[Row], sessions: list[dict[str, object]]) -> list[Row]:
    """`found` ranked again with the units an agent's session waits on (its user must
    answer a permission prompt or a question) as `waiting`, above every other rank; a
    unit no session waits on any more goes back to its own rank."""
    waited = set()
    for entry in sessions:
        if entry.get("state") != "waiting":
            continue
        on, unit = entry.get("on"), session_unit(entry, found)
        if isinstance(on, list) and on and unit is not None:
            waited.add((entry.get("workspace"), on[0], unit))
    again = list(found)
    for row in again:
        row.rank = "waiting" if row.key in waited else rank(row.unit)
    _order(again)
    return again


def label(row: Row, many: bool) -> str:
    """The unit's name; `workspace-folder:unit` when several workspaces are shown."""
    machine = f"{row.unit['machine']}:" if row.unit.get("machine") else ""
    return f"{machine}{os.path.basename(row.key[0])}:{row.key[2]}" if many else row.key[2]


def session_unit(entry: dict[str, object], found: list[Row] | None = None) -> str | None:
    """The unit a session is on: the one its record names, else the only unit (else the
    first not done) of the state file it touched among `found`, else that file."""
    on = entry.get("on")
    if not isinstance(on, list) or len(on) != 2 or not isinstance(on[0], str):
        return None
    if isinstance(on[1], str):
        return on[1]
    mine = [r for r in found or () if r.key[0] == entry.get("workspace") and r.key[1] == on[0]]
    busy = [r for r in mine if r.rank != "done"]
    pick = mine[0] if len(mine) == 1 else (busy[0] if busy else None)
    return pick.key[2] if pick is not None else os.path.basename(on[0])


def session_line(entry: dict[str, object], now: float, many: bool = True,
                 found: list[Row] | None = None) -> str:  # fmt: skip
    """`claude  3f2a91c0  project-a  waiting 2m on story-3: Claude needs your permission
    to use Bash`; a record without a state (before issue 34): when it started and when a
    hook last wrote it."""
    agent = str(entry.get("agent") or "agent?")
    where = f"  {os.path.basename(str(entry['workspace']))}" if many else ""
    head = f"{agent:<7} {str(entry['session'])[:8]:<8}{where}  "
    seen = age(now - float(entry["seen"]))  # type: ignore[arg-type]
    state, since = entry.get("state"), entry.get("since")
    if not isinstance(state, str):
        started = entry.get("started")
        began = f"started {age(now - started)} ago, " if isinstance(started, float) else ""
        return f"{head}{began}last hook {seen} ago"
    text = f"{state} {age(now - since) if isinstance(since, float) else '?'}"
    if state == "working":
        text += f" (hook {seen} ago)"
    unit = session_unit(entry, found)
    if unit:
        text += f" on {unit}"
    text += _task_list(entry, found)
    note = entry.get("note")
    if state == "waiting" and isinstance(note, str) and note:
        text += f": {note}"
    return head + text


def _task_list(entry: dict[str, object], found: list[Row] | None) -> str:
    """`, list 3f2a91c0 (4 open)`: the Claude Code task list tied to this session
    (storyd.api.claude_ties labels it with its session), or nothing."""
    for row in found or ():
        unit = row.unit
        if unit.get("session") == entry.get("session") and unit.get("list"):
            total, done = unit.get("total"), unit.get("done")
            left = total - done if isinstance(total, int) and isinstance(done, int) else "?"
            return f", list {str(unit['list'])[:8]} ({left} open)"
    return ""


def _fit(text: str, width: int) -> str:
    """`text` cut to `width` characters (an ellipsis marks the cut)."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def counts(found: list[Row]) -> str:
    """`0 error, 2 warning, 5 working, 1 done`, led by `N waiting` when a session waits."""
    count = dict.fromkeys(RANKS, 0)
    for row in found:
        count[row.rank] += 1
    return ", ".join(f"{count[name]} {name}" for name in RANKS if name != "waiting" or count[name])


def _summary(found: list[Row], unreadable: int) -> str:
    workspaces = len({row.key[0] for row in found})
    broken = f", {unreadable} unreadable" if unreadable else ""
    where = f"{_plural(len(found), 'unit')} in {_plural(workspaces, 'workspace')}"
    return f"{where}: {counts(found)}{broken}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def _tone(row: Row) -> str | None:
    return {"waiting": "warning", "error": "error", "warning": "warning", "done": "done"}.get(
        row.rank
    )


def frame(
    units: list[dict[str, object]],
    *,
    width: int = 80,
    height: int | None = None,
    color: bool = False,
    unreadable: list[dict[str, object]] | None = None,
    source: str = "",
    now: float | None = None,
    sessions: list[dict[str, object]] | None = None,
) -> str:
    """One plain frame: a header, the column titles, then a line per unit (what needs a
    person first), each cut to `width`; with `height`, the rows that fit, and how many
    more. The state files that do not parse come first: they need a person most. The
    agents' `sessions` (storyd.api.sessionlist) on the units' workspaces follow the
    header."""
    width = max(40, width)
    now = time.time() if now is None else now
    found = rows(units)
    mine = {r.key[0] for r in found}
    working = [e for e in sessions or () if e.get("workspace") in mine]
    found = waiting_first(found, working)
    broken = unreadable or []
    where = f" ({source})" if source else ""
    head = [
        _fit(f"storyd top{where}  {time.strftime('%H:%M:%S', time.localtime(now))}", width),
        _fit(_summary(found, len(broken)), width),
        "",
    ]
    many = len({r.key[0] for r in found}) > 1
    names = [label(r, many) for r in found]
    if working:
        head += [_fit("SESSIONS " + session_line(e, now, many, found), width)
                 for e in working[:5]]  # fmt: skip
        if len(working) > 5:
            head.append(f"SESSIONS … {len(working) - 5} more")
        head.append("")
    name_w = min(24, max([4] + [len(n) for n in names]))
    claimed = [r.claim(now) for r in found]
    fmt_w = min(10, max([6] + [len(str(r.unit.get("format"))) for r in found]))
    titles = (
        f"{'FORMAT':<{fmt_w}} {'UNIT':<{name_w}} {'PROGRESS':<{PROGRESS_W}} {'AGE':>4}  "
        f"RESUME{' / CLAIM' * any(claimed)} / FINDING"
    )
    head.append(_fit(titles, width))
    body = [paint(_fit(unreadable_line(e, full_path=True), width), "error", color) for e in broken]
    for row, name, held in zip(found, names, claimed, strict=True):
        changed = age(now - row.changed) if row.changed is not None else "-"
        point = row.point()
        tail = "  ".join(p for p in (point, f"[{held}]" if held else "", row.finding()) if p)
        line = (
            f"{_fit(str(row.unit.get('format')), fmt_w):<{fmt_w}} {_fit(name, name_w):<{name_w}} "
            f"{row.progress():<{PROGRESS_W}} {changed:>4}  {tail}"
        )
        line = _fit(line, width)
        tone = _tone(row)
        body.append(paint(line, tone, color) if tone else line)
    if not found and not broken:
        body.append("no units found (no state files of a supported format)")
    if height is not None:
        room = max(1, height - len(head))
        if len(body) > room:
            hidden = len(body) - (room - 1)
            body = [*body[: room - 1], f"… {hidden} more (storyd status lists them all)"]
    return "\n".join(head + body) + "\n"
