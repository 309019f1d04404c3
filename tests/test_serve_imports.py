"""The daemon's start-up imports only what its first answer needs (issue 43).

A real `storyd serve` runs with Python's import-time report on (PYTHONPROFILEIMPORTTIME),
written to its log: every module imported before the first `resume` answer is listed
there before the answer arrives. The claims modules (and sqlite3 through them) and the
epic views are imported at their first use, after the socket has answered; the second
half of the test asks for them and sees them arrive, so the test can see an import.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, daemon_env, wait_for
from epic_state_harness import write_epic

EPIC = "0043"
STORY = "story-0043-0001"
# first use only: claims ops (storyd.api.claims, its SQLite store) and the `epic` op's views
DEFERRED = ("storyd.api.claims", "storyd.api.claims_store", "storyd.server.epicviews",
            "storyd.api.epicview")
_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$", re.MULTILINE)


def _imported(log: str) -> set[str]:
    return set(_IMPORTED.findall(log))


@pytest.mark.slow
def test_first_answer_does_not_import_claims_or_epic_views(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    write_epic(workspace, EPIC, tasks={STORY: {"T1": {"status": "pending"}}})
    root = tmp_path / "daemon"
    env = daemon_env(root, root / "run" / "storyd.sock")
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    daemon = DaemonProcess(root, workspaces=[workspace], env=env)
    try:
        daemon.start(warm=False)
        answer = daemon.request({"op": "resume", "workspace": str(workspace),
                                 "epic": EPIC, "story": STORY})
        assert answer["ok"] is True, answer
        # the early door may have answered (server/door.py): the daemon serves first
        wait_for(lambda: '"serving"' in daemon.log_text(), 10.0, "the daemon to serve")
        before = _imported(daemon.log_text())
        assert "storyd.server.ops" in before  # the report is there: the daemon's own modules
        assert not before & set(DEFERRED), sorted(before & set(DEFERRED))

        daemon.request({"op": "epic", "workspace": str(workspace), "epic": EPIC})
        daemon.request({"op": "claims", "workspace": str(workspace)})
        wait_for(lambda: set(DEFERRED) <= _imported(daemon.log_text()), 5.0,
                 "the deferred modules to be imported at first use")
        daemon.stop()
    finally:
        daemon.close()
