"""`epic`: one epic as its producer resumes it (stories reclassified, executable next,
blocked and why), from the daemon's `epic` op, else read here; both call
daemon/api/epicview.py, so the answer is the same."""

from __future__ import annotations

import os

from storyd.core.ids import normalize_epic_id

__all__ = ["Epic", "epic"]


class Epic:
    """The epic view (epicview's JSON object) and which path answered it."""

    __slots__ = ("source", "view")

    def __init__(self, view: dict[str, object], source: str) -> None:
        self.view = view
        self.source = source


def epic(
    workspace: str,
    epic_id: str,
    *,
    direct: bool = False,
    socket: str | None = None,
    timeout: float = 5.0,
) -> Epic:
    """The view of epic `epic_id` (any spelling `normalize_epic_id` accepts; UsageError
    otherwise) in `workspace`. Errors are typed by their code, as `storyd resume`'s."""
    epic_id = normalize_epic_id(epic_id)
    workspace = os.path.realpath(workspace)
    view = None if direct else _from_daemon(socket, timeout, workspace, epic_id)
    if view is not None:
        return Epic(view, "daemon")
    from storyd.api.epicview import epic_view
    from storyd.core.caps import check_answer
    from storyd.core.jsonio import dumps

    view = epic_view(workspace, epic_id)
    check_answer(len(dumps(view)))  # the daemon's answer cap, at its default
    return Epic(view, "direct")


def _from_daemon(
    socket: str | None, timeout: float, workspace: str, epic_id: str
) -> dict[str, object] | None:
    """The daemon's view, or None when no daemon answered."""
    from storyd.api.client import Client, DaemonUnavailable
    from storyd.api.refusals import refused

    try:
        with Client(socket, timeout=timeout) as client:
            answer = client.request("epic", workspace=workspace, epic=epic_id)
    except DaemonUnavailable:
        return None
    if not answer.get("ok"):
        raise refused(answer)
    view = answer.get("view")
    assert isinstance(view, dict), "the epic op answers with a view object"
    return view
