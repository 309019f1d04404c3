"""The `autodev` format (seed 003): the one-line and multi-line state pointer, and its rules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from format_harness import Run, codes, copier, direct_envelope, load_one, resume_direct
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.api.answers import Options, resume_unit
from storyd.core.errors import DataError
from storyd.core.formats import adapter_for, builtin
from storyd.core.formats.autodev import ADAPTER, parse_state
from storyd.core.formats.base import Source
from storyd.core.model import DONE, PENDING, Unit

FIXTURES = Path(__file__).parent / "fixtures" / "autodev"
STATE = "_docs/_autodev_state.md"
EX1 = (
    "flow: greenfield step: 3 name: Plan status: in_progress sub_step: phase: 4 "
    'name: architecture-review-risk-assessment detail: "" retry_count: 0 cycle: 1'
)
PLAN_POINT = "greenfield/step-3:architecture-review-risk-assessment"


@pytest.fixture
def workspace(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a fixture workspace into tmp_path."""
    return copier(FIXTURES, tmp_path)


def load(ws: Path) -> Unit:
    return load_one(ADAPTER, ws, STATE)


def write(ws: Path, text: str) -> None:
    (ws / STATE).write_text(text)


def envelope(ws: Path) -> dict[str, object]:
    return direct_envelope(ws, STATE)


class TestPaths:
    """The adapter claims _docs/_autodev_state.md; any _docs/ file maps to it."""

    @pytest.mark.parametrize(
        ("relpath", "expected"),
        [(STATE, True), ("docs/_autodev_state.md", False), ("_docs/x/_autodev_state.md", False)],
    )
    def test_matches(self, relpath: str, expected: bool) -> None:
        assert ADAPTER.matches(relpath) is expected

    @pytest.mark.parametrize(
        ("path", "owner"),
        [
            (STATE, STATE),
            ("_docs/_repo-config.yaml", STATE),
            ("_docs/02_document/state.json", STATE),
            ("src/a.py", None),
        ],
    )
    def test_owner(self, path: str, owner: str | None) -> None:
        assert ADAPTER.owner(path) == owner

    def test_registered_and_detected(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("greenfield-plan")
        assert builtin("autodev") is ADAPTER
        assert adapter_for(STATE) is ADAPTER
        assert ADAPTER.find(Source(str(ws))) == [STATE]


class TestForms:
    """The seed's collapsed one-line examples and the multi-line template read alike."""

    @pytest.mark.parametrize(
        "name", ["greenfield-plan", "greenfield-plan-bare", "greenfield-plan-multiline"]
    )
    def test_example_one(self, workspace: Callable[[str], Path], name: str) -> None:
        unit = load(workspace(name))
        assert unit.resume_point == PLAN_POINT
        assert unit.findings == ()
        assert unit.labels == {
            "flow": "greenfield",
            "step": "3",
            "name": "Plan",
            "status": "in_progress",
            "cycle": "1",
            "retry_count": "0",
            "sub_step": "4:architecture-review-risk-assessment",
            "progress": "2/11 (18%)",
            "flow_table": "seed 003 (11 steps)",
        }

    def test_extra_key_is_not_swallowed(
        self, workspace: Callable[[str], Path], run_storyd: Run
    ) -> None:
        """A one-line file with a field of the writer's own after `cycle` (`tracker: jira`)."""
        ws = workspace("greenfield-plan")
        write(ws, EX1 + " tracker: jira\n")
        unit = load(ws)
        assert unit.resume_point == PLAN_POINT
        assert unit.labels["cycle"] == "1" and unit.labels["tracker"] == "jira"
        assert [(f.code, f.severity) for f in unit.findings] == [("extra-field", "info")]
        assert "tracker: 'jira'" in unit.findings[0].message
        detail = run_storyd("resume", "--state-file", STATE, "--detail", "--direct", cwd=ws)
        assert detail.returncode == 0
        assert [f["code"] for f in orjson.loads(detail.stdout)["findings"]] == ["extra-field"]
        # the same field between known ones, and a mid-word colon in a name, stay as before
        top, _, _ = parse_state("flow: greenfield tracker: jira step: 3 name: Plan: review")
        assert top == {"flow": "greenfield", "+tracker": "jira", "step": "3",
                       "name": "Plan: review"}

    def test_one_line_fields(self) -> None:
        top, sub, scalar = parse_state(EX1)
        assert top == {
            "flow": "greenfield",
            "step": "3",
            "name": "Plan",
            "status": "in_progress",
            "retry_count": "0",
            "cycle": "1",
        }
        assert sub == {"phase": "4", "name": "architecture-review-risk-assessment", "detail": ""}
        assert scalar is None

    @pytest.mark.parametrize(
        "text",
        [
            'sub_step: {phase: 0, name: awaiting-invocation, detail: ""}',
            "sub_step:\n  phase: 0\n  name: awaiting-invocation\n  detail: ''",
            'sub_step:\nphase: 0\nname: awaiting-invocation\ndetail: ""',
            '- sub_step:\n  - phase: 0\n  - name: awaiting-invocation\n  - detail: ""',
        ],
    )
    def test_sub_step_forms(self, text: str) -> None:
        _, sub, _ = parse_state(f"flow: greenfield\nstep: 1\nname: Problem\n{text}\nretry_count: 0")
        assert sub == {"phase": "0", "name": "awaiting-invocation", "detail": ""}

    def test_name_after_an_indented_sub_step_is_the_steps(self) -> None:
        text = "step: 3\nsub_step:\n  phase: 4\n  name: a-b\n  detail: x\nname: Plan\n"
        top, sub, _ = parse_state(text)
        assert (top["name"], sub) == ("Plan", {"phase": "4", "name": "a-b", "detail": "x"})

    def test_quoted_detail_may_hold_keys(self) -> None:
        _, sub, _ = parse_state(
            'step: 2 sub_step: phase: 1 name: x detail: "retry step: 2 name: y" cycle: 1'
        )
        assert sub == {"phase": "1", "name": "x", "detail": "retry step: 2 name: y"}

    def test_code_fence_and_heading_on_the_same_line(self) -> None:
        top, sub, _ = parse_state(f"```markdown # Autodev State ## Current Step {EX1} ```")
        assert top["cycle"] == "1"
        assert sub is not None and sub["name"] == "architecture-review-risk-assessment"

    @given(
        st.text(
            alphabet=st.sampled_from(list("flowstepnamesub_:\"' {}\n\t-0123456789")), max_size=200
        )
    )
    @settings(max_examples=300, deadline=None)
    def test_parser_never_raises(self, text: str) -> None:
        top, sub, scalar = parse_state(text)
        assert isinstance(top, dict)
        assert sub is None or isinstance(sub, dict)
        assert scalar is None or isinstance(scalar, str)


class TestSeedExamples:
    """Each of the seed's four examples."""

    def test_failed_three_retries_needs_a_human(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("existing-code-failed"))
        [found] = unit.findings
        assert (found.code, found.severity, found.task) == ("needs-human", "error", "step-3")
        assert found.message == (
            "step 3 (Test Spec) failed after 3 retries: "
            "do not auto-retry; present the issue to the user"
        )
        assert unit.resume_point == "existing-code/step-3:test-case-generation"
        assert len(unit.tasks) == 17

    def test_meta_repo_review(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("meta-repo-review"))
        assert unit.findings == ()
        assert unit.resume_point == "meta-repo/step-2:awaiting-human-review"
        assert unit.tasks[1].extra["sub_step"] == {
            "phase": 0,
            "name": "awaiting-human-review",
            "detail": "awaiting review of _docs/_repo-config.yaml",
        }

    def test_existing_code_cycle_three(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("existing-code-cycle3"))
        assert unit.findings == ()
        assert unit.resume_point == "existing-code/step-10:batch-loop"
        assert unit.labels["cycle"] == "3"
        assert unit.tasks[9].extra["sub_step"]["detail"] == "batch 2 of ~4"  # type: ignore[index]


class TestTasks:
    """Steps before the current one are inferred completed; the current one has its own status."""

    def test_greenfield_step_three(self, workspace: Callable[[str], Path]) -> None:
        unit = load(workspace("greenfield-plan"))
        assert [t.id for t in unit.tasks] == [f"step-{n}" for n in range(1, 12)]
        assert [t.bucket for t in unit.tasks[:3]] == [DONE, DONE, PENDING]
        assert unit.tasks[0].extra == {"inferred": True}
        assert unit.tasks[2].status == "in_progress"
        assert unit.tasks[3].status == "not_started"

    @pytest.mark.parametrize(
        ("status", "bucket", "known"),
        [
            ("completed", DONE, True),
            ("Skipped", DONE, True),
            ("not_started", PENDING, True),
            ("IN_PROGRESS", PENDING, True),
            ("failed", PENDING, True),
            ("paused", PENDING, False),
        ],
    )
    def test_current_status(
        self, workspace: Callable[[str], Path], status: str, bucket: str, known: bool
    ) -> None:
        ws = workspace("greenfield-plan")
        write(ws, EX1.replace("in_progress", status))
        task = load(ws).tasks[2]
        assert (task.status, task.bucket, task.known) == (status, bucket, known)

    def test_unknown_status(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("unknown-status")
        assert codes(load(ws)) == ["unknown-status"]
        result = resume_unit(str(ws), STATE, None, Options())
        assert result.warnings == [
            "warn: unknown status 'paused' for task step-3; treated as PENDING"
        ]


class TestResumePoint:
    """`<flow>/step-<N>:<sub_step>`, fresh-start, all-done, and the step after a finished one."""

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("fresh", "fresh-start"),
            ("done", "all-done"),
            ("boundary", "greenfield/step-4"),
            ("unparsable-sub-step", "greenfield/step-3"),
        ],
    )
    def test_fixtures(self, workspace: Callable[[str], Path], name: str, expected: str) -> None:
        assert envelope(workspace(name))["resumePoint"] == expected

    def test_last_step_completed_is_all_done(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("meta-repo-review")
        write(
            ws,
            EX1.replace("greenfield", "meta-repo")
            .replace("step: 3", "step: 6")
            .replace("in_progress", "completed"),
        )
        assert envelope(ws)["resumePoint"] == "all-done"

    def test_started_step_one_is_not_fresh(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("fresh")
        write(ws, EX1.replace("step: 3", "step: 1"))
        assert (
            envelope(ws)["resumePoint"] == "greenfield/step-1:architecture-review-risk-assessment"
        )


class TestSubStep:
    """An unparsable sub_step is a finding; the orchestrator falls back to the folder scan."""

    @pytest.mark.parametrize(
        ("replace", "why"),
        [
            (("phase: 4", "phase: 4.5"), "phase '4.5' is not an integer"),
            (("phase: 4", "phase: four"), "phase 'four' is not an integer"),
            (
                ("name: architecture-review-risk-assessment", "name: Architecture Review"),
                "is not kebab-case",
            ),
            (
                (
                    'sub_step: phase: 4 name: architecture-review-risk-assessment detail: ""',
                    "sub_step: 4 review",
                ),
                "not the structured phase/name/detail form",
            ),
            (
                ('sub_step: phase: 4 name: architecture-review-risk-assessment detail: ""', ""),
                "there is no sub_step",
            ),
            (
                (
                    "phase: 4 name: architecture-review-risk-assessment",
                    "phase: 4 name: awaiting-invocation",
                ),
                "goes with phase 0",
            ),
        ],
    )
    def test_unparsable(
        self, workspace: Callable[[str], Path], replace: tuple[str, str], why: str
    ) -> None:
        ws = workspace("greenfield-plan")
        write(ws, EX1.replace(*replace))
        unit = load(ws)
        [found] = unit.findings
        assert (found.code, found.severity, found.task) == (
            "unparsable-sub-step",
            "warning",
            "step-3",
        )
        assert why in found.message
        assert unit.resume_point == "greenfield/step-3"

    def test_fixture(self, workspace: Callable[[str], Path]) -> None:
        assert codes(load(workspace("unparsable-sub-step"))) == ["unparsable-sub-step"]


class TestRules:
    """The seed's retry rules, flow ranges and cycle."""

    @pytest.mark.parametrize(
        ("retries", "status", "code", "severity"),
        [
            ("3", "failed", "needs-human", "error"),
            ("4", "failed", "needs-human", "error"),
            ("1", "failed", "step-failed", "info"),
            ("3", "in_progress", "retry-limit", "warning"),
        ],
    )
    def test_retries(
        self, workspace: Callable[[str], Path], retries: str, status: str, code: str, severity: str
    ) -> None:
        ws = workspace("greenfield-plan")
        write(
            ws,
            EX1.replace("retry_count: 0", f"retry_count: {retries}").replace("in_progress", status),
        )
        [found] = load(ws).findings
        assert (found.code, found.severity) == (code, severity)

    @pytest.mark.parametrize(
        ("replace", "code"),
        [
            (("step: 3", "step: 18"), "step-out-of-range"),  # beyond every version
            (("flow: greenfield", "flow: brownfield"), "unknown-flow"),
            (("flow: greenfield ", ""), "missing-field"),
            (("status: in_progress ", ""), "missing-field"),
            (("cycle: 1", "cycle: 2"), "unexpected-cycle"),
            (("cycle: 1", "cycle: zero"), "invalid-field"),
            (("retry_count: 0", "retry_count: -1"), "invalid-field"),
        ],
    )
    def test_field_findings(
        self, workspace: Callable[[str], Path], replace: tuple[str, str], code: str
    ) -> None:
        ws = workspace("greenfield-plan")
        write(ws, EX1.replace(*replace))
        assert codes(load(ws)) == [code]

    @pytest.mark.parametrize("step", ["", "three", "0", "[1-11 for greenfield]"])
    def test_bad_step_is_a_unit_error(self, workspace: Callable[[str], Path], step: str) -> None:
        ws = workspace("greenfield-plan")
        write(ws, EX1.replace("step: 3", f"step: {step}"))
        assert load(ws).error is not None
        with pytest.raises(
            DataError, match=r"^_docs/_autodev_state\.md: step .* is neither a step number nor done"
        ):
            resume_unit(str(ws), STATE, None, Options())

    @pytest.mark.parametrize(
        "text", ["", "\n\n", "this file holds nothing an autodev would write", "\x00\xff"]
    )
    def test_no_state_is_a_data_error(self, workspace: Callable[[str], Path], text: str) -> None:
        ws = workspace("garbage")
        write(ws, text)
        with pytest.raises(DataError, match=r"^_docs/_autodev_state\.md: no autodev state found"):
            load(ws)


class TestCrossCheck:
    """The state against the _docs/ folder, where the seed says what the folder must hold."""

    def test_docs_hold_nothing(self, workspace: Callable[[str], Path]) -> None:
        [found] = load(workspace("docs-empty")).findings
        assert (found.code, found.severity) == ("docs-disagree", "warning")
        assert "step 3" in found.message

    def test_step_one_with_empty_docs_is_fine(self, workspace: Callable[[str], Path]) -> None:
        assert load(workspace("fresh")).findings == ()

    def test_detail_names_a_missing_file(self, workspace: Callable[[str], Path]) -> None:
        [found] = load(workspace("meta-repo-missing-config")).findings
        assert (found.code, found.task) == ("missing-referenced-file", "step-2")
        assert "names _docs/_repo-config.yaml, which does not exist" in found.message

    def test_missing_cycle_report(self, workspace: Callable[[str], Path]) -> None:
        [found] = load(workspace("cycle-report-missing")).findings
        assert found.code == "missing-cycle-report"
        assert "implementation_report_*_cycle2.md for cycle 2" in found.message

    def test_past_implement_needs_this_cycles_report(
        self, workspace: Callable[[str], Path]
    ) -> None:
        ws = workspace("existing-code-cycle3")
        text = (ws / STATE).read_text().replace("step: 10 name: Implement", "step: 11 name: Review")
        write(ws, text)
        [found] = load(ws).findings
        assert "cycle 3" in found.message
        report = ws / "_docs/04_implementation/implementation_report_geofencing_cycle3.md"
        report.write_text("# Cycle 3\n")
        assert load(ws).findings == ()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("autodev-scratch")
    (ws / "_docs").mkdir()
    return ws


@given(data=st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_any_bytes_load_or_raise_data_error(scratch: Path, data: bytes) -> None:
    """A torn or garbage file never gives anything but units or a DataError."""
    (scratch / STATE).write_bytes(data)
    try:
        units = ADAPTER.load(Source(str(scratch)), STATE)
    except DataError as exc:
        assert exc.message.startswith(STATE)
    else:
        assert len(units) == 1


class TestCli:
    """`storyd resume --state-file … --direct` answers through the real process."""

    def test_resume(self, workspace: Callable[[str], Path], run_storyd: Run) -> None:
        ws = workspace("greenfield-plan")
        done = resume_direct(run_storyd, ws, STATE)
        assert done.returncode == 0
        assert done.stderr == b""
        assert orjson.loads(done.stdout) == {
            "resumePoint": PLAN_POINT,
            "tasksCompleted": [
                {"id": "step-1", "commitSha": None},
                {"id": "step-2", "commitSha": None},
            ],
            "tasksPending": [f"step-{n}" for n in range(3, 12)],
            "lastCommitSha": None,
            "staleWarnings": [],
        }

    def test_detail_shows_needs_human(
        self, workspace: Callable[[str], Path], run_storyd: Run
    ) -> None:
        ws = workspace("existing-code-failed")
        done = resume_direct(run_storyd, ws, STATE, "--detail")
        assert done.returncode == 0
        body = orjson.loads(done.stdout)
        assert [(f["code"], f["severity"]) for f in body["findings"]] == [("needs-human", "error")]

    def test_garbage_exits_65(self, workspace: Callable[[str], Path], run_storyd: Run) -> None:
        done = resume_direct(run_storyd, workspace("garbage"), STATE)
        assert (done.returncode, done.stdout) == (65, b"")
        assert b"no autodev state found" in done.stderr
        assert b"Traceback" not in done.stderr


FLOW_17 = "\n".join(
    ["# Greenfield flow", "", "## Step Reference Table", "", "| Step | Name | Skill |",
     "|------|------|-------|"]
    + [f"| {n} | {name} | x |" for n, name in [
        ("1", "Problem"), ("2", "Research"), ("3", "Plan"), ("4", "UI Design"),
        ("5", "Decompose"), ("6", "Test Spec"), ("7", "Implement"), ("8", "Run Tests"),
        ("9", "Review"), ("10", "Security"), ("11", "Performance"), ("12", "Docs"),
        ("13", "Deploy"), ("14", "Smoke"), ("15", "Release"), ("16", "Retrospective"),
        ("16.5", "Handoff"), ("17", "Done")]]
    + ["", "## Auto-Chain Rules", "| From | To |", "|---|---|", "| 1 | 2 |"]
) + "\n"


class TestFlowTable:
    """The workspace's own flows/<flow>.md Step Reference Table counts the progress."""

    def flow(self, ws: Path, text: str = FLOW_17, folder: str = ".claude") -> None:
        path = ws / folder / "skills" / "autodev" / "flows" / "greenfield.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def test_longer_flow_counts_on_its_own_table(
        self, workspace: Callable[[str], Path], run_storyd: Run
    ) -> None:
        ws = workspace("greenfield-plan")
        write(ws, EX1.replace("step: 3 name: Plan", "step: 7 name: Run Tests") + "\n")
        assert load(ws).labels["progress"] == "6/11 (54%)"  # the seed's (2026-04) table
        write(ws, EX1.replace("step: 3 name: Plan", "step: 7 name: Implement") + "\n")
        self.flow(ws)
        unit = load(ws)
        assert unit.labels["progress"] == "6/18 (33%)"
        assert unit.labels["flow_table"] == ".claude/skills/autodev/flows/greenfield.md (18 steps)"
        assert unit.resume_point == "greenfield/step-7:architecture-review-risk-assessment"
        assert [t.id for t in unit.tasks][-3:] == ["step-16", "step-16.5", "step-17"]
        detail = run_storyd("resume", "--state-file", STATE, "--detail", "--direct", cwd=ws)
        [table] = [f for f in orjson.loads(detail.stdout)["findings"] if f["code"] == "flow-table"]
        assert table["severity"] == "info"
        assert "greenfield.md's Step Reference Table (18 steps: 1..17)" in table["message"]

    def test_half_step_is_a_step(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("greenfield-plan")
        self.flow(ws, folder=".cursor")
        write(ws, EX1.replace("step: 3 name: Plan status: in_progress",
                              "step: 16.5 name: Handoff status: completed") + "\n")
        unit = load(ws)
        assert unit.resume_point == "greenfield/step-17"
        assert unit.labels["progress"] == "17/18 (94%)"

    def test_a_table_without_the_step_is_said(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("greenfield-plan")
        self.flow(ws, FLOW_17.replace("| 3 | Plan | x |\n", ""))
        unit = load(ws)
        assert unit.labels["progress"] == "2/11 (18%)"
        assert [f.code for f in unit.findings] == ["flow-table-mismatch"]


EXISTING_SPLIT = "\n".join(
    # the shape of azaion/satellite-provider's flows/existing-code.md (2026-04-22): the
    # Step Reference Table split into Phase A and Phase B sub-tables, more tables after it
    ["# Existing Code Workflow", "", "## Step Reference Table", "",
     "### Phase A — One-time baseline setup", "",
     "| Step | Name | Sub-Skill | Internal SubSteps |", "|------|------|------|------|"]
    + [f"| {n} | step {n} | x | y |" for n in range(1, 9)]
    + ["", "### Phase B — Feature cycle (loops back to Step 9 after Step 17)", "",
       "| Step | Name | Sub-Skill | Internal SubSteps |", "|------|------|------|------|"]
    + [f"| {n} | {'Implement' if n == '10' else 'step ' + n} | x | y |"
       for n in [*map(str, range(9, 17)), "16.5", "17"]]
    + ["", "## Detection Rules", "", "| Step | Condition |", "|---|---|", "| 40 | never |"]
) + "\n"


def test_split_step_reference_table(workspace: Callable[[str], Path]) -> None:
    ws = workspace("existing-code-cycle3")
    path = ws / ".cursor" / "skills" / "autodev" / "flows" / "existing-code.md"
    path.parent.mkdir(parents=True)
    path.write_text(EXISTING_SPLIT)
    unit = load(ws)
    assert unit.labels["flow_table"] == ".cursor/skills/autodev/flows/existing-code.md (18 steps)"
    assert [t.id for t in unit.tasks][-3:] == ["step-16", "step-16.5", "step-17"]
    assert "flow-table-mismatch" not in codes(unit)


class TestProducerTables:
    """Without a flow file, the producer's versions (azaion's autodev skill) decide when
    the file proves a later one: the step's name, or a step only a later table has."""

    @pytest.mark.parametrize(
        ("step", "name", "progress", "table"),
        [
            ("7", "Run Tests", "6/11 (54%)", "seed 003 (11 steps)"),
            ("7", "Implement", "6/18 (33%)", "producer greenfield 2026-06 (18 steps)"),
            ("7", "", "6/11 (54%)", "seed 003 (11 steps)"),
            ("13", "", "12/18 (66%)", "producer greenfield 2026-06 (18 steps)"),
            ("16.5", "Release", "16/18 (88%)", "producer greenfield 2026-06 (18 steps)"),
        ],
    )
    def test_greenfield_versions(
        self, workspace: Callable[[str], Path], step: str, name: str, progress: str, table: str
    ) -> None:
        ws = workspace("greenfield-plan")
        pointer = f"step: {step}" + (f" name: {name}" if name else "")
        write(ws, EX1.replace("step: 3 name: Plan", pointer) + "\n")
        unit = load(ws)
        assert (unit.labels["progress"], unit.labels["flow_table"]) == (progress, table)
        if table.startswith("producer"):
            [found] = [f for f in unit.findings if f.code == "flow-table"]
            assert "gps-denied-onboard" in found.message and "chosen because" in found.message

    def test_meta_repo_half_step(self, workspace: Callable[[str], Path]) -> None:
        ws = workspace("meta-repo-review")
        text = (ws / STATE).read_text().replace("step: 2", "step: 2.5")
        write(ws, text)
        unit = load(ws)
        assert unit.labels["flow_table"] == "producer meta-repo 2026-05 (8 steps)"
        assert unit.resume_point.startswith("meta-repo/step-2.5")
