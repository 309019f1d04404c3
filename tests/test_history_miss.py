"""A cache miss tells the progress a version lost, as the cached answer does.

A query that arrives before the cache has read a new version (the workspace not read
yet, a write just made) is read directly; its answer carries the `regressed` findings the
installer's build will give the cached one (`Recorder.peek`), and looking moves no mark.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from daemon_harness import EventStream, wait_for
from epic_state_harness import STATE, write_epic
from git_harness import GitWorkspace
from recorder_harness import STORY, T1, T2, T3, recorder, unit

EPIC = "0049"


def _tasks(found: tuple[object, ...] | list[dict[str, object]]) -> list[str]:
    return sorted(str(f["task"] if isinstance(f, dict) else f.task) for f in found
                  if (f["code"] if isinstance(f, dict) else f.code) == "regressed")


class TestPeek:
    """The recorder's read-only look, against what its build gives."""

    def test_a_peek_gives_what_the_build_will_and_moves_nothing(self, tmp_path: Path) -> None:
        rec = recorder(tmp_path / "h.sqlite3")
        rec.start()
        ws = str(tmp_path)  # no state file there: the read made is the one judged
        try:
            assert rec.regressed(ws, unit(3)) == ()
            marks = rec.marks
            held = {file: dict(units) for file, units in marks.items()}
            peeked = rec.peek(ws, unit(1))
            assert _tasks(peeked) == [T2, T3]
            assert rec.peek(ws, unit(1)) == peeked
            assert marks.keys() == held.keys()
            assert all(marks[f][u] is packed for f, units in held.items()
                       for u, packed in units.items()), "a peek moved the marks"  # fmt: skip
            assert rec.peek(ws, unit(3)) == ()
            built = rec.regressed(ws, unit(1))
            assert [(f.task, f.message) for f in built] == [(f.task, f.message) for f in peeked]
        finally:
            rec.close()

    def test_a_unit_never_seen_and_a_recorder_never_started_peek_nothing(
            self, tmp_path: Path) -> None:
        rec = recorder(tmp_path / "h.sqlite3")
        try:
            assert rec.peek(str(tmp_path), unit(0)) == ()
            assert not rec._loaded.is_set(), "a query's look read the marks"
            rec.start()
            assert rec.peek(str(tmp_path), unit(0)) == ()
        finally:
            rec.close()


def _all_done(shas: list[str]) -> dict[str, dict[str, object]]:
    return {tid: {"status": "DONE", "commitSha": sha, "completedAt": "2026-11-25T10:00:00Z"}
            for tid, sha in zip((T1, T2, T3), shas, strict=True)}  # fmt: skip


@pytest.mark.slow
def test_the_first_answer_on_a_workspace_tells_the_progress_lost_while_it_was_away(
        tmp_path: Path, spawn_daemon: object) -> None:
    """A daemon records three tasks done and stops; a stale copy undoes two; the next
    daemon is first asked about the workspace: a miss, read directly, told the loss."""
    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    repo.commit("initial", {"README": "x\n"})
    shas = repo.tasks_commits(STORY, 3, first=1)
    write_epic(ws, EPIC, tasks={STORY: _all_done(shas)})
    first = spawn_daemon([ws])  # type: ignore[operator]
    wait_for(lambda: first.stats()["history"]["versions"] >= 1, message="the version recorded")
    wait_for(lambda: first.stats()["history"]["queued"] == 0, message="the writer")
    first.stop()

    stale = {"epic": EPIC, "stories": {STORY: {"tasks": {
        T1: {"status": "DONE", "commitSha": shas[0], "completedAt": "2026-11-25T10:00:00Z"},
        T2: {"status": "PENDING"}, T3: {"status": "PENDING"}}}}}  # fmt: skip
    state = str(ws / STATE)  # a writer's own protocol: under `flock -x`, tmp then mv
    subprocess.run(["flock", "-x", state, "sh", "-c", 'cat > "$0.tmp" && mv "$0.tmp" "$0"', state],
                   input=json.dumps(stale).encode(), check=True, timeout=10)  # fmt: skip

    again = spawn_daemon([])  # type: ignore[operator]  # the workspace not read yet
    with EventStream(again) as events:
        mark = events.mark()
        answer = again.request({"op": "resume", "workspace": str(ws), "epic": EPIC,
                                "story": STORY})  # fmt: skip
        assert answer["ok"] is True, answer
        assert answer["source"] == "direct", "answered from a cache that had read it"
        assert _tasks(answer["findings"]) == [T2, T3], answer["findings"]  # type: ignore[arg-type]
        events.wait(lambda e: e["event"] == "drift" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
    ask = {"op": "resume", "workspace": str(ws), "epic": EPIC, "story": STORY}
    cached = wait_for(lambda: (got := again.request(ask))["source"] != "direct" and got,
                      message="an answer from the cache")  # the workspace's check lands
    assert _tasks(cached["findings"]) == [T2, T3]  # type: ignore[arg-type]
    miss = {f["task"]: f["message"] for f in answer["findings"] if f["code"] == "regressed"}  # type: ignore[union-attr]
    hit = {f["task"]: f["message"] for f in cached["findings"] if f["code"] == "regressed"}  # type: ignore[union-attr]
    assert miss == hit, "the miss and the hit word the loss alike"
