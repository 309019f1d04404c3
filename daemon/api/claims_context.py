"""The claims lines of an agent's session-start context: what the session holds, what
others hold, what was abandoned (with the last state seen), so it takes other work."""

from __future__ import annotations

import time

__all__ = ["context_lines", "with_claims"]

_LINE_CHARS = 300  # one claim's line is cut here (a task id is the claimant's text)


def context_lines(workspace: str, session: str | None, shown: int = 10) -> list[str]:
    """At most `shown` claims of `workspace`, the session's first; none when nothing was
    ever claimed on this machine (no sqlite3 import then)."""
    from storyd.api.claims_path import ever_claimed

    if not ever_claimed():
        return []
    from storyd.api import claims
    from storyd.core.errors import StorydError

    try:
        found = claims.listing(workspace, fleet=False)  # a hook: no nats on its path
    except StorydError:
        return []
    mine = claims.default_owner(session) if session else None
    found.sort(key=lambda c: c.owner != mine)
    now = time.time()
    lines = []
    for held in found[:shown]:
        where = held.place.label()
        if not held.live(now):
            last = f", last seen: {held.last}" if held.last else ""
            lines.append(f"- abandoned: {where} (lease of {held.owner} ended{last})")
        elif held.owner == mine:
            lines.append(f"- you hold {where} (token {held.token}, {held.expires - now:.0f} s "
                         "left; each tool call renews it)")  # fmt: skip
        else:
            lines.append(f"- {held.owner} holds {where} until "
                         f"{held.as_dict(now)['expires']}: leave it to them")  # fmt: skip
    if len(found) > shown:
        lines.append(f"- and {len(found) - shown} more (storyd claims --workspace {workspace})")
    lines = [ln if len(ln) <= _LINE_CHARS else ln[: _LINE_CHARS - 3] + "..." for ln in lines]
    return ["storyd claims:", *lines] if lines else []


def with_claims(text: str | None, workspace: str, session: str | None) -> str | None:
    """The session-start context `text` with the claims lines after it (None: neither)."""
    lines = context_lines(workspace, session)
    if not lines:
        return text
    block = "\n".join(lines)
    return block if text is None else f"{text}\n{block}"
