"""The `checkpoint` format (seed 004): phase.json, execution.json and the resume validation."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from format_harness import (
    Run,
    codes,
    copy_fixture,
    direct_envelope,
    load_one,
    resume_direct,
)
from format_harness import edit_json as edit

from storyd.api.answers import Options, resume_unit
from storyd.core.errors import DataError
from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.base import Source
from storyd.core.formats.checkpoint import ADAPTER, PHASES, STALE_AFTER
from storyd.core.isotime import parse_epoch
from storyd.core.model import DONE, PENDING, Unit

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoint"
STATE = "memory/state/phase.json"
EXECUTION = "memory/state/execution.json"


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _shift(value: object, delta: int, now: float) -> object:
    if isinstance(value, dict):
        return {k: _shift(v, delta, now) for k, v in value.items()}
    if isinstance(value, list):
        return [_shift(v, delta, now) for v in value]
    epoch = parse_epoch(value) if isinstance(value, str) and "T" in value else None
    return _iso(epoch + delta) if epoch is not None and epoch < now else value


def freshen(ws: Path) -> None:
    """Move the fixture's past timestamps forward so the newest is an hour ago.

    The fixtures keep the seed-era dates (January 2026); only the ancient-state tests
    want them old. Future timestamps are left alone.
    """
    now = time.time()
    files = [ws / STATE, ws / EXECUTION]
    docs = {f: orjson.loads(f.read_bytes()) for f in files if f.exists()}
    stamps: list[int] = []

    def collect(value: object) -> None:
        if isinstance(value, dict):
            for v in value.values():
                collect(v)
        elif isinstance(value, list):
            for v in value:
                collect(v)
        elif isinstance(value, str) and (e := parse_epoch(value)) is not None and e < now:
            stamps.append(e)

    for doc in docs.values():
        collect(doc)
    delta = int(now - 3600) - max(stamps)
    for path, doc in docs.items():
        path.write_bytes(orjson.dumps(_shift(doc, delta, now), option=orjson.OPT_INDENT_2))


@pytest.fixture
def workspace(tmp_path: Path) -> Callable[..., Path]:
    """Copy a fixture workspace into tmp_path; its timestamps made recent unless `fresh=False`."""

    def copy(name: str, *, fresh: bool = True) -> Path:
        dest = copy_fixture(FIXTURES / name, tmp_path / name, stamp=None)
        if fresh:
            freshen(dest)
        return dest

    return copy


def load(ws: Path) -> Unit:
    return load_one(ADAPTER, ws, STATE)


def envelope(ws: Path) -> dict[str, object]:
    return direct_envelope(ws, STATE)


class TestPaths:
    """phase.json is the state file; execution.json and reports are its companions."""

    @pytest.mark.parametrize(
        ("relpath", "expected"),
        [
            (STATE, True),
            (EXECUTION, False),
            ("memory/phase.json", False),
            ("x/memory/state/phase.json", False),
        ],
    )
    def test_matches(self, relpath: str, expected: bool) -> None:
        assert ADAPTER.matches(relpath) is expected

    @pytest.mark.parametrize(
        ("path", "owner"),
        [
            (EXECUTION, STATE),
            (f"{STATE}.tmp", STATE),
            (f"{EXECUTION}.tmp", STATE),
            ("memory/reports/designs/design-a.json", STATE),
            ("memory/state/.archive/wf_1/phase.json", None),
            ("memory/notes.md", None),
        ],
    )
    def test_owner(self, path: str, owner: str | None) -> None:
        assert ADAPTER.owner(path) == owner

    def test_registered_and_detected(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        (ws / "memory/state/.archive/wf-old_1").mkdir(parents=True)
        (ws / "memory/state/.archive/wf-old_1/phase.json").write_text("{}")
        assert builtin("checkpoint") is ADAPTER
        assert adapter_for(STATE) is ADAPTER
        assert ADAPTER.find(Source(str(ws))) == [STATE]


class TestSeedSchema:
    """The seed's phase.json schema with an execution checkpoint, in IMPLEMENTATION."""

    def test_happy(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        unit = load(ws)
        assert unit.findings == ()
        assert unit.key == "wf-geofencing-001"
        assert [t.id for t in unit.tasks] == list(PHASES)
        assert [t.bucket for t in unit.tasks] == [DONE, DONE, PENDING, PENDING, PENDING]
        assert unit.tasks[0].extra["output"] == "memory/reports/demand.json"
        assert envelope(ws) == {
            "resumePoint": "IMPLEMENTATION/task-002",
            "tasksCompleted": [
                {"id": "REQUIREMENTS", "commitSha": None},
                {"id": "ARCHITECTURE", "commitSha": None},
            ],
            "tasksPending": ["IMPLEMENTATION", "VERIFICATION", "REFLECTION"],
            "lastCommitSha": None,
            "staleWarnings": [],
        }
        assert unit.labels["progress"] == "2/5 (40%)"
        assert unit.labels["execution"] == "1/3 (33%)"
        assert (unit.labels["phase"], unit.labels["phase_status"]) == (
            "IMPLEMENTATION",
            "in_progress",
        )

    @pytest.mark.parametrize(
        ("name", "expected"),
        [("fresh", "fresh-start"), ("all-done", "all-done"), ("architecture", "ARCHITECTURE")],
    )
    def test_resume_points(self, workspace: Callable[..., Path], name: str, expected: str) -> None:
        ws = workspace(name)
        assert envelope(ws)["resumePoint"] == expected
        assert load(ws).findings == ()

    @pytest.mark.parametrize(
        ("statuses", "expected"),
        [
            (["complete", "pending", "running"], "IMPLEMENTATION/task-003"),
            (["complete", "pending", "pending"], "IMPLEMENTATION/task-002"),
            (["complete", "failed", "complete"], "IMPLEMENTATION/task-002"),
            (["complete", "complete", "complete"], "IMPLEMENTATION"),
        ],
    )
    def test_execution_task_to_resume(
        self, workspace: Callable[..., Path], statuses: list[str], expected: str
    ) -> None:
        ws = workspace("happy")

        def change(doc: dict[str, object]) -> None:
            for task, status in zip(doc["tasks"], statuses, strict=True):  # type: ignore[call-overload]
                task["status"] = status
                task["output"] = None

        edit(ws, EXECUTION, change)
        assert envelope(ws)["resumePoint"] == expected

    def test_completion_advances_then_marks_complete(self, workspace: Callable[..., Path]) -> None:
        """The seed's On Completion: current_phase advanced, phase_status complete."""
        ws = workspace("architecture")
        edit(ws, STATE, lambda d: d.update(current_phase="ARCHITECTURE", phase_status="complete"))
        unit = load(ws)
        assert unit.findings == ()
        assert unit.tasks[1].bucket == PENDING
        assert unit.tasks[1].extra == {"phase_status": "complete"}
        assert unit.resume_point == "ARCHITECTURE"

    def test_complete_before_advancing(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("architecture")
        edit(ws, STATE, lambda d: d.update(current_phase="REQUIREMENTS", phase_status="complete"))
        unit = load(ws)
        assert unit.findings == ()
        assert unit.resume_point == "ARCHITECTURE"

    def test_execution_tasks_keyed_by_id(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, EXECUTION, lambda d: d.update(tasks={"task-009": {"status": "running"}}))
        assert load(ws).resume_point == "IMPLEMENTATION/task-009"


class TestStatuses:
    """Phase and execution statuses, case-insensitive; unknown ones are findings."""

    @pytest.mark.parametrize(
        ("status", "known"),
        [("in_progress", True), ("PENDING", True), ("failed", True), ("paused", False), (3, False)],
    )
    def test_phase_status(
        self, workspace: Callable[..., Path], status: object, known: bool
    ) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(phase_status=status))
        unit = load(ws)
        assert unit.tasks[2].known is known
        assert ("unknown-status" in codes(unit)) is not known

    def test_failed_phase(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(phase_status="failed"))
        assert [(f.code, f.task) for f in load(ws).findings] == [("phase-failed", "IMPLEMENTATION")]

    @pytest.mark.parametrize(
        ("status", "bucket", "known"),
        [
            ("complete", DONE, True),
            ("Completed", DONE, True),
            ("running", PENDING, True),
            ("in_progress", PENDING, True),
            ("pending", PENDING, True),
            ("failed", PENDING, True),
            ("orphaned", PENDING, False),
        ],
    )
    def test_execution_status(
        self, workspace: Callable[..., Path], status: str, bucket: str, known: bool
    ) -> None:
        ws = workspace("happy")
        edit(ws, EXECUTION, lambda d: d.update(tasks=[{"id": "t1", "status": status}]))
        unit = load(ws)
        assert unit.labels["execution"] == ("1/1 (100%)" if bucket == DONE else "0/1 (0%)")
        assert ("unknown-status" in codes(unit)) is not known


class TestValidateStateIntegrity:
    """Seed Step 2: outputs exist, timestamps reasonable, progression valid, writes complete."""

    def test_missing_output(self, workspace: Callable[..., Path]) -> None:
        [found] = load(workspace("missing-output")).findings
        assert (found.code, found.severity, found.task) == (
            "missing-output",
            "warning",
            "ARCHITECTURE",
        )
        assert "memory/reports/final_design.json does not exist" in found.message

    def test_missing_task_output(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        (ws / "memory/reports/tasks/task-001.json").unlink()
        [found] = load(ws).findings
        assert (found.code, found.task) == ("missing-output", "task-001")

    def test_future_timestamp(self, workspace: Callable[..., Path]) -> None:
        [found] = load(workspace("future-timestamp")).findings
        assert (found.code, found.severity) == ("future-timestamp", "warning")
        assert found.message == "phase.json last_updated 2099-01-01T00:00:00Z is in the future"

    def test_small_clock_skew_is_tolerated(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(last_updated=_iso(time.time() + 60)))
        assert load(ws).findings == ()

    def test_future_execution_timestamp(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, EXECUTION, lambda d: d["tasks"][0].update(completed_at="2099-06-01T00:00:00Z"))  # type: ignore[index]
        [found] = load(ws).findings
        assert (found.code, found.task) == ("future-timestamp", "task-001")

    def test_malformed_timestamp(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(started_at="yesterday"))
        [found] = load(ws).findings
        assert found.code == "invalid-timestamp"

    def test_invalid_progression(self, workspace: Callable[..., Path]) -> None:
        [found] = load(workspace("invalid-progression")).findings
        assert (found.code, found.severity) == ("invalid-phase-progression", "error")
        assert found.message.startswith("completed_phases is REQUIREMENTS, IMPLEMENTATION;")

    @pytest.mark.parametrize(
        ("current", "status"),
        [
            ("VERIFICATION", "in_progress"),
            ("REQUIREMENTS", "in_progress"),
            ("ARCHITECTURE", "pending"),
        ],
    )
    def test_current_phase_out_of_order(
        self, workspace: Callable[..., Path], current: str, status: str
    ) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(current_phase=current, phase_status=status))
        assert [(f.code, f.task) for f in load(ws).findings] == [
            ("invalid-phase-progression", current)
        ]

    def test_duplicate_completed_phase(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d["completed_phases"].append(d["completed_phases"][0]))  # type: ignore[attr-defined,index]
        assert codes(load(ws)) == ["invalid-phase-progression"]

    def test_unknown_phase(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(current_phase="DEPLOYMENT"))
        assert codes(load(ws)) == ["unknown-phase"]

    def test_torn_checkpoint(self, workspace: Callable[..., Path]) -> None:
        unit = load(workspace("torn-checkpoint"))
        assert codes(unit) == ["stray-tmp", "torn-checkpoint"]
        [torn] = [f for f in unit.findings if f.code == "torn-checkpoint"]
        assert torn.severity == "error"
        assert "interruption_safe: false" in torn.message

    def test_torn_execution_checkpoint(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, EXECUTION, lambda d: d.update(interruption_safe=False))
        assert [f.message.split(":")[0] for f in load(ws).findings] == [
            "execution.json has interruption_safe"
        ]


class TestRecoveryScenarios:
    """The seed's recovery scenarios that the files alone can show."""

    def test_crash_after_write_before_state_update(self, workspace: Callable[..., Path]) -> None:
        unit = load(workspace("crash-after-write"))
        [found] = unit.findings
        assert (found.code, found.severity, found.task) == (
            "output-before-state-update",
            "warning",
            "task-002",
        )
        assert "memory/reports/tasks/task-002.json exists" in found.message
        assert unit.resume_point == "IMPLEMENTATION/task-002"

    def test_ctrl_c_during_subagent_is_a_plain_resume(self, workspace: Callable[..., Path]) -> None:
        """Scenario 1 (running, no output) is the normal resume, not a finding."""
        unit = load(workspace("happy"))
        assert unit.findings == ()
        assert unit.resume_point == "IMPLEMENTATION/task-002"

    def test_ancient_state(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("ancient", fresh=False)
        [found] = load(ws).findings
        assert (found.code, found.severity) == ("ancient-state", "warning")
        assert found.message.startswith(
            "phase.json last_updated 2026-01-20T11:40:00Z is more than 7 days old"
        )

    def test_ancient_is_measured_from_last_activity(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(started_at=_iso(time.time() - 30 * 86400)))
        assert load(ws).findings == ()

    def test_just_inside_the_limit(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(last_updated=_iso(time.time() - STALE_AFTER + 600)))
        assert load(ws).findings == ()

    def test_finished_workflow_is_never_ancient(self, workspace: Callable[..., Path]) -> None:
        assert load(workspace("all-done", fresh=False)).findings == ()

    def test_execution_from_another_workflow(self, workspace: Callable[..., Path]) -> None:
        [found] = load(workspace("workflow-mismatch")).findings
        assert (found.code, found.severity) == ("workflow-mismatch", "warning")

    def test_torn_execution_json(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("architecture")
        shutil.copy(FIXTURES / "torn-execution" / EXECUTION, ws / EXECUTION)
        unit = load(ws)
        [found] = unit.findings
        assert (found.code, found.severity) == ("invalid-execution", "error")
        assert found.message.startswith(f"{EXECUTION}: invalid JSON")
        assert unit.resume_point == "ARCHITECTURE"


class TestMalformed:
    """Bad JSON is exit 65 naming the file; nodes of the wrong shape are unit errors."""

    @pytest.mark.parametrize("data", [b"", b"{", b"[1]", b'{"current_phase": '])
    def test_torn_phase_json(self, workspace: Callable[..., Path], data: bytes) -> None:
        ws = workspace("happy")
        (ws / STATE).write_bytes(data)
        with pytest.raises(DataError, match=rf"^{STATE}: "):
            load(ws)

    @pytest.mark.parametrize(
        ("value", "where"),
        [
            ("REQUIREMENTS", "completed_phases: expected an array, got a string"),
            ([{"output": "x"}], "completed_phases[0]: expected an object with a phase name"),
            ([5], "completed_phases[0]: expected an object with a phase name"),
        ],
    )
    def test_unit_error(self, workspace: Callable[..., Path], value: object, where: str) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(completed_phases=value))
        assert load(ws).error == f"{STATE}: {where}"
        with pytest.raises(DataError) as raised:
            resume_unit(str(ws), STATE, None, Options())
        assert raised.value.message == f"{STATE}: {where}"

    def test_bare_phase_names_are_accepted(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        edit(ws, STATE, lambda d: d.update(completed_phases=["REQUIREMENTS", "ARCHITECTURE"]))
        assert load(ws).findings == ()

    @pytest.mark.parametrize("tasks", ["x", [1, {"id": "t", "status": "running"}]])
    def test_odd_execution_tasks(self, workspace: Callable[..., Path], tasks: object) -> None:
        ws = workspace("happy")
        edit(ws, EXECUTION, lambda d: d.update(tasks=tasks))
        assert "invalid-execution" in codes(load(ws))

    def test_odd_field_types_never_raise(self, workspace: Callable[..., Path]) -> None:
        ws = workspace("happy")
        odd = {"user_checkpoints": 5, "workflow_id": 7, "current_phase": ["x"], "started_at": 12}
        edit(ws, STATE, lambda d: d.update(odd))
        unit = load(ws)
        assert unit.key == "workflow"
        assert "invalid-timestamp" in codes(unit)


class TestCli:
    """`storyd resume --state-file … --direct` answers through the real process."""

    def test_resume(self, workspace: Callable[..., Path], run_storyd: Run) -> None:
        ws = workspace("happy")
        done = resume_direct(run_storyd, ws, STATE)
        assert (done.returncode, done.stderr) == (0, b"")
        assert orjson.loads(done.stdout)["resumePoint"] == "IMPLEMENTATION/task-002"

    def test_detail(self, workspace: Callable[..., Path], run_storyd: Run) -> None:
        ws = workspace("torn-checkpoint")
        done = resume_direct(run_storyd, ws, STATE, "--detail")
        assert done.returncode == 0
        assert sorted(f["code"] for f in orjson.loads(done.stdout)["findings"]) == [
            "stray-tmp",
            "torn-checkpoint",
        ]

    def test_torn_exits_65(self, workspace: Callable[..., Path], run_storyd: Run) -> None:
        ws = workspace("happy")
        (ws / STATE).write_bytes(b'{"workflow_id": "wf-')
        done = resume_direct(run_storyd, ws, STATE)
        assert (done.returncode, done.stdout) == (65, b"")
        assert done.stderr.startswith(f"{STATE}: invalid JSON".encode())
        assert b"Traceback" not in done.stderr
