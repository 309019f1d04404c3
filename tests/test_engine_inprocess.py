"""The engine in process: reads, unreadable files, drift and resolved, removal, replay.

No daemon, no socket: an Engine on real files in tmp_path, so a failure here names the
module. Detectors are plain functions handed to the engine, as `detection` hands it the
Runner's; one class runs the real commit-in-history detector on a real Runner against a
real git repository.
"""

from __future__ import annotations

import fcntl
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from epic_state_harness import task_id, write_epic
from git_harness import GitWorkspace

from storyd.api.answers import Answer, Options
from storyd.core.model import Finding, Unit
from storyd.detectors.gitview import close_views, git_context
from storyd.detectors.history import DETECTOR as HISTORY
from storyd.detectors.runner import Runner
from storyd.server.engine import Engine, Look, Workspace

REL = "plans/epic-0049/execution-state.json"
S1, S2 = "story-0049-0001", "story-0049-0002"
PENDING = {"T1": {"status": "pending"}}
DONE = {"T1": {"status": "done", "commitSha": "a" * 40}}


def _flag_done(workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
    """A detector: one warning per DONE task (stands for commit-in-history)."""
    return tuple(
        Finding("probe", "done-task", "warning", f"{t.id} is done", t.id, {"commit": "x"})
        for t in unit.tasks
        if t.done
    )


@pytest.fixture
def space(tmp_path: Path) -> tuple[Engine, Workspace, Path]:
    root = tmp_path / "ws"
    write_epic(root, "0049", tasks={S1: PENDING, S2: PENDING})
    engine = Engine(Options(staleness="mtime"), detect=_flag_done)
    ws = engine.add_workspace(str(root))
    engine.scan(ws)
    return engine, ws, root


def _events(engine: Engine) -> list[dict[str, object]]:
    captured: list[dict[str, object]] = []
    engine.log.sinks.append(lambda event, _line: captured.append(event))
    return captured


def _write(root: Path, stories: dict[str, dict[str, dict[str, object]]]) -> None:
    state = write_epic(root, "0049", tasks=stories)
    stamp = os.stat(state).st_mtime_ns + 10_000_000  # a new signature even on coarse clocks
    os.utime(state, ns=(stamp, stamp))


class TestReading:
    def test_every_unit_is_cached_with_its_envelope(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, ws, root = space
        entry = engine.lookup(str(root), REL, S1)
        assert entry is not None and entry.error is None
        assert entry.resume_point == "fresh-start"  # the seed's word for nothing done yet
        assert sorted(k for _, k in ws.entries) == [S1, S2]
        assert engine.epic_file(str(root), "0049") == REL

    def test_an_unknown_unit_is_none_and_never_read(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, _ws, root = space
        assert engine.lookup(str(root), REL, "story-0049-0099") is None
        assert engine.lookup(str(root) + "-other", REL, S1) is None

    def test_torn_json_keeps_the_last_good_entry_with_an_unreadable_finding(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, ws, root = space
        good = engine.lookup(str(root), REL, S1)
        assert good is not None
        (root / REL).write_bytes(b'{"epic": "0049", "stories": {')
        engine.touch(ws, REL)
        kept = engine.lookup(str(root), REL, S1)
        assert kept is not None
        assert kept.line == good.line  # the last good answer is still served
        codes = [(f.detector, f.code) for f in kept.findings]
        assert ("engine", "state-unreadable") in codes
        assert engine.counters["unreadable"] == 1

    def test_a_file_that_parses_again_drops_the_unreadable_finding(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, ws, root = space
        (root / REL).write_bytes(b"not json")
        engine.touch(ws, REL)
        _write(root, {S1: DONE, S2: PENDING})
        engine.touch(ws, REL)
        entry = engine.lookup(str(root), REL, S1)
        assert entry is not None
        assert [f.code for f in entry.findings] == ["done-task"]
        assert entry.resume_point == "all-done"

    def test_a_deleted_file_removes_its_units(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, ws, root = space
        events = _events(engine)
        (root / REL).unlink()
        engine.scan(ws)
        assert engine.entries(str(root)) == []
        assert sorted(str(e["unit"]) for e in events if e["event"] == "removed") == [S1, S2]


    def test_a_lock_held_past_the_bound_marks_the_file_until_it_is_free(
        self, tmp_path: Path
    ) -> None:
        """A writer holding flock(2) past `lock_timeout`: the last good answer stays, with
        an unreadable finding (a drift event); once the lock is free it is resolved."""
        root = tmp_path / "ws"
        write_epic(root, "0049", tasks={S1: PENDING})
        engine = Engine(Options(lock_timeout=0.05, staleness="mtime"), detect=_flag_done)
        ws = engine.add_workspace(str(root))
        engine.scan(ws)
        good = engine.lookup(str(root), REL, S1)
        assert good is not None
        events = _events(engine)
        with open(root / REL, "rb") as writer:  # its own open file: flock(2) conflicts
            fcntl.flock(writer, fcntl.LOCK_EX)
            try:
                engine.touch(ws, REL)
            finally:
                fcntl.flock(writer, fcntl.LOCK_UN)
        held = engine.lookup(str(root), REL, S1)
        assert held is not None and held.line == good.line
        [marker] = held.findings
        assert (marker.detector, marker.code, marker.severity) == (
            "engine", "state-unreadable", "error"
        )
        assert marker.message.startswith(f"{REL} unreadable since ")
        # a miss reads directly meanwhile
        assert not engine.known_absent(str(root), REL, "story-0049-0099")
        drift = [e for e in events if e["event"] == "drift"]
        assert [e["finding"]["code"] for e in drift] == ["state-unreadable"]  # type: ignore[index]
        engine.touch(ws, REL)
        free = engine.lookup(str(root), REL, S1)
        assert free is not None and free.findings == ()
        resolved = [e for e in events if e["event"] == "resolved"]
        assert [e["finding"]["code"] for e in resolved] == ["state-unreadable"]  # type: ignore[index]
        assert engine.known_absent(str(root), REL, "story-0049-0099")

    def test_a_file_never_read_well_has_no_units_and_is_read_directly(
        self, tmp_path: Path
    ) -> None:
        root = tmp_path / "ws"
        (root / "plans" / "epic-0049").mkdir(parents=True)
        (root / REL).write_bytes(b'{"epic": "0049", "stori')
        engine = Engine(Options(staleness="mtime"), detect=_flag_done)
        events = _events(engine)
        ws = engine.add_workspace(str(root))
        assert engine.scan(ws) == 1
        assert engine.entries(str(root)) == [] and events == []
        assert engine.counters["unreadable"] == 1
        # known, so an epic query finds its file, but never good: no cached "not there"
        assert engine.epic_file(str(root), "0049") == REL
        assert not engine.known_absent(str(root), REL, "story-0049-0099")
        assert engine.lookup(str(root), REL, S1) is None


class TestDriftAndResolved:
    def test_a_new_finding_is_drift_and_a_gone_one_resolved(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, ws, root = space
        events = _events(engine)
        _write(root, {S1: DONE, S2: PENDING})
        engine.touch(ws, REL)
        drift = [e for e in events if e["event"] == "drift"]
        assert [(e["unit"], e["finding"]["code"]) for e in drift] == [(S1, "done-task")]  # type: ignore[index]
        assert drift[0]["finding"]["evidence"] == {"commit": "x"}  # type: ignore[index]
        _write(root, {S1: PENDING, S2: PENDING})
        engine.touch(ws, REL)
        resolved = [e for e in events if e["event"] == "resolved"]
        assert [(e["unit"], e["finding"]["code"]) for e in resolved] == [(S1, "done-task")]  # type: ignore[index]

    def test_an_unchanged_unit_emits_nothing(self, space: tuple[Engine, Workspace, Path]) -> None:
        engine, ws, root = space
        events = _events(engine)
        before = engine.lookup(str(root), REL, S2)
        _write(root, {S1: DONE, S2: PENDING})
        engine.touch(ws, REL)
        assert {e["unit"] for e in events} == {S1}
        assert engine.lookup(str(root), REL, S2) is before  # same entry, not rebuilt

    def test_a_detector_that_raises_never_stops_the_read(self, tmp_path: Path) -> None:
        def broken(_ws: str, _unit: Unit, _answer: Answer) -> tuple[Finding, ...]:
            raise RuntimeError("boom")

        root = tmp_path / "ws"
        write_epic(root, "0049", tasks={S1: PENDING})
        engine = Engine(Options(staleness="mtime"), detect=broken)
        ws = engine.add_workspace(str(root))
        with pytest.raises(RuntimeError):
            engine.scan(ws)  # the Runner turns this into a finding; the raw callback raises


@pytest.fixture
def history_runner() -> Iterator[Runner]:
    """The real commit-in-history detector on a real Runner with real git views."""
    runner = Runner([HISTORY], context_factory=git_context, on_exit=close_views)
    try:
        yield runner
    finally:
        runner.close()


class TestRealDetector:
    """Drift and resolved from commit-in-history against a real repository."""

    def test_a_reset_branch_drifts_and_restoring_it_resolves(
        self, tmp_path: Path, history_runner: Runner
    ) -> None:
        repo = GitWorkspace(tmp_path / "ws").init()
        shas = repo.tasks_commits(S1, 2)
        repo.record({S1: shas})
        root = str(repo.path)

        def detect(workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
            return history_runner.run(workspace, unit, answer.envelope, "mtime")

        engine = Engine(Options(staleness="mtime"), detect=detect)
        ws = engine.add_workspace(root)
        engine.scan(ws)
        clean = engine.lookup(root, REL, S1)
        assert clean is not None and clean.findings == ()
        events = _events(engine)

        repo.git("reset", "-q", "--hard", "HEAD~1")  # the second task's commit is gone
        engine.recheck(ws)  # what the refresher does on a git change
        drift = [e for e in events if e["event"] == "drift"]
        assert [
            (e["finding"]["detector"], e["finding"]["code"], e["finding"]["task"])  # type: ignore[index]
            for e in drift
        ] == [("commit-in-history", "unreachable", task_id(S1, 2))]
        assert drift[0]["finding"]["evidence"]["commit"] == shas[1]  # type: ignore[index]
        stale = engine.lookup(root, REL, S1)
        assert stale is not None and stale.generation > clean.generation

        del events[:]
        repo.git("reset", "-q", "--hard", shas[1])
        engine.recheck(ws)
        assert [(e["event"], e["unit"]) for e in events] == [
            ("changed", S1), ("resolved", S1)
        ]
        assert events[1]["finding"] == drift[0]["finding"]
        healed = engine.lookup(root, REL, S1)
        assert healed is not None and healed.findings == ()


class TestPasses:
    def test_a_recheck_is_one_pass_even_when_a_detector_raises(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, ws, _root = space
        calls: list[bool] = []
        engine.use_detectors(engine.detect, calls.append)
        engine.recheck(ws)
        assert calls == [True, False]

        def broken(_ws: str, _unit: Unit, _answer: Answer) -> tuple[Finding, ...]:
            raise RuntimeError("boom")

        engine.use_detectors(broken, calls.append)
        with pytest.raises(RuntimeError):
            engine.recheck(ws)
        assert calls == [True, False, True, False]


class TestFirstLook:
    """A workspace's first read (and a warm-up's detectors' pass) is its first look: its
    events report what was there, and its end is announced once, with what it found."""

    def _engine(self, found: list[Look]) -> Engine:
        engine = Engine(Options(staleness="mtime"), detect=_flag_done)
        engine.looks.append(found.append)
        return engine

    def test_a_watch_ends_its_first_look_with_the_first_scan(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        write_epic(root, "0049", tasks={S1: DONE, S2: PENDING})
        found: list[Look] = []
        engine = self._engine(found)
        ws = engine.add_workspace(str(root))
        looking: list[bool] = []
        engine.log.sinks.append(lambda event, _line: looking.append(engine.in_first_look(ws.path)))
        assert engine.in_first_look(ws.path) is True
        engine.scan(ws)
        assert looking and all(looking), "the first scan's events are the first look's"
        assert found == [Look(ws.path, 2, 1, {"warning": 1})]
        assert engine.in_first_look(ws.path) is False
        looking.clear()
        _write(root, {S1: DONE, S2: DONE})
        engine.touch(ws, REL)
        assert looking and not any(looking), "a later change is not the first look"
        engine.scan(ws, lost=True)
        assert len(found) == 1, "announced once"

    def test_a_warm_up_ends_it_after_the_detectors_pass(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        write_epic(root, "0049", tasks={S1: DONE, S2: DONE})
        found: list[Look] = []
        engine = self._engine(found)
        ws = engine.add_workspace(str(root), checked=False)
        engine.scan(ws)
        assert found == [] and engine.in_first_look(ws.path), "the detectors have not run"
        engine.check(ws)
        assert found == [Look(ws.path, 2, 2, {"warning": 2}, at_start=True)]
        assert engine.in_first_look(ws.path) is False

    def test_a_unit_with_only_info_is_not_out_of_step(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        write_epic(root, "0049", tasks={S1: DONE, S2: PENDING})

        def info_or_warning(workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
            severity = "warning" if unit.tasks[0].done else "info"
            return (Finding("probe", "note", severity, f"{unit.key} noted"),)

        found: list[Look] = []
        engine = Engine(Options(staleness="mtime"), detect=info_or_warning)
        engine.looks.append(found.append)
        engine.scan(engine.add_workspace(str(root)))
        assert found == [Look(str(root), 2, 1, {"warning": 1, "info": 1})]

    def test_a_workspace_removed_mid_look_announces_nothing(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        write_epic(root, "0049", tasks={S1: DONE})
        found: list[Look] = []
        engine = self._engine(found)
        ws = engine.add_workspace(str(root), checked=False)
        engine.scan(ws)
        assert engine.remove_workspace(ws.path) is True
        assert [f.last for f in found] == [True], "only its last look is announced"
        assert engine.in_first_look(ws.path) is False


class TestRemoveWorkspace:
    """Defect 7: unwatch emitted no `removed` events and did not move the clock."""

    def test_each_unit_leaves_with_removed_and_resolved_at_its_own_generation(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, ws, root = space
        _write(root, {S1: DONE, S2: PENDING})
        engine.touch(ws, REL)
        since = engine.log.clock()
        events = _events(engine)
        assert engine.remove_workspace(str(root)) is True
        removed = [e for e in events if e["event"] == "removed"]
        assert sorted(str(e["unit"]) for e in removed) == [S1, S2]
        assert len({e["generation"] for e in removed}) == 2
        resolved = [e for e in events if e["event"] == "resolved"]
        assert [(e["unit"], e["finding"]["code"]) for e in resolved] == [(S1, "done-task")]  # type: ignore[index]
        replay = engine.log.replay(since, None)
        assert replay is not None
        assert [orjson.loads(line)["event"] for line in replay] == [
            e["event"] for e in events
        ]
        assert engine.workspaces == {}
        assert engine.lookup(str(root), REL, S1) is None

    def test_an_unknown_workspace_is_false_and_silent(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, _ws, root = space
        events = _events(engine)
        generation = engine.log.generation
        assert engine.remove_workspace(str(root) + "-nope") is False
        assert events == [] and engine.log.generation == generation


class TestReplay:
    def test_since_now_replays_nothing(self, space: tuple[Engine, Workspace, Path]) -> None:
        engine, _ws, _root = space
        assert engine.log.replay(engine.log.clock(), None) == []

    def test_since_in_the_future_is_a_fresh_instance(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, _ws, _root = space
        assert engine.log.replay(f"{engine.log.instance}:{engine.log.generation + 5}", None) is None

    def test_another_instance_or_a_garbled_clock_is_a_fresh_instance(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        engine, _ws, _root = space
        assert engine.log.replay("00000000:1", None) is None
        assert engine.log.replay(f"{engine.log.instance}:x", None) is None
        assert engine.log.replay(f"{engine.log.instance}:-1", None) is None

    def test_replay_filters_by_workspace(self, space: tuple[Engine, Workspace, Path]) -> None:
        engine, ws, root = space
        since = engine.log.clock()
        _write(root, {S1: DONE, S2: PENDING})
        engine.touch(ws, REL)
        assert engine.log.replay(since, str(root))
        assert engine.log.replay(since, "/elsewhere") == []

    def test_a_generation_cut_by_the_history_cap_is_not_replayed_in_part(
        self, space: tuple[Engine, Workspace, Path]
    ) -> None:
        """S1's change makes two lines of one generation (changed, drift); with room for
        only three lines, the next change pushes out one of them. A client whose clock
        is just before that generation would get half of it: it must start fresh, while
        a clock at that generation or later still replays."""
        engine, ws, root = space
        engine.log.history = deque(maxlen=3)
        before = engine.log.generation
        _write(root, {S1: DONE, S2: PENDING})
        engine.touch(ws, REL)  # changed + drift for S1, one generation
        first = engine.log.generation
        assert first == before + 1
        _write(root, {S1: DONE, S2: DONE})
        engine.touch(ws, REL)  # changed + drift for S2: the cap drops S1's changed line
        assert engine.log.replay(f"{engine.log.instance}:{before}", None) is None
        kept = engine.log.replay(f"{engine.log.instance}:{first}", None)
        assert kept is not None
        assert [orjson.loads(line)["unit"] for line in kept] == [S2, S2]

    def test_warm_up_events_are_not_kept_and_a_clock_before_them_starts_fresh(
        self, tmp_path: Path
    ) -> None:
        root = tmp_path / "ws"
        write_epic(root, "0049", tasks={S1: DONE})
        engine = Engine(Options(staleness="mtime"), detect=_flag_done)
        start = engine.log.clock()
        ws = engine.add_workspace(str(root), checked=False)
        engine.scan(ws)
        engine.check(ws)
        assert engine.log.replay(start, None) is None
        assert engine.log.replay(engine.log.clock(), None) == []

    def test_since_at_a_full_history_that_dropped_nothing_replays_everything(
        self, tmp_path: Path
    ) -> None:
        """The cap boundary: a history exactly full has lost nothing yet."""
        engine, _ws, _root = _capped(tmp_path, 2)
        assert len(engine.log.history) == engine.log.history.maxlen == 2
        assert _replayed(engine, 0, "unit") == [S1, S2]

    def test_the_first_line_past_the_cap_moves_the_boundary_by_one_generation(
        self, tmp_path: Path
    ) -> None:
        engine, ws, root = _capped(tmp_path, 2)
        _write(root, {S1: DONE, S2: PENDING})
        engine.touch(ws, REL)  # generation 3 pushes out generation 1's only line
        assert engine.log.generation == 3
        assert _replayed(engine, 0) is None
        assert _replayed(engine, 1) == [2, 3]
        assert _replayed(engine, 2) == [3]

    def test_since_older_than_the_whole_history_starts_fresh(self, tmp_path: Path) -> None:
        engine, ws, root = _capped(tmp_path, 2)
        for stories in ({S1: DONE, S2: PENDING}, {S1: DONE, S2: DONE}, {S1: PENDING, S2: DONE}):
            _write(root, stories)
            engine.touch(ws, REL)
        oldest_kept = engine.log.history[0][0]
        assert oldest_kept > 2  # every line of generations 1 and 2 is gone
        for since in range(oldest_kept - 1):
            assert _replayed(engine, since) is None, since
        assert _replayed(engine, oldest_kept - 1) == [oldest_kept, oldest_kept + 1]


def _capped(tmp_path: Path, lines: int) -> tuple[Engine, Workspace, Path]:
    """An engine without detectors (one event line per generation) whose history holds
    `lines` lines, after a first scan of two pending units (generations 1 and 2)."""
    root = tmp_path / "ws"
    write_epic(root, "0049", tasks={S1: PENDING, S2: PENDING})
    engine = Engine(Options(staleness="mtime"))
    engine.log.history = deque(maxlen=lines)
    ws = engine.add_workspace(str(root))
    engine.scan(ws)
    assert engine.log.generation == 2
    return engine, ws, root


def _replayed(engine: Engine, since: int, field: str = "generation") -> list[object] | None:
    """One field of each line `replay` gives after generation `since`, or None (fresh)."""
    lines = engine.log.replay(f"{engine.log.instance}:{since}", None)
    return None if lines is None else [orjson.loads(line)[field] for line in lines]
