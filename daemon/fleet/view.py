"""`storyd fleet status`: units of every machine, stale machines, and the cross-machine flags.

A unit that carries a `claim` (storyd.api.claimview's field) shows it as `storyd top`
does: holder, token, age and the lease's end, or `abandoned`.

A machine is stale when its last heartbeat is older than three of its heartbeat
periods: its units are shown apart, never counted as live. A story (same repository
remote, state file and unit) is flagged when live machines disagree: in flight on two
(neither finished, one has tasks done), or finished on one and still open on another.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

__all__ = ["STALE_BEATS", "age_of", "annotate", "flags", "render"]

STALE_BEATS = 3


def _stamp(iso: object) -> float | None:
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def age_of(iso: object, now: float) -> float | None:
    """Seconds since an ISO time (None when it is not one)."""
    stamp = _stamp(iso)
    return None if stamp is None else max(0.0, now - stamp)


def annotate(
    machines: dict[str, dict[str, Any]], units: list[dict[str, Any]], now: float | None = None
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Machines with `age` and `stale`; units with `age` and their machine's `stale`."""
    now = time.time() if now is None else now
    shown: dict[str, dict[str, Any]] = {}
    for name, beat in machines.items():
        age = age_of(beat.get("when"), now)
        given = beat.get("heartbeat")
        period = float(given) if isinstance(given, (int, float)) else 30.0
        shown[name] = {**beat, "age": age, "stale": age is None or age > STALE_BEATS * period}
    out = []
    for unit in units:
        machine = str(unit.get("machine"))
        known = shown.get(machine)
        stale = True if known is None else bool(known["stale"])
        out.append({**unit, "age": age_of(unit.get("when"), now), "stale": stale})
    out.sort(key=lambda u: (u["stale"], str(u.get("machine")), str(u.get("workspace")),
                            str(u.get("stateFile")), str(u.get("unit"))))
    return shown, out


def _story(unit: dict[str, Any]) -> tuple[str, str, str] | None:
    remote = unit.get("remote")
    if not remote:
        return None
    return (str(remote).removesuffix(".git"), str(unit.get("stateFile")), str(unit.get("unit")))


def flags(units: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same story on several live machines, disagreeing (see the module's docstring)."""
    by_story: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for unit in units:
        story = _story(unit)
        if story is not None and not unit.get("stale"):
            by_story.setdefault(story, []).append(unit)
    found = []
    for (remote, state_file, key), copies in sorted(by_story.items()):
        machines = {str(u.get("machine")) for u in copies}
        if len(machines) < 2:
            continue
        finished = sorted({str(u["machine"]) for u in copies if u.get("resumePoint") == "all-done"})
        open_ = [u for u in copies if u.get("resumePoint") != "all-done"]
        started = sorted({str(u["machine"]) for u in open_ if int(u.get("done") or 0) > 0})
        open_machines = sorted({str(u["machine"]) for u in open_})
        base = {"remote": remote, "stateFile": state_file, "unit": key}
        if finished and open_machines:
            found.append({**base, "flag": "finished-and-open", "finished": finished,
                          "open": open_machines})
        elif len(open_machines) >= 2 and started:
            found.append({**base, "flag": "in-flight-twice", "open": open_machines})
    return found


def _age_text(age: float | None) -> str:
    if age is None:
        return "?"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if age >= size:
            return f"{int(age // size)}{unit}"
    return f"{int(age)}s"


def render(machines: dict[str, dict[str, Any]], units: list[dict[str, Any]],
           found: list[dict[str, Any]], color: bool) -> str:
    """The screen: flags first, then each machine's units grouped by workspace."""
    from storyd.api.render import bar, paint
    from storyd.api.topview import claim_cell

    now = time.time()

    lines: list[str] = []
    for flag in found:
        where = f"{flag['unit']} ({flag['remote']} {flag['stateFile']})"
        if flag["flag"] == "finished-and-open":
            text = (f"finished on {', '.join(flag['finished'])}, "
                    f"open on {', '.join(flag['open'])}: {where}")
        else:
            text = f"in flight on {', '.join(flag['open'])}: {where}"
        lines.append(paint("! " + text, "warning", color))
    if found:
        lines.append("")
    if not units:
        lines.append("no units published yet")
    width = max((len(str(u.get("unit"))) for u in units), default=0)
    current: tuple[object, object] | None = None
    for unit in units:
        machine = str(unit.get("machine"))
        if (machine, unit.get("workspace")) != current:
            if current is None or current[0] != machine:
                beat = machines.get(machine, {})
                state = (f"stale, last heard {_age_text(beat.get('age'))} ago"
                         if unit["stale"] else f"live, {_age_text(beat.get('age'))} ago")
                lines.append(paint(f"{machine} ({state})", "warning" if unit["stale"] else "dim",
                                    color))
            current = (machine, unit.get("workspace"))
            repo = " ".join(str(x) for x in (unit.get("remote"), unit.get("branch")) if x)
            lines.append(paint(f"  {unit.get('workspace')}" + (f"  {repo}" if repo else ""),
                                "dim", color))
        done, total = int(unit.get("done") or 0), int(unit.get("total") or 0)
        percent = f"{round(100 * done / total):3d}%" if total else "  -%"
        point = str(unit.get("resumePoint") or "unreadable")
        head = (f"    {unit.get('format')!s:<10} {unit.get('unit')!s:<{width}}  "
                f"{bar(done, total)} {done:>3}/{total:<3} {percent}  ")
        tail = f"  {_age_text(unit.get('age'))} ago"
        if isinstance(unit.get("claim"), dict):  # the unit's claim, as `storyd top` shows it
            tail += f"  [{claim_cell(unit['claim'], now)}]"
        if unit.get("findings"):
            tail += f"  {unit['findings']} finding(s), worst {unit.get('worst')}"
        lines.append(head + (paint(point, "done", color) if point == "all-done" else point)
                     + tail)
    return "\n".join(lines) + "\n"
