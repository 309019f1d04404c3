"""The `session` format (seed 001): steps, sub_step resume, migration, .bak and .tmp."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from format_harness import Run, codes, copier, direct_line, load_one, resume_direct

from storyd.api.answers import Options, resume_unit
from storyd.core.errors import DataError
from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.base import Source
from storyd.core.formats.session import ADAPTER
from storyd.core.model import DONE, PENDING, Unit

FIXTURES = Path(__file__).parent / "fixtures" / "session"
PROJECT = "agent-output/my-project"
STATE = f"{PROJECT}/00-session-state.json"
FULL_LINE = (
    b'{"resumePoint":"step-2:phase_2_waf","tasksCompleted":[{"id":"step-1","commitSha":null}],'
    b'"tasksPending":["step-2","step-3","step-4","step-5","step-6","step-7"],'
    b'"lastCommitSha":null,"staleWarnings":[]}\n'
)


@pytest.fixture
def workspace(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a fixture workspace into tmp_path, every file dated 2026-01-01."""
    return copier(FIXTURES, tmp_path)


def load(ws: Path) -> Unit:
    return load_one(ADAPTER, ws, STATE)


def answer_line(ws: Path) -> bytes:
    return direct_line(ws, STATE, staleness="mtime")


def write_state(ws: Path, state: dict[str, object]) -> None:
    (ws / STATE).write_bytes(orjson.dumps(state))


def steps_state(steps: dict[str, object], **top: object) -> dict[str, object]:
    return {"schema_version": "3.0", "project": "my-project", **top, "steps": steps}


class TestPaths:
    """The adapter claims agent-output/<project>/00-session-state.json and its companions."""

    @pytest.mark.parametrize(
        ("relpath", "expected"),
        [
            (STATE, True),
            ("agent-output/other/00-session-state.json", True),
            ("agent-output/00-session-state.json", False),
            ("agent-output/p/sub/00-session-state.json", False),
            ("agent-output/.hidden/00-session-state.json", False),
            (f"{STATE}.bak", False),
            ("plans/epic-0001/execution-state.json", False),
        ],
    )
    def test_matches(self, relpath: str, expected: bool) -> None:
        assert ADAPTER.matches(relpath) is expected

    @pytest.mark.parametrize(
        "companion",
        [
            f"{STATE}.bak",
            f"{STATE}.tmp",
            f"{PROJECT}/00-handoff.md",
            f"{PROJECT}/02-architecture-assessment.md",
            f"{PROJECT}/diagrams/context.png",
        ],
    )
    def test_companions_map_to_the_state_file(self, companion: str) -> None:
        assert ADAPTER.owner(companion) == STATE

    @pytest.mark.parametrize("outside", ["agent-output/readme.md", "_docs/x.md", "plans/a.md"])
    def test_other_paths_have_no_owner(self, outside: str) -> None:
        assert ADAPTER.owner(outside) is None

    def test_registered_and_detected(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("full")
        assert builtin("session") is ADAPTER
        assert adapter_for(STATE) is ADAPTER
        assert ADAPTER.find(Source(str(ws))) == [STATE]


class TestSeedExample:
    """The seed's minimal snippet and a full seven-step session read as documented."""

    def test_minimal_snippet(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("minimal")
        unit = load(ws)
        assert unit.key == "my-project"
        assert [t.id for t in unit.tasks] == ["step-2"]
        assert unit.tasks[0].extra["sub_step"] == "phase_2_waf"
        assert unit.findings == ()
        assert orjson.loads(answer_line(ws)) == {
            "resumePoint": "step-2:phase_2_waf",
            "tasksCompleted": [],
            "tasksPending": ["step-2"],
            "lastCommitSha": None,
            "staleWarnings": [],
        }

    def test_full_session(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("full")
        unit = load(ws)
        assert answer_line(ws) == FULL_LINE
        assert unit.findings == ()
        assert unit.story_file == f"{PROJECT}/01-requirements.md"
        assert unit.tasks[0].completed_at == "2026-03-01T11:30:00Z"
        assert unit.labels["progress"] == "1/7 (14%)"
        assert unit.labels["in_progress"] == "1"
        assert unit.labels["current_step"] == "2"


class TestStatuses:
    """Statuses match case-insensitively; complete and skipped are DONE."""

    @pytest.mark.parametrize(
        ("status", "bucket"),
        [
            ("complete", DONE),
            ("COMPLETE", DONE),
            ("skipped", DONE),
            ("Skipped", DONE),
            ("pending", PENDING),
            ("in_progress", PENDING),
            ("IN_PROGRESS", PENDING),
            (None, PENDING),
        ],
    )
    def test_known(self, workspace: Callable[[str], Path], status: str | None, bucket: str) -> None:
        ws = workspace("minimal")
        write_state(ws, steps_state({"1": {"status": status}}))
        unit = load(ws)
        assert unit.tasks[0].bucket == bucket
        assert unit.tasks[0].known
        assert "unknown-status" not in codes(unit)

    @pytest.mark.parametrize(
        ("status", "shown"),
        [("Blocked", "Blocked"), (3, "3"), ({"s": 1}, '{"s":1}'), (True, "true")],
    )
    def test_unknown(self, workspace: Callable[[str], Path], status: object, shown: str) -> None:
        ws = workspace("minimal")
        write_state(ws, steps_state({"1": {"status": "complete"}, "2": {"status": status}}))
        unit = load(ws)
        task = unit.tasks[1]
        assert (task.status, task.bucket, task.known) == (shown, PENDING, False)
        assert [f.task for f in unit.findings if f.code == "unknown-status"] == ["step-2"]
        result = resume_unit(str(ws), STATE, None, Options(staleness="mtime"))
        assert result.warnings == [
            f"warn: unknown status '{shown}' for task step-2; treated as PENDING"
        ]

    def test_unknown_status_fixture(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("unknown-status"))
        assert codes(unit) == ["unknown-status"]
        assert unit.labels["other"] == "1"


class TestResumePoint:
    """The resume point names the current step and its sub_step."""

    def test_fresh_start(self, workspace: Callable[[str], Path]) -> None:
        assert orjson.loads(answer_line(workspace("fresh")))["resumePoint"] == "fresh-start"

    def test_all_done(self, workspace: Callable[[str], Path]) -> None:
        env = orjson.loads(answer_line(workspace("all-done")))
        assert env["resumePoint"] == "all-done"
        assert env["tasksPending"] == []
        assert len(env["tasksCompleted"]) == 7

    @pytest.mark.parametrize(
        ("steps", "current", "expected"),
        [
            # current_step names an unfinished step: that step
            ({"1": {"status": "complete"}, "2": {"status": "pending"}}, 2, "step-2"),
            # current_step is finished: the first in_progress step
            (
                {"1": {"status": "complete"}, "2": {"status": "in_progress", "sub_step": "p1"}},
                1,
                "step-2:p1",
            ),
            # no in_progress step: the first unfinished one
            ({"1": {"status": "complete"}, "2": {"status": "skipped"}, "3": {}}, None, "step-3"),
            # a numbered sub_step
            (
                {"1": {"status": "complete"}, "2": {"status": "in_progress", "sub_step": 3}},
                2,
                "step-2:3",
            ),
            # in_progress with nothing done yet is not a fresh start
            ({"1": {"status": "in_progress", "sub_step": "intake"}}, 1, "step-1:intake"),
            # steps are ordered numerically, not by key order in the file
            ({"10": {"status": "pending"}, "9": {"status": "complete"}}, None, "step-10"),
        ],
    )
    def test_pointer(
        self,
        workspace: Callable[[str], Path],
        steps: dict[str, object],
        current: int | None,
        expected: str,
    ) -> None:
        ws = workspace("minimal")
        top = {} if current is None else {"current_step": current}
        write_state(ws, steps_state(steps, **top))
        assert orjson.loads(answer_line(ws))["resumePoint"] == expected

    def test_invalid_sub_step_is_a_finding(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("minimal")
        write_state(
            ws, steps_state({"2": {"status": "in_progress", "sub_step": {"x": 1}}}, current_step=2)
        )
        unit = load(ws)
        assert codes(unit) == ["invalid-sub-step"]
        assert unit.resume_point == "step-2"


class TestMigration:
    """Schema 1.0, 2.0 and unversioned files read as if migrated to 3.0; never rewritten."""

    @pytest.mark.parametrize(
        ("name", "said"),
        [
            ("v1", "schema_version 1.0"),
            ("v2", "schema_version 2.0"),
            ("no-version", "no schema_version"),
        ],
    )
    def test_old_schemas(self, workspace: Callable[[str], Path], name: str, said: str) -> None:
        ws = workspace(name)
        before = (ws / STATE).read_bytes()
        unit = load(ws)
        [found] = unit.findings
        assert (found.code, found.severity) == ("schema-migrated", "info")
        assert found.message.startswith(said)
        assert answer_line(ws) == FULL_LINE
        assert (ws / STATE).read_bytes() == before

    def test_v2_names_what_migration_drops(self, workspace: Callable[[str], Path]) -> None:
        [found] = load(workspace("v2")).findings
        assert "(ignored: lock, stale_threshold_ms, steps.2.claim)" in found.message

    @pytest.mark.parametrize("version", ["4.0", 3, ["3.0"]])
    def test_unknown_version(self, workspace: Callable[[str], Path], version: object) -> None:
        ws = workspace("minimal")
        write_state(ws, {"schema_version": version, "steps": {"1": {"status": "pending"}}})
        assert codes(load(ws)) == ["unknown-schema-version"]

    def test_steps_as_an_array(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("minimal")
        write_state(
            ws,
            {
                "schema_version": "1.0",
                "steps": [{"step": 1, "status": "complete"}, {"status": "pending"}],
            },
        )
        assert [t.id for t in load(ws).tasks] == ["step-1", "step-2"]


class TestCorruptStateRecovery:
    """An empty or unparsable file falls back to .bak with a finding; without one, exit 65."""

    @pytest.mark.parametrize(
        ("name", "why"), [("empty-with-bak", "is empty"), ("torn-with-bak", "invalid JSON")]
    )
    def test_falls_back_to_bak(self, workspace: Callable[[str], Path], name: str, why: str) -> None:
        ws = workspace(name)
        unit = load(ws)
        [found] = unit.findings
        assert (found.code, found.severity) == ("restored-from-backup", "warning")
        assert why in found.message
        assert found.message.endswith(f"read {STATE}.bak instead")
        assert answer_line(ws) == FULL_LINE
        assert unit.state_file == STATE

    def test_whitespace_only_file_falls_back(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("empty-with-bak")
        (ws / STATE).write_bytes(b" \n\t\n")
        assert codes(load(ws)) == ["restored-from-backup"]

    def test_top_level_not_an_object_falls_back(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("empty-with-bak")
        (ws / STATE).write_bytes(b"[]")
        assert codes(load(ws)) == ["restored-from-backup"]

    def test_no_backup(self, workspace: Callable[[str], Path]) -> None:
        with pytest.raises(
            DataError, match=r"00-session-state\.json: invalid JSON.*no 00-session-state\.json\.bak"
        ):
            load(workspace("torn-no-bak"))

    def test_backup_unusable_too(self, workspace: Callable[[str], Path]) -> None:
        with pytest.raises(
            DataError, match=r"invalid JSON.*the fallback .*00-session-state\.json\.bak is empty"
        ):
            load(workspace("torn-bad-bak"))

    def test_every_torn_write_loads_or_is_a_data_error(
        self, workspace: Callable[[str], Path]
    ) -> None:
        ws = workspace("torn-no-bak")
        whole = (FIXTURES / "full" / STATE).read_bytes()
        outcomes = set()
        for cut in range(0, len(whole) + 1, 7):
            (ws / STATE).write_bytes(whole[:cut])
            try:
                load(ws)
                outcomes.add("loaded")
            except DataError as exc:
                assert STATE in exc.message
                outcomes.add("data-error")
        assert "data-error" in outcomes

    def test_torn_writes_with_backup_always_answer(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("torn-with-bak")
        whole = (FIXTURES / "full" / STATE).read_bytes()
        for cut in range(0, len(whole), 11):
            (ws / STATE).write_bytes(whole[:cut])
            assert answer_line(ws) == FULL_LINE


class TestStrayTmp:
    """A leftover .tmp from the atomic write protocol is reported."""

    def test_reported(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("stray-tmp"))
        [found] = unit.findings
        assert (found.code, found.severity) == ("stray-tmp", "warning")
        assert f"{STATE}.tmp exists" in found.message

    def test_not_reported_without_one(self, workspace: Callable[[str], Path]) -> None:
        assert "stray-tmp" not in codes(load(workspace("full")))


class TestArtifacts:
    """A referenced artifact that does not exist is a finding on its step."""

    def test_missing(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("missing-artifact"))
        [found] = unit.findings
        assert (found.code, found.severity, found.task) == ("missing-artifact", "warning", "step-2")
        assert f"{PROJECT}/02-cost-estimate.md" in found.message

    def test_appears(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("missing-artifact")
        (ws / PROJECT / "02-cost-estimate.md").write_text("# Cost\n")
        assert load(ws).findings == ()

    def test_relative_to_the_project_folder(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("minimal")
        write_state(
            ws,
            steps_state(
                {"2": {"status": "in_progress", "artifacts": ["02-architecture-assessment.md"]}}
            ),
        )
        assert load(ws).findings == ()


class TestStaleness:
    """01-requirements.md is the story file: edited after a step completed, it warns;
    00-handoff.md, which the orchestrator rewrites at every gate, never does."""

    def test_requirements_edited_after_completion(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("full")
        later = 1_772_500_000  # 2026-03-03, after step 1 completed (2026-03-01T11:30Z)
        os.utime(ws / PROJECT / "01-requirements.md", (later, later))
        env = orjson.loads(answer_line(ws))
        assert env["staleWarnings"] == ["Story file modified after task step-1 DONE"]

    def test_handoff_rewritten_after_completion(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("full")
        later = 1_772_500_000
        os.utime(ws / PROJECT / "00-handoff.md", (later, later))
        assert orjson.loads(answer_line(ws))["staleWarnings"] == []

    def test_requirements_older_than_completion(self, workspace: Callable[[str], Path]) -> None:
        assert orjson.loads(answer_line(workspace("full")))["staleWarnings"] == []


class TestMalformed:
    """Nodes of the wrong shape give exit 65 naming the file; odd states give findings."""

    @pytest.mark.parametrize(
        ("state", "where"),
        [
            ({"steps": "all done"}, "steps: expected an object, got a string"),
            ({"steps": {"1": 5}}, "steps.1: expected an object, got a number"),
            ({"steps": {"1": ["complete"]}}, "steps.1: expected an object, got an array"),
        ],
    )
    def test_unit_error(
        self, workspace: Callable[[str], Path], state: dict[str, object], where: str
    ) -> None:
        ws = workspace("minimal")
        write_state(ws, state)
        assert load(ws).error == f"{STATE}: {where}"
        with pytest.raises(DataError) as raised:
            resume_unit(str(ws), STATE, None, Options())
        assert raised.value.message == f"{STATE}: {where}"

    def test_null_steps_and_nodes_are_absent(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("minimal")
        write_state(ws, {"steps": {"1": None, "2": {"status": "pending"}}})
        assert [t.id for t in load(ws).tasks] == ["step-2"]
        write_state(ws, {"steps": None})
        assert orjson.loads(answer_line(ws))["resumePoint"] == "fresh-start"

    def test_several_in_progress(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("minimal")
        write_state(
            ws, steps_state({"2": {"status": "in_progress"}, "3": {"status": "in_progress"}})
        )
        [found] = load(ws).findings
        assert found.code == "several-in-progress"
        assert "step-2, step-3" in found.message

    def test_findings_are_deterministic(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("missing-artifact")
        assert set(load(ws).findings) == set(load(ws).findings)


class TestCli:
    """`storyd resume --state-file … --direct` answers through the real process."""

    def test_resume(self, workspace: Callable[[str], Path], run_storyd: Run) -> None:
        ws = workspace("full")
        done = resume_direct(run_storyd, ws, STATE)
        assert (done.returncode, done.stdout, done.stderr) == (0, FULL_LINE, b"")

    def test_detail_shows_the_backup_finding(
        self, workspace: Callable[[str], Path], run_storyd: Run
    ) -> None:
        ws = workspace("empty-with-bak")
        done = run_storyd(
            "resume", "--state-file", STATE, "--direct", "--detail", "--workspace", str(ws)
        )
        assert done.returncode == 0
        body = orjson.loads(done.stdout)
        assert [f["code"] for f in body["findings"]] == ["restored-from-backup"]
        assert body["envelope"]["resumePoint"] == "step-2:phase_2_waf"

    def test_torn_without_backup_exits_65(
        self, workspace: Callable[[str], Path], run_storyd: Run
    ) -> None:
        ws = workspace("torn-no-bak")
        done = resume_direct(run_storyd, ws, STATE)
        assert done.returncode == 65
        assert done.stdout == b""
        assert STATE.encode() in done.stderr
        assert b"Traceback" not in done.stderr
