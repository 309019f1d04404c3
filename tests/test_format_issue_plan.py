"""The `issue-plan` format (seed 002): the tasks array, journal.md and tasks.md."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from format_harness import (
    Run,
    codes,
    copier,
    direct_envelope,
    edit_json,
    load_one,
    resume_direct,
)

from storyd.api.answers import Options, resume_unit
from storyd.core.errors import DataError
from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.base import Source
from storyd.core.formats.issue_plan import ADAPTER, journal_entries, plan_task_ids
from storyd.core.model import DONE, PENDING, Unit

FIXTURES = Path(__file__).parent / "fixtures" / "issue-plan"
PLAN = ".claude/plans/issue-42-geofencing"
STATE = f"{PLAN}/execution-state.json"
HAPPY_LINE = (
    b'{"resumePoint":"task-2","tasksCompleted":[{"id":"1","commitSha":null}],'
    b'"tasksPending":["2"],"lastCommitSha":null,"staleWarnings":[]}\n'
)


@pytest.fixture
def workspace(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a fixture workspace into tmp_path, every file dated 2026-01-01."""
    return copier(FIXTURES, tmp_path)


def load(ws: Path) -> Unit:
    return load_one(ADAPTER, ws, STATE)


def envelope(ws: Path) -> dict[str, object]:
    return direct_envelope(ws, STATE, staleness="mtime")


def rewrite(ws: Path, edit: Callable[[dict[str, object]], None]) -> None:
    edit_json(ws, STATE, edit)


def set_tasks(ws: Path, tasks: list[object]) -> None:
    rewrite(ws, lambda state: state.__setitem__("tasks", tasks))


class TestPaths:
    """The adapter claims .claude/plans/issue-<N>-<slug>/execution-state.json and its companions."""

    @pytest.mark.parametrize(
        ("relpath", "expected"),
        [
            (STATE, True),
            (".claude/plans/issue-7/execution-state.json", True),
            (".claude/plans/issue-x-slug/execution-state.json", False),
            (".claude/plans/issue-/execution-state.json", False),
            (".claude/plans/feature-42/execution-state.json", False),
            ("plans/epic-0042/execution-state.json", False),
            (f"{PLAN}/journal.md", False),
        ],
    )
    def test_matches(self, relpath: str, expected: bool) -> None:
        assert ADAPTER.matches(relpath) is expected

    @pytest.mark.parametrize(
        ("path", "owner"),
        [
            (f"{PLAN}/journal.md", STATE),
            (f"{PLAN}/tasks.md", STATE),
            (STATE, STATE),
            (f"{PLAN}/design.md", None),
            (".claude/plans/notes/journal.md", None),
        ],
    )
    def test_owner(self, path: str, owner: str | None) -> None:
        assert ADAPTER.owner(path) == owner

    def test_registered_and_detected(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        assert builtin("issue-plan") is ADAPTER
        assert adapter_for(STATE) is ADAPTER
        assert ADAPTER.find(Source(str(ws))) == [STATE]


class TestSeedExample:
    """The seed's schema example, journal and tasks.md read as documented."""

    def test_happy(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        unit = load(ws)
        assert resume_unit(str(ws), STATE, None, Options()).line == HAPPY_LINE
        assert unit.findings == ()
        assert unit.key == "issue-42-geofencing"
        assert unit.branch == "issue/42-geofencing"
        assert unit.story_file == f"{PLAN}/tasks.md"
        first = unit.tasks[0]
        assert first.completed_at == "2026-01-20T10:25:00Z"
        assert first.extra["started_at"] == "2026-01-20T10:05:00Z"
        assert first.extra["files_created"] == [
            "prisma/schema.prisma",
            "prisma/migrations/20260120_add_geofence/migration.sql",
        ]
        assert first.extra["files_modified"] == []

    def test_progress_summary(self, workspace: Callable[[str], Path]) -> None:
        labels = load(workspace("happy")).labels
        assert labels["progress"] == "1/2 (50%)"
        assert (
            labels["completed"],
            labels["in_progress"],
            labels["pending"],
            labels["failed"],
        ) == (
            "1",
            "0",
            "1",
            "0",
        )
        assert (labels["issue"], labels["title"]) == ("42", "Add vehicle geofencing feature")

    def test_progress_floors_like_the_seed(self, workspace: Callable[[str], Path]) -> None:
        labels = load(workspace("state-not-updated")).labels
        assert labels["progress"] == "2/3 (66%)"

    def test_commit_sha_when_recorded(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        rewrite(ws, lambda s: s["tasks"][0].__setitem__("commit_sha", "abc123"))  # type: ignore[index]
        assert envelope(ws)["lastCommitSha"] == "abc123"


class TestStatuses:
    """pending, in_progress, completed, failed; case-insensitive; unknown ones are PENDING."""

    @pytest.mark.parametrize(
        ("status", "bucket", "known"),
        [
            ("completed", DONE, True),
            ("Completed", DONE, True),
            ("pending", PENDING, True),
            ("IN_PROGRESS", PENDING, True),
            ("failed", PENDING, True),
            (None, PENDING, True),
            ("done", PENDING, False),
            (7, PENDING, False),
        ],
    )
    def test_bucket(
        self, workspace: Callable[[str], Path], status: object, bucket: str, known: bool
    ) -> None:
        ws = workspace("happy")
        set_tasks(ws, [{"id": "1", "status": status}])
        unit = load(ws)
        assert (unit.tasks[0].bucket, unit.tasks[0].known) == (bucket, known)
        assert ("unknown-status" in codes(unit)) is not known

    def test_unknown_status_fixture(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("unknown-status")
        assert codes(load(ws)) == ["unknown-status"]
        result = resume_unit(str(ws), STATE, None, Options())
        assert result.warnings == ["warn: unknown status 'blocked' for task 2; treated as PENDING"]


class TestResumePoint:
    """The seed's Get Next Pending Task: first pending, else in_progress, then failed."""

    @pytest.mark.parametrize(
        ("statuses", "expected"),
        [
            (["completed", "in_progress", "pending"], "task-3"),
            (["completed", "in_progress", "completed"], "task-2"),
            (["completed", "failed", "completed"], "task-2"),
            (["completed", "completed", "completed"], "all-done"),
            (["pending", "pending", "pending"], "fresh-start"),
            (["in_progress", "pending", "pending"], "task-2"),
            (["failed", "failed", "failed"], "task-1"),
        ],
    )
    def test_pointer(
        self, workspace: Callable[[str], Path], statuses: list[str], expected: str
    ) -> None:
        ws = workspace("happy")
        set_tasks(ws, [{"id": str(i), "status": s} for i, s in enumerate(statuses, 1)])
        assert envelope(ws)["resumePoint"] == expected

    @pytest.mark.parametrize(
        ("name", "expected"), [("fresh", "fresh-start"), ("all-done", "all-done")]
    )
    def test_fixtures(self, workspace: Callable[[str], Path], name: str, expected: str) -> None:
        assert envelope(workspace(name))["resumePoint"] == expected


class TestSubAgentDidNotUpdateState:
    """An in_progress task with a completed `## Task N:` journal entry is a finding."""

    def test_seed_case(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("state-not-updated"))
        [found] = unit.findings
        assert (found.code, found.severity, found.task) == ("state-not-updated", "warning", "3")
        assert "journal.md records it completed" in found.message

    def test_failed_journal_entry_counts_too(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("failed-task")
        rewrite(ws, lambda s: s["tasks"][2].__setitem__("status", "in_progress"))  # type: ignore[index]
        assert [f.message for f in load(ws).findings if f.code == "state-not-updated"] == [
            "task 3 is in_progress but journal.md records it failed: "
            "the sub-agent did not update execution-state.json"
        ]

    def test_in_progress_journal_entry_is_no_finding(
        self, workspace: Callable[[str], Path]
    ) -> None:
        ws = workspace("happy")
        rewrite(ws, lambda s: s["tasks"][1].__setitem__("status", "in_progress"))  # type: ignore[index]
        assert load(ws).findings == ()

    def test_commit_evidence_is_kept_for_the_git_detectors(
        self, workspace: Callable[[str], Path]
    ) -> None:
        task = load(workspace("state-not-updated")).tasks[2]
        assert task.extra["started_at"] == "2026-01-20T11:00:00Z"
        assert task.extra["files_created"] == []

    def test_journal_not_updated(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("journal-not-updated"))
        [found] = unit.findings
        assert (found.code, found.severity, found.task) == ("journal-not-updated", "info", "2")
        assert "'## Task 2:'" in found.message

    def test_missing_journal(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        (ws / PLAN / "journal.md").unlink()
        assert codes(load(ws)) == ["missing-journal"]


class TestFailedTask:
    """A failed task surfaces with its notes."""

    def test_notes_in_the_finding(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("failed-task"))
        [found] = unit.findings
        assert (found.code, found.severity, found.task) == ("failed-task", "warning", "3")
        assert found.message == (
            "task 3 failed: Ray casting fails for polygons crossing the antimeridian; "
            "needs a split-polygon approach."
        )
        assert unit.labels["failed"] == "1"

    def test_without_notes(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        set_tasks(ws, [{"id": "1", "status": "failed", "notes": ""}])
        assert [f.message for f in load(ws).findings if f.code == "failed-task"] == [
            "task 1 failed with no notes"
        ]

    def test_long_notes_are_cut(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        set_tasks(ws, [{"id": "1", "status": "failed", "notes": "x" * 1000}])
        [found] = [f for f in load(ws).findings if f.code == "failed-task"]
        assert len(found.message) < 320
        assert found.message.endswith("…")


class TestTasksMd:
    """tasks.md and the tasks array drifting apart."""

    def test_task_not_in_state(self, workspace: Callable[[str], Path]) -> None:
        [found] = load(workspace("tasks-md-drift")).findings
        assert (found.code, found.severity) == ("task-not-in-state", "warning")
        assert "tasks.md lists task 3" in found.message

    def test_task_not_in_plan(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        (ws / PLAN / "tasks.md").write_text("- [ ] 1. Create database schema for geofences\n")
        assert [(f.code, f.task) for f in load(ws).findings] == [("task-not-in-plan", "2")]

    def test_no_checklist_no_check(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        (ws / PLAN / "tasks.md").write_text("# Tasks\n\n## 1 Schema\n## 2 Repository\n")
        assert load(ws).findings == ()

    @pytest.mark.parametrize(
        ("text", "ids"),
        [
            ("- [ ] 1. Create schema", ["1"]),
            ("- [ ] 1.1 Sub task", ["1.1"]),
            ("- [x] 2. Done already", ["2"]),
            ("- [ ] 3.2. Trailing dot", ["3.2"]),
            ("  - [ ] 4. Indented", []),
            ("- [ ] Not numbered", []),
            ("- [ ] 5.", []),
            ("- [ ] 1.2.3 Too deep", []),
        ],
    )
    def test_checklist_lines(self, text: str, ids: list[str]) -> None:
        assert plan_task_ids(text) == ids


class TestJournalParsing:
    """`## Task <id>:` entries and their **Status** lines."""

    def test_seed_journal(self) -> None:
        text = (FIXTURES / "happy" / PLAN / "journal.md").read_text()
        assert journal_entries(text) == {"1": "completed", "2": "in_progress"}

    def test_last_entry_wins(self) -> None:
        text = "## Task 3: x\n**Status**: ❌ Failed\n\n## Task 3: x\n**Status**: ✅ Completed\n"
        assert journal_entries(text) == {"3": "completed"}

    def test_mojibake_status(self) -> None:
        assert journal_entries("## Task 4: y\n**Status**: âœ… Completed\n") == {"4": "completed"}

    def test_heading_without_status(self) -> None:
        assert journal_entries("## Task 5: z\n\n### What I Did\nstuff\n") == {"5": "unknown"}


class TestMalformed:
    """Bad JSON is exit 65 naming the file; nodes of the wrong shape are unit errors."""

    def test_torn_json(self, workspace: Callable[[str], Path]) -> None:
        with pytest.raises(DataError, match=rf"^{STATE}: invalid JSON"):
            load(workspace("torn"))

    @pytest.mark.parametrize(
        ("tasks", "where"),
        [
            ("none", "tasks: expected an array, got a string"),
            ({"1": {}}, "tasks: expected an array, got an object"),
            ([{"id": "1"}, 5], "tasks[1]: expected an object, got a number"),
        ],
    )
    def test_unit_error(self, workspace: Callable[[str], Path], tasks: object, where: str) -> None:
        ws = workspace("happy")
        rewrite(ws, lambda s: s.__setitem__("tasks", tasks))
        assert load(ws).error == f"{STATE}: {where}"
        with pytest.raises(DataError) as raised:
            resume_unit(str(ws), STATE, None, Options())
        assert raised.value.message == f"{STATE}: {where}"

    def test_missing_and_duplicate_ids(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        set_tasks(ws, [{"id": 1, "status": "completed"}, {"status": "pending"}, {"id": "1"}])
        unit = load(ws)
        assert [t.id for t in unit.tasks] == ["1", "#2", "1"]
        assert {"missing-task-id", "duplicate-task-id"} <= set(codes(unit))

    def test_odd_issue_node(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("happy")
        rewrite(ws, lambda s: s.__setitem__("issue", ["not", "an", "object"]))
        unit = load(ws)
        assert unit.branch is None
        assert "issue" not in unit.labels


class TestCli:
    """`storyd resume --state-file … --direct` answers through the real process."""

    def test_resume(self, workspace: Callable[[str], Path], run_storyd: Run) -> None:
        ws = workspace("happy")
        done = resume_direct(run_storyd, ws, STATE)
        assert (done.returncode, done.stdout, done.stderr) == (0, HAPPY_LINE, b"")

    def test_detail(self, workspace: Callable[[str], Path], run_storyd: Run) -> None:
        ws = workspace("state-not-updated")
        done = resume_direct(run_storyd, ws, STATE, "--detail")
        assert done.returncode == 0
        body = orjson.loads(done.stdout)
        assert [f["code"] for f in body["findings"]] == ["state-not-updated"]
        assert body["envelope"]["resumePoint"] == "task-3"

    def test_torn_exits_65(self, workspace: Callable[[str], Path], run_storyd: Run) -> None:
        done = resume_direct(run_storyd, workspace("torn"), STATE)
        assert (done.returncode, done.stdout) == (65, b"")
        assert done.stderr.startswith(f"{STATE}: invalid JSON".encode())
        assert b"Traceback" not in done.stderr
