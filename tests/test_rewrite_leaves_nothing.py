"""A rewrite of a big state file leaves nothing of its parse behind for unchanged units.

A write's read parses the whole file again and digests every node to find the units
that did not change. What the new snapshot keeps for those (each unit's key and digest)
must be the old read's objects, not the new parse's: at 10,000 stories, 10,000 new
keys and digests scattered through the arenas the new tree filled kept 24 MB of them
from going back to the system after each write (daemon/server/reads.py, `Reuser`).
"""

from __future__ import annotations

from pathlib import Path

from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic

from storyd.api import answers
from storyd.server.engine import Engine

STORIES = 40


def _stories(changed: int | None = None) -> dict[str, object]:
    """Forty stories of two tasks; `changed`: that story's second task done."""
    stories: dict[str, object] = {}
    for n in range(1, STORIES + 1):
        sid = story_id(n)
        second = {"status": "DONE", "commitSha": "f" * 40} if n == changed else {
            "status": "PENDING"}
        stories[sid] = {"status": "IN_PROGRESS",
                        "tasks": {task_id(sid, 1): {"status": "DONE", "commitSha": "a" * 40},
                                  task_id(sid, 2): second}}
    return stories


def test_unchanged_units_keep_the_old_reads_key_and_digest(tmp_path: Path) -> None:
    write_epic(tmp_path, EPIC, _stories())
    engine = Engine(answers.Options(staleness="mtime"))
    ws = engine.add_workspace(str(tmp_path))
    engine.scan(ws)
    before = ws.files[STATE]
    old_keys = {key: key for key in before.prints}

    write_epic(tmp_path, EPIC, _stories(changed=7))
    engine.touch(ws, STATE)
    after = ws.files[STATE]

    assert after is not before and list(after.prints) == list(before.prints)
    changed = story_id(7)
    assert after.prints[changed] != before.prints[changed]
    assert after.entries[changed].unit is not before.entries[changed].unit
    for key, digest in after.prints.items():
        if key == changed:
            continue
        assert old_keys[key] is next(k for k in after.prints if k == key)  # the old string
        assert digest is before.prints[key]  # the old digest object
        assert after.entries[key].unit is before.entries[key].unit  # the unit reused
