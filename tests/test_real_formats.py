"""Real producers' files, and what writers vary, through `storyd resume` as a process.

The `real-*` fixtures are built from public producers' files (docs/formats.md, "Real
producers' files", names each source): structure, step keys, statuses and dates as the
producer wrote them, prose reworded. The other cases write the spellings writers use
(padded or decomposed statuses, markdown-emphasised keys, UTF-16 with a BOM, Windows
paths) and the files that still cannot be read (exit 65, one line naming the cause).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from daemon_harness import DaemonProcess, wait_for
from epic_state_harness import atomic_write
from format_harness import Run, copy_fixture, load_one, resume_direct

from storyd.core.formats.base import Source
from storyd.core.formats.checkpoint import ADAPTER as CHECKPOINT
from storyd.core.formats.issue_plan import ADAPTER as ISSUE_PLAN
from storyd.core.formats.session import ADAPTER as SESSION
from storyd.core.formats.session import step_rank
from storyd.core.isotime import parse_epoch
from storyd.core.model import DONE, PENDING

FIXTURES = Path(__file__).resolve().parent / "fixtures"
Spawn = Callable[..., DaemonProcess]


def null_shas(*ids: str) -> list[dict[str, object]]:
    return [{"id": i, "commitSha": None} for i in ids]


def resume(run: Run, ws: Path, relpath: str, *flags: str) -> dict[str, object]:
    """`storyd resume --state-file RELPATH` (no daemon runs: the CLI reads directly)."""
    done = run("resume", "--state-file", relpath, "--staleness", "mtime", *flags, cwd=ws)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b"\n") == 1
    return orjson.loads(done.stdout)  # type: ignore[no-any-return]


def session_state(project: str) -> str:
    return f"agent-output/{project}/00-session-state.json"


# name: (project, envelope) — seed 001's producer, jonathan-vella/apex
REAL_SESSIONS = {
    "real-step-3_5": (
        "nordic-foods",
        {
            "resumePoint": "step-3_5",
            "tasksCompleted": null_shas("step-1", "step-2", "step-3"),
            "tasksPending": ["step-3_5", "step-4", "step-5", "step-6", "step-7"],
            "lastCommitSha": None,
            "staleWarnings": [],
        },
    ),
    "real-step-3.5-v1": (
        "contoso-service-hub-run-3",
        {
            "resumePoint": "step-6:phase_3_deploy",
            "tasksCompleted": null_shas(
                "step-1", "step-2", "step-3", "step-3.5", "step-4", "step-5", "step-7"
            ),
            "tasksPending": ["step-6"],
            "lastCommitSha": None,
            "staleWarnings": [],
        },
    ),
    "real-v2-out-of-order": (
        "nordic-fresh-foods",
        {
            "resumePoint": "step-3:phase_3_adr",
            "tasksCompleted": null_shas("step-1", "step-2", "step-4", "step-5", "step-6", "step-7"),
            "tasksPending": ["step-3"],
            "lastCommitSha": None,
            # The producer recorded step 5 as completed on 2025-07-13, before the project
            # began: older than the requirements (dated 2026-01-01 by the copy), so stale.
            "staleWarnings": ["Story file modified after task step-5 DONE"],
        },
    ),
    "real-template": (
        "drawio-quality-uplift",
        {
            "resumePoint": "fresh-start",
            "tasksCompleted": [],
            "tasksPending": [
                "step-1",
                "step-2",
                "step-3",
                "step-3_5",
                "step-4",
                "step-5",
                "step-6",
                "step-7",
            ],
            "lastCommitSha": None,
            "staleWarnings": [],
        },
    ),
    # current_step 4 (IaC Plan started) while Governance (3_5) is pending: the writer's
    # workflow-graph.json makes step 4 wait for gate 2.5, so Governance runs first
    "real-step-4-governance-pending": (
        "nordic-foods",
        {
            "resumePoint": "step-3_5",
            "tasksCompleted": null_shas("step-1", "step-2", "step-3"),
            "tasksPending": ["step-3_5", "step-4", "step-5", "step-6", "step-7"],
            "lastCommitSha": None,
            "staleWarnings": [],
        },
    ),
    "real-step-3.5-skipped-ahead": (
        "e2e-ralph-loop",
        {
            "resumePoint": "step-3",
            "tasksCompleted": null_shas("step-1", "step-2", "step-4"),
            "tasksPending": ["step-3", "step-3.5", "step-5", "step-6", "step-7"],
            "lastCommitSha": None,
            "staleWarnings": [],
        },
    ),
}


class TestRealSessions:
    """apex's 00-session-state.json as its writer left them, in five shapes."""

    @pytest.mark.slow
    @pytest.mark.parametrize("name", sorted(REAL_SESSIONS))
    def test_envelope(self, name: str, tmp_path: Path, run_storyd: Run) -> None:
        project, expected = REAL_SESSIONS[name]
        ws = copy_fixture(FIXTURES / "session" / name, tmp_path / name)
        env = resume(run_storyd, ws, session_state(project))
        assert env == expected
        # --unit names the one project, to the same answer.
        assert resume(run_storyd, ws, session_state(project), "--unit", project) == expected

    @pytest.mark.parametrize(
        ("name", "codes"),
        [
            ("real-step-3_5", []),
            ("real-step-3.5-v1", ["schema-migrated"]),
            ("real-v2-out-of-order", ["schema-migrated"]),
            ("real-template", []),
            ("real-step-4-governance-pending", ["prerequisite-pending"]),
        ],
    )
    def test_findings(self, name: str, codes: list[str], tmp_path: Path) -> None:
        project = REAL_SESSIONS[name][0]
        ws = copy_fixture(FIXTURES / "session" / name, tmp_path / name)
        unit = load_one(SESSION, ws, session_state(project))
        assert sorted(f.code for f in unit.findings) == codes


    def test_passed_over_governance_is_said(self, tmp_path: Path, run_storyd: Run) -> None:
        name = "real-step-4-governance-pending"
        ws = copy_fixture(FIXTURES / "session" / name, tmp_path / name)
        detail = resume(run_storyd, ws, session_state("nordic-foods"), "--detail")
        [found] = detail["findings"]  # type: ignore[misc]
        assert (found["code"], found["severity"], found["task"]) == (  # type: ignore[index]
            "prerequisite-pending", "info", "step-3_5")
        assert found["message"].startswith("current_step is 4 but step-3_5 is still pending")  # type: ignore[index]

    def test_optional_design_is_not_waited_for(self, tmp_path: Path, run_storyd: Run) -> None:
        """Step 3 (Design) is optional in the graph: current_step 4 with 3 pending and
        3_5 complete resumes at step 4."""
        ws = tmp_path / "ws"
        state = ws / session_state("p")
        state.parent.mkdir(parents=True)
        steps = {
            "1": {"status": "complete"},
            "2": {"status": "complete"},
            "3": {"status": "pending"},
            "3_5": {"status": "complete"},
            "4": {"status": "in_progress", "sub_step": "phase_1"},
        }
        doc = {"schema_version": "3.0", "current_step": 4, "steps": steps}
        state.write_bytes(orjson.dumps(doc))
        assert resume(run_storyd, ws, session_state("p"))["resumePoint"] == "step-4:phase_1"


class TestStepOrder:
    """Steps `3_5` and `3.5` sort between 3 and 4, as the writer orders them."""

    @pytest.mark.parametrize(
        ("keys", "order"),
        [
            (["4", "3_5", "1", "3", "2"], ["1", "2", "3", "3_5", "4"]),
            (["10", "3.5", "4", "3", "x", "2"], ["2", "3", "3.5", "4", "10", "x"]),
            (["3_10", "3_5", "3"], ["3", "3_5", "3_10"]),
        ],
    )
    def test_order(self, keys: list[str], order: list[str], tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        state = ws / session_state("p")
        state.parent.mkdir(parents=True)
        steps = {k: {"status": "pending"} for k in keys}
        state.write_bytes(orjson.dumps({"schema_version": "3.0", "steps": steps}))
        unit = load_one(SESSION, ws, session_state("p"))
        assert [t.id for t in unit.tasks] == [f"step-{k}" for k in order]

    @pytest.mark.parametrize(("key", "rank"), [("3", (3,)), ("3_5", (3, 5)), ("3.5", (3, 5))])
    def test_rank(self, key: str, rank: tuple[int, ...]) -> None:
        assert step_rank(key) == rank

    @pytest.mark.parametrize("current", [3.5, "3.5", "3_5"])
    def test_current_step_names_the_half_step(
        self, current: object, tmp_path: Path, run_storyd: Run
    ) -> None:
        ws = tmp_path / "ws"
        state = ws / session_state("p")
        state.parent.mkdir(parents=True)
        steps = {
            "3": {"status": "complete"},
            "3_5": {"status": "pending"},
            "4": {"status": "pending"},
            "5": {"status": "in_progress", "sub_step": "phase_1"},
        }
        doc = {"schema_version": "3.0", "current_step": current, "steps": steps}
        state.write_bytes(orjson.dumps(doc))
        assert resume(run_storyd, ws, session_state("p"))["resumePoint"] == "step-3_5"


class TestSessionStaleness:
    """Staleness compares with 01-requirements.md; the handoff, rewritten at every gate
    after every step, never makes finished steps stale."""

    NAME = "real-step-3.5-v1"
    PROJECT = "contoso-service-hub-run-3"

    def stamp(self, ws: Path, name: str, when: str) -> None:
        epoch = parse_epoch(when)
        assert epoch is not None
        os.utime(ws / "agent-output" / self.PROJECT / name, (epoch, epoch))

    def test_handoff_rewritten_after_every_step(self, tmp_path: Path, run_storyd: Run) -> None:
        ws = copy_fixture(FIXTURES / "session" / self.NAME, tmp_path / "ws")
        # The writer's timeline: requirements before step 1 completed (09:15), the
        # handoff rewritten at the last gate (the state's `updated`, 19:36).
        self.stamp(ws, "01-requirements.md", "2026-03-17T09:10:00Z")
        self.stamp(ws, "00-handoff.md", "2026-03-17T19:36:00Z")
        env = resume(run_storyd, ws, session_state(self.PROJECT))
        assert env["staleWarnings"] == []
        assert len(env["tasksCompleted"]) == 7  # type: ignore[arg-type]

    def test_requirements_edited_after_steps(self, tmp_path: Path, run_storyd: Run) -> None:
        ws = copy_fixture(FIXTURES / "session" / self.NAME, tmp_path / "ws")
        self.stamp(ws, "00-handoff.md", "2026-03-17T19:36:00Z")
        # Edited at 11:00: after steps 1 (09:15) and 2 (10:58) completed, before the rest.
        self.stamp(ws, "01-requirements.md", "2026-03-17T11:00:00Z")
        env = resume(run_storyd, ws, session_state(self.PROJECT))
        assert env["staleWarnings"] == [
            "Story file modified after task step-1 DONE",
            "Story file modified after task step-2 DONE",
        ]

    def test_story_file_is_the_requirements(self, tmp_path: Path) -> None:
        ws = copy_fixture(FIXTURES / "session" / self.NAME, tmp_path / "ws")
        unit = load_one(SESSION, ws, session_state(self.PROJECT))
        assert unit.story_file == f"agent-output/{self.PROJECT}/01-requirements.md"


ISSUE_STATE = ".claude/plans/issue-103-driver-route-view/execution-state.json"


class TestRealIssuePlan:
    """kwenv-fleetillo's issue-103 plan: initialised with an empty tasks array."""

    def test_empty_tasks(self, tmp_path: Path, run_storyd: Run) -> None:
        ws = copy_fixture(FIXTURES / "issue-plan" / "real-issue-103-empty", tmp_path / "ws")
        env = resume(run_storyd, ws, ISSUE_STATE)
        assert env == {
            "resumePoint": "fresh-start",
            "tasksCompleted": [],
            "tasksPending": [],
            "lastCommitSha": None,
            "staleWarnings": [],
        }
        unit = load_one(ISSUE_PLAN, ws, ISSUE_STATE)
        untracked = [f for f in unit.findings if f.code == "task-not-in-state"]
        assert len(untracked) == 14  # tasks.md's top-level tasks 0. to 13.
        assert {f.code for f in unit.findings} == {"task-not-in-state"}

    def test_h3_journal_and_bold_colon_status(self, tmp_path: Path, run_storyd: Run) -> None:
        ws = copy_fixture(FIXTURES / "issue-plan" / "issue-103-journal-h3", tmp_path / "ws")
        env = resume(run_storyd, ws, ISSUE_STATE)
        assert env["tasksCompleted"] == null_shas("0.", "1.")  # task 1. is " Completed "
        assert env["resumePoint"] == "task-3."
        unit = load_one(ISSUE_PLAN, ws, ISSUE_STATE)
        codes = {(f.code, f.task) for f in unit.findings}
        # `### Task 2:` says `**Status:** ✅ Completed` while the state says in_progress.
        assert ("state-not-updated", "2.") in codes
        # `### Task 0:` and `### Task 1:` count as the journal entries the seed greps for.
        assert not {c for c in codes if c[0] == "journal-not-updated"}


class TestStatusVariants:
    """Statuses are trimmed and NFC-normalised before they are matched, in every format."""

    @pytest.mark.parametrize(
        "status", [" DONE ", "done\n", "\tMerged", unicodedata.normalize("NFD", "Concluída")]
    )
    def test_epic(self, status: str, tmp_path: Path, run_storyd: Run) -> None:
        folder = tmp_path / "plans" / "epic-0049"
        folder.mkdir(parents=True)
        tasks = {"T1": {"status": status, "commitSha": "abc1"}, "T2": {"status": "PENDING"}}
        doc = {"stories": {"story-0049-0001": {"tasks": tasks}}}
        (folder / "execution-state.json").write_bytes(orjson.dumps(doc))
        done = run_storyd(
            "resume", "--story-id", "story-0049-0001", "--epic-id", "0049", cwd=tmp_path
        )
        assert done.returncode == 0 and done.stderr == b""
        env = orjson.loads(done.stdout)
        assert env["tasksCompleted"] == [{"id": "T1", "commitSha": "abc1"}]
        assert env["resumePoint"] == "phase-2-task-2"

    def test_unknown_status_is_shown_as_written(self, tmp_path: Path, run_storyd: Run) -> None:
        ws = tmp_path / "ws"
        state = ws / session_state("p")
        state.parent.mkdir(parents=True)
        steps = {"1": {"status": " complete "}, "2": {"status": " odd "}}
        state.write_bytes(orjson.dumps({"schema_version": "3.0", "steps": steps}))
        done = resume_direct(run_storyd, ws, session_state("p"))
        assert done.returncode == 0
        assert orjson.loads(done.stdout)["tasksCompleted"] == null_shas("step-1")
        assert done.stderr == b"warn: unknown status ' odd ' for task step-2; treated as PENDING\n"

    def test_checkpoint_phase_status(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        (ws / "memory" / "state").mkdir(parents=True)
        doc = {
            "workflow_id": "w",
            "current_phase": " architecture ",
            "phase_status": " Failed ",
            "completed_phases": [{"phase": "REQUIREMENTS "}],
        }
        (ws / "memory/state/phase.json").write_bytes(orjson.dumps(doc))
        unit = load_one(CHECKPOINT, ws, "memory/state/phase.json")
        assert unit.resume_point == "ARCHITECTURE"
        assert [t.bucket for t in unit.tasks][:2] == [DONE, PENDING]
        assert "phase-failed" in {f.code for f in unit.findings}
        assert "unknown-status" not in {f.code for f in unit.findings}


AUTODEV = "_docs/_autodev_state.md"
PLAN_ENVELOPE_POINT = "greenfield/step-3:architecture-review-risk-assessment"


def write_autodev(ws: Path, data: bytes) -> None:
    (ws / "_docs" / "02_plans").mkdir(parents=True)
    (ws / "_docs" / "02_plans" / "architecture.md").write_text("# plan\n")
    (ws / AUTODEV).write_bytes(data)


class TestAutodevSpellings:
    """The key spellings writers use read as the seed's template does."""

    @pytest.mark.parametrize(
        "text",
        [
            # The seed's template, for reference.
            "flow: greenfield\nstep: 3\nname: Plan\nstatus: in_progress\nsub_step:\n"
            '  phase: 4\n  name: architecture-review-risk-assessment\n  detail: ""\n'
            "retry_count: 0\ncycle: 1\n",
            # Capitalised keys, the step's name in parentheses, a spaced status.
            "Flow: greenfield\nStep: 3 (Plan)\nStatus: In Progress\nSub_step:\n"
            '  Phase: 4\n  Name: architecture-review-risk-assessment\n  Detail: ""\n'
            "Retry_count: 0\nCycle: 1\n",
            # Markdown bullets with bold keys, colon inside or outside the bold.
            "# Autodev State\n\n## Current Step\n\n- **flow**: greenfield\n- **step:** 3 (Plan)\n"
            "- **status**: in_progress\n- **sub_step**:\n  - **phase**: 4\n"
            '  - **name**: `architecture-review-risk-assessment`\n  - **detail**: ""\n'
            "- **retry_count**: 0\n- **cycle**: 1\n",
            # Code-span keys, a dashed step name, the one-line form.
            "`flow`: greenfield `step`: 3 - Plan `status`: in-progress `sub_step`: "
            'phase: 4 name: architecture-review-risk-assessment detail: "" '
            "`retry_count`: 0 `cycle`: 1",
        ],
    )
    def test_spellings(self, text: str, tmp_path: Path, run_storyd: Run) -> None:
        ws = tmp_path / "ws"
        write_autodev(ws, text.encode())
        env = resume(run_storyd, ws, AUTODEV)
        assert env["resumePoint"] == PLAN_ENVELOPE_POINT
        assert env["tasksCompleted"] == null_shas("step-1", "step-2")


UTF16_CASES = [("utf-16", "BOM, native order"), ("utf-16-be", "BE"), ("utf-8-sig", "UTF-8 BOM")]


def encode(text: str, codec: str) -> bytes:
    """Text in `codec`, with the byte-order mark a writer puts first."""
    if codec == "utf-16-be":
        return b"\xfe\xff" + text.encode("utf-16-be")
    return text.encode(codec)


class TestByteOrderMarks:
    """UTF-16 (either order) and UTF-8 with a byte-order mark decode, in every format."""

    @pytest.mark.parametrize(("codec", "label"), UTF16_CASES)
    def test_session(self, codec: str, label: str, tmp_path: Path, run_storyd: Run) -> None:
        ws = tmp_path / "ws"
        state = ws / session_state("p")
        state.parent.mkdir(parents=True)
        doc = '{"schema_version": "3.0", "steps": {"1": {"status": "Concluída"}, '
        doc += '"2": {"status": "complete"}, "3": {"status": "in_progress", "sub_step": "é"}}}'
        state.write_bytes(encode(doc, codec))
        env = resume(run_storyd, ws, session_state("p"))
        assert env["tasksCompleted"] == null_shas("step-2"), label
        assert env["resumePoint"] == "step-3:é"

    @pytest.mark.parametrize(("codec", "label"), UTF16_CASES)
    def test_autodev(self, codec: str, label: str, tmp_path: Path, run_storyd: Run) -> None:
        ws = tmp_path / "ws"
        text = "flow: greenfield\nstep: 3\nstatus: in_progress\nsub_step:\n  phase: 4\n"
        text += '  name: architecture-review-risk-assessment\n  detail: "é"\n'
        write_autodev(ws, encode(text, codec))
        assert resume(run_storyd, ws, AUTODEV)["resumePoint"] == PLAN_ENVELOPE_POINT, label

    @pytest.mark.parametrize(("codec", "label"), UTF16_CASES)
    def test_checkpoint(self, codec: str, label: str, tmp_path: Path, run_storyd: Run) -> None:
        ws = tmp_path / "ws"
        (ws / "memory" / "state").mkdir(parents=True)
        doc = '{"workflow_id": "wé", "current_phase": "ARCHITECTURE", "phase_status": '
        doc += '"in_progress", "completed_phases": [{"phase": "REQUIREMENTS"}]}'
        (ws / "memory/state/phase.json").write_bytes(encode(doc, codec))
        env = resume(run_storyd, ws, "memory/state/phase.json")
        assert env["resumePoint"] == "ARCHITECTURE", label

    def test_issue_plan_journal(self, tmp_path: Path) -> None:
        ws = copy_fixture(FIXTURES / "issue-plan" / "issue-103-journal-h3", tmp_path / "ws")
        journal = ws / ISSUE_STATE.replace("execution-state.json", "journal.md")
        journal.write_bytes(encode(journal.read_text(encoding="utf-8"), "utf-16"))
        unit = load_one(ISSUE_PLAN, ws, ISSUE_STATE)
        assert ("state-not-updated", "2.") in {(f.code, f.task) for f in unit.findings}


class TestWindowsPaths:
    """Checkpoint outputs written with `\\` separators, or a drive, resolve."""

    @pytest.mark.parametrize(
        "output",
        [
            "memory\\reports\\demand.json",
            "C:\\Users\\dev\\proj\\memory\\reports\\demand.json",
            "D:/proj/memory/reports/demand.json",
        ],
    )
    def test_output_resolves(self, output: str, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        (ws / "memory" / "state").mkdir(parents=True)
        (ws / "memory" / "reports").mkdir()
        (ws / "memory/reports/demand.json").write_text("{}")
        entry = {"phase": "REQUIREMENTS", "output": output}
        doc = {"current_phase": "ARCHITECTURE", "completed_phases": [entry]}
        (ws / "memory/state/phase.json").write_bytes(orjson.dumps(doc))
        unit = CHECKPOINT.load(Source(str(ws)), "memory/state/phase.json")[0]
        assert "missing-output" not in {f.code for f in unit.findings}

    def test_missing_output_still_warns(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        (ws / "memory" / "state").mkdir(parents=True)
        entry = {"phase": "REQUIREMENTS", "output": "memory\\reports\\demand.json"}
        doc = {"current_phase": "ARCHITECTURE", "completed_phases": [entry]}
        (ws / "memory/state/phase.json").write_bytes(orjson.dumps(doc))
        unit = CHECKPOINT.load(Source(str(ws)), "memory/state/phase.json")[0]
        assert "missing-output" in {f.code for f in unit.findings}


# (file content, the words the one stderr line must hold, its line and column)
BROKEN_JSON = [
    (b'{\n  "steps": {},\n}\n', "a trailing comma before '}'", (2, 14)),
    (b'{"steps": [\n  1,\n  2,\n]}', "a trailing comma before ']'", (3, 4)),
    (b'{\n  // the steps\n  "steps": {}\n}', "a '//' comment (JSON has no comments)", (2, 3)),
    (b'/* header */ {"steps": {}}', "a '/*' comment (JSON has no comments)", (1, 1)),
    (
        b'{\n<<<<<<< HEAD\n  "current_step": 2\n=======\n  "current_step": 3\n>>>>>>> x\n}',
        "git merge-conflict marker '<<<<<<<' (an unresolved merge)",
        (2, 1),
    ),
    (
        '{"steps": {}}'.encode("utf-16-le"),
        "UTF-16LE text without a byte-order mark",
        (1, 1),
    ),
    (
        '{"steps": {"1": {"status": "é"}}}'.encode("utf-16-be"),
        "UTF-16BE text without a byte-order mark",
        (1, 1),
    ),
    (b'\n  ["step-1"]', "the top level must be a JSON object, not an array", (2, 3)),
    (b"null", "the top level must be a JSON object, not null", (1, 1)),
]
BROKEN_IDS = [
    "trailing-comma-object",
    "trailing-comma-array",
    "line-comment",
    "block-comment",
    "conflict-markers",
    "utf16le-no-bom",
    "utf16be-no-bom",
    "top-level-array",
    "top-level-null",
]

STATE_FILES = {
    "epic": "plans/epic-0049/execution-state.json",
    "issue-plan": ".claude/plans/issue-7-x/execution-state.json",
    "checkpoint": "memory/state/phase.json",
    "session": session_state("p"),
}


class TestUnreadable:
    """A file that cannot be read: exit 65 and one stderr line naming file, cause, position."""

    @pytest.mark.slow
    @pytest.mark.parametrize("fmt", sorted(STATE_FILES))
    @pytest.mark.parametrize(("data", "cause", "where"), BROKEN_JSON, ids=BROKEN_IDS)
    def test_one_line(
        self,
        fmt: str,
        data: bytes,
        cause: str,
        where: tuple[int, int],
        tmp_path: Path,
        run_storyd: Run,
    ) -> None:
        relpath = STATE_FILES[fmt]
        path = tmp_path / relpath
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        if fmt == "epic":
            argv = ("--story-id", "story-0049-0001", "--epic-id", "0049")
            done = run_storyd("resume", *argv, cwd=tmp_path)
        else:
            done = run_storyd("resume", "--state-file", relpath, cwd=tmp_path)
        assert done.returncode == 65
        assert done.stdout == b""
        lines = done.stderr.decode().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"{relpath}: ")
        assert cause in lines[0]
        assert f"at line {where[0]} column {where[1]}" in lines[0]

    @pytest.mark.parametrize(
        ("data", "cause"),
        [
            (
                b"flow: greenfield\n<<<<<<< HEAD\nstep: 3\n=======\nstep: 4\n>>>>>>> main\n",
                "git merge-conflict marker '<<<<<<<' (an unresolved merge) at line 2 column 1",
            ),
            (
                "flow: greenfield\nstep: 3\n".encode("utf-16-le"),
                "UTF-16LE text without a byte-order mark",
            ),
        ],
    )
    def test_autodev(self, data: bytes, cause: str, tmp_path: Path, run_storyd: Run) -> None:
        write_autodev(tmp_path, data)
        done = run_storyd("resume", "--state-file", AUTODEV, cwd=tmp_path)
        assert done.returncode == 65
        lines = done.stderr.decode().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"{AUTODEV}: ")
        assert cause in lines[0]

    def test_issue_plan_initialiser_template(self, tmp_path: Path, run_storyd: Run) -> None:
        """The producer's SKILL.md initialiser writes a `//` comment into the tasks array."""
        relpath = ".claude/plans/issue-42-geofencing/execution-state.json"
        path = tmp_path / relpath
        path.parent.mkdir(parents=True)
        path.write_text(
            "{\n"
            '  "issue": {\n'
            '    "number": 42,\n'
            '    "title": "Geofencing",\n'
            '    "branch": "issue/42-geofencing"\n'
            "  },\n"
            '  "created_at": "2026-01-20T10:00:00Z",\n'
            '  "updated_at": "2026-01-20T10:00:00Z",\n'
            '  "tasks": [\n'
            "    // Populated from tasks.md parsing\n"
            "  ]\n"
            "}\n"
        )
        done = run_storyd("resume", "--state-file", relpath, cwd=tmp_path)
        assert done.returncode == 65
        assert done.stderr.decode() == (
            f"{relpath}: invalid JSON: a '//' comment (JSON has no comments) at line 10 column 5\n"
        )

    def test_session_backup_stands_in(self, tmp_path: Path) -> None:
        """With a good .bak the cause is a warning, not an exit: the writer's own rule."""
        ws = tmp_path / "ws"
        state = ws / session_state("p")
        state.parent.mkdir(parents=True)
        state.write_bytes(b'{"steps": {"1": {"status": "complete"},}}')
        state.with_name(state.name + ".bak").write_bytes(b'{"steps": {"1": {"status": "pending"}}}')
        unit = load_one(SESSION, ws, session_state("p"))
        [backup] = [f for f in unit.findings if f.code == "restored-from-backup"]
        assert "a trailing comma before '}' at line 1 column 39" in backup.message
        assert [t.status for t in unit.tasks] == ["pending"]


@pytest.mark.slow
class TestDaemonFinding:
    """The daemon's state-unreadable finding carries the same cause as the CLI's line."""

    def test_trailing_comma(self, spawn_daemon: Spawn, tmp_path: Path, run_storyd: Run) -> None:
        ws = copy_fixture(FIXTURES / "session" / "real-step-3_5", tmp_path / "ws")
        relpath = session_state("nordic-foods")
        proc = spawn_daemon([ws])
        request: dict[str, object] = {"op": "resume", "workspace": str(ws), "stateFile": relpath}
        good = proc.request(request)
        assert good["ok"] is True, good
        broken = b'{\n  "steps": {"1": {"status": "complete"},}\n}\n'
        atomic_write(ws / relpath, broken)
        cause = "invalid JSON: a trailing comma before '}' at line 2 column 40"

        def unreadable() -> str:
            findings = proc.request(request).get("findings")
            messages = [
                str(f["message"])
                for f in (findings if isinstance(findings, list) else [])
                if f["code"] == "state-unreadable"
            ]
            return messages[0] if messages else ""

        message = wait_for(unreadable, message="the state-unreadable finding")
        assert cause in message
        assert proc.request(request)["envelope"] == good["envelope"]  # the last good answer
        direct = run_storyd("resume", "--state-file", relpath, "--direct", cwd=ws)
        assert direct.returncode == 65
        assert cause in direct.stderr.decode()
