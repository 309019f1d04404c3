"""A cache miss tells the progress a version lost, as the cached answer does.

A query that arrives before the cache has read a new version (the workspace not read
yet, a write just made) is read directly; its answer carries the `regressed` findings the
installer's build will give the cached one (`Recorder.peek`), and looking moves no mark.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import EventStream, daemon_env, held_daemon, wait_for, write_config
from epic_state_harness import STATE, write_epic
from git_harness import GitWorkspace
from recorder_harness import STORY, T1, T2, T3, recorder, unit

EPIC = "0049"


def _tasks(found: tuple[object, ...] | list[dict[str, object]]) -> list[str]:
    return sorted(str(f["task"] if isinstance(f, dict) else f.task) for f in found
                  if (f["code"] if isinstance(f, dict) else f.code) == "regressed")


def _one_of_three_done(ws: Path) -> Path:
    write_epic(ws, EPIC, tasks={STORY: {T1: {"status": "DONE"}, T2: {"status": "PENDING"},
                                        T3: {"status": "PENDING"}}})  # fmt: skip
    return ws


class TestPeek:
    """The recorder's read-only look, against what its build gives."""

    def test_a_peek_gives_what_the_build_will_and_moves_nothing(self, tmp_path: Path) -> None:
        rec = recorder(tmp_path / "h.sqlite3")
        rec.start()
        ws = str(_one_of_three_done(tmp_path / "ws"))  # the file, as the loss left it
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

    def test_a_file_a_writer_holds_is_left_to_the_build(self, tmp_path: Path) -> None:
        """The look reads the file again (a read half written is no loss): while a writer
        holds it past PEEK_LOCK the query does not wait out the lock timeout; it tells
        nothing and the build after the write judges. Once free, the loss is told."""
        from storyd.server.recorder import PEEK_LOCK

        ws = _one_of_three_done(tmp_path / "ws")
        rec = recorder(tmp_path / "h.sqlite3")
        rec.start()
        holder = subprocess.Popen(["flock", "-x", str(ws / STATE), "-c", "echo held; read x"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        try:
            assert rec.regressed(str(ws), unit(3)) == ()
            assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
            started = time.monotonic()
            assert rec.peek(str(ws), unit(1)) == ()
            assert time.monotonic() - started < PEEK_LOCK + 1.0, "waited out the lock"
        finally:
            holder.communicate(b"\n", timeout=10)
            rec.close()
        assert _tasks(rec.peek(str(ws), unit(1))) == [T2, T3]

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


def _lost_while_away(tmp_path: Path, spawn_daemon: object) -> Path:
    """A workspace whose story a daemon saw with three tasks done; after it stopped, a
    writer's stale copy undid the last two (under `flock -x`, tmp then mv)."""
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
    state = str(ws / STATE)
    subprocess.run(["flock", "-x", state, "sh", "-c", 'cat > "$0.tmp" && mv "$0.tmp" "$0"', state],
                   input=json.dumps(stale).encode(), check=True, timeout=10)  # fmt: skip
    return ws


def _asked(daemon: object, ws: Path) -> dict[str, object]:
    answer = daemon.request({"op": "resume", "workspace": str(ws), "epic": EPIC,  # type: ignore[attr-defined]
                             "story": STORY})  # fmt: skip
    assert answer["ok"] is True, answer
    return answer  # type: ignore[no-any-return]


def _cached(daemon: object, ws: Path) -> dict[str, object]:
    """The answer once the cache gives it (the workspace's check has landed)."""
    return wait_for(lambda: (got := _asked(daemon, ws))["source"] != "direct" and got,
                    message="an answer from the cache")  # fmt: skip


def _order(answer: dict[str, object]) -> list[tuple[object, ...]]:
    """Each finding's detector, code and task, in the answer's order."""
    return [(f["detector"], f["code"], f.get("task"))  # type: ignore[index, union-attr]
            for f in answer["findings"]]  # type: ignore[union-attr]


def _worded(answer: dict[str, object]) -> dict[str, str]:
    return {f["task"]: f["message"] for f in answer["findings"]  # type: ignore[union-attr]
            if f["code"] == "regressed"}  # fmt: skip


@pytest.mark.slow
def test_the_first_answer_on_a_workspace_tells_the_progress_lost_while_it_was_away(
        tmp_path: Path, spawn_daemon: object) -> None:
    """The next daemon is first asked about the workspace: a miss, read directly, told
    the loss, in the words the cached answer then uses."""
    ws = _lost_while_away(tmp_path, spawn_daemon)
    again = spawn_daemon([])  # type: ignore[operator]  # the workspace not read yet
    with EventStream(again) as events:
        mark = events.mark()
        answer = _asked(again, ws)
        assert answer["source"] == "direct", "answered from a cache that had read it"
        assert _tasks(answer["findings"]) == [T2, T3], answer["findings"]  # type: ignore[arg-type]
        events.wait(lambda e: e["event"] == "drift" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
    cached = _cached(again, ws)
    assert _tasks(cached["findings"]) == [T2, T3]  # type: ignore[arg-type]
    assert _worded(answer) == _worded(cached), "the miss and the hit word the loss alike"
    assert _order(answer) == _order(cached), "the miss and the hit list them alike"
    detail = run_storyd_cli("resume", "--direct", "--detail", "--workspace", str(ws),
                            "--epic-id", EPIC, "--story-id", STORY, env=again.env)  # fmt: skip
    assert _order(json.loads(detail.stdout)) == _order(cached), "and so does --detail"


@pytest.mark.slow
def test_the_early_door_tells_the_progress_lost_while_no_daemon_ran(
        tmp_path: Path, spawn_daemon: object) -> None:
    """Before the daemon is built (no recorder, no marks in memory), the door's answer
    reads the database, as `storyd resume --direct --detail` does."""
    ws = _lost_while_away(tmp_path, spawn_daemon)
    with held_daemon(tmp_path, [ws]) as (daemon, gate):
        early = _asked(daemon, ws)
        assert str(early["clock"]).endswith(":0"), "answered by the daemon, not the door"
        assert _tasks(early["findings"]) == [T2, T3], early["findings"]  # type: ignore[arg-type]
        gate.touch()
        cached = _cached(daemon, ws)
    assert _worded(early) == _worded(cached)
    assert _order(early) == _order(cached)


@pytest.mark.slow
def test_history_off_is_off_for_every_reader(tmp_path: Path, spawn_daemon: object) -> None:
    """[history] enabled = false: the daemon records nothing, so no reader tells a loss
    from the database an earlier daemon left: not the door, a miss, the cache or
    `--detail`."""
    ws = _lost_while_away(tmp_path, spawn_daemon)
    write_config(tmp_path, "[history]\nenabled = false\n")
    with held_daemon(tmp_path, [ws]) as (daemon, gate):
        assert _tasks(_asked(daemon, ws)["findings"]) == []  # type: ignore[arg-type]
        gate.touch()
        assert _tasks(_cached(daemon, ws)["findings"]) == []  # type: ignore[arg-type]
    detail = run_storyd_cli("resume", "--direct", "--detail", "--workspace", str(ws),
                            "--epic-id", EPIC, "--story-id", STORY, env=daemon.env)  # fmt: skip
    assert detail.returncode == 0, detail.stderr
    assert _tasks(json.loads(detail.stdout)["findings"]) == []


@pytest.mark.slow
def test_a_configured_database_is_the_one_every_reader_reads(
        tmp_path: Path, spawn_daemon: object) -> None:
    """[history] path moves the database: the commands that read it without a daemon
    (history, resume --detail, check) read that one, not the default."""
    custom = tmp_path / "elsewhere" / "h.sqlite3"
    write_config(tmp_path, f'[history]\npath = "{custom}"\n')
    ws = _lost_while_away(tmp_path, spawn_daemon)
    assert custom.exists()
    assert not (tmp_path / "state" / "storyd" / "history.sqlite3").exists()
    env = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    detail = run_storyd_cli("resume", "--direct", "--detail", "--workspace", str(ws),
                            "--epic-id", EPIC, "--story-id", STORY, env=env)  # fmt: skip
    assert _tasks(json.loads(detail.stdout)["findings"]) == [T2, T3], detail.stdout
    check = run_storyd_cli("check", "--direct", "--workspace", str(ws), env=env)
    assert check.returncode == 1 and check.stdout.count(b"regressed") == 2, check.stdout
    listed = run_storyd_cli("history", "--workspace", str(ws), "--epic-id", EPIC,
                            "--story-id", STORY, "--json", env=env)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["done"] for line in listed.stdout.splitlines()] == [3]


@pytest.mark.slow
def test_the_config_file_given_is_the_one_whose_history_is_read(
        tmp_path: Path, spawn_daemon: object) -> None:
    """`--config FILE` names the history as it names the staleness and the cap: one with
    [history] off tells no loss, where the default configuration's database does."""
    ws = _lost_while_away(tmp_path, spawn_daemon)
    env = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    off = tmp_path / "off.toml"
    off.write_text("[history]\nenabled = false\n")
    argv = ("resume", "--direct", "--detail", "--workspace", str(ws), "--epic-id", EPIC,
            "--story-id", STORY)  # fmt: skip
    told = run_storyd_cli(*argv, env=env)
    quiet = run_storyd_cli(*argv, "--config", str(off), env=env)
    assert (told.returncode, quiet.returncode) == (0, 0), told.stderr + quiet.stderr
    assert _tasks(json.loads(told.stdout)["findings"]) == [T2, T3]
    assert _tasks(json.loads(quiet.stdout)["findings"]) == []
