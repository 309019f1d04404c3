"""`storyd resume` as a process: flags, exit codes, the envelope's rules and its messages."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from epic_state_harness import write_epic

Run = Callable[..., subprocess.CompletedProcess[bytes]]
S = "story-0049-0013"
ARGS = ("--story-id", S, "--epic-id", "0049")
STATE = Path("plans/epic-0049/execution-state.json")
STORY = Path(f"plans/epic-0049/{S}.md")
KEYS = ["resumePoint", "tasksCompleted", "tasksPending", "lastCommitSha", "staleWarnings"]


def epoch(stamp: str) -> float:
    """Epoch seconds of an ISO-8601 instant with a zone (the test's own oracle)."""
    return datetime.fromisoformat(stamp).timestamp()


def resume(run: Run, cwd: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    """Run `storyd resume` and check what holds for every run, whatever the exit code."""
    done = run("resume", *args, cwd=cwd, **kwargs)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    if done.returncode != 0:
        assert done.stdout == b"", f"exit {done.returncode} printed {done.stdout!r}"
    else:
        assert done.stdout.endswith(b"\n") and done.stdout.count(b"\n") == 1
    return done


def envelope(done: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    """The parsed envelope of a successful run, with its key order checked."""
    assert done.returncode == 0, done.stderr
    parsed: dict[str, object] = json.loads(done.stdout)
    assert list(parsed) == KEYS
    return parsed


def write_raw(workspace: Path, data: bytes | str) -> Path:
    """Write the state file's bytes exactly as given."""
    path = workspace / STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def write_tasks(workspace: Path, tasks: dict[str, dict[str, object]]) -> Path:
    """One story, story-0049-0013, with these tasks in this order."""
    return write_epic(workspace, "0049", tasks={S: tasks})


def touch_story(workspace: Path, mtime: float) -> Path:
    """Create the story file with an exact mtime."""
    path = workspace / STORY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# story\n", encoding="utf-8")
    os.utime(path, (mtime, mtime))
    return path


def stderr_lines(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    return done.stderr.decode("utf-8").splitlines()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace folder."""
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def simple(ws: Path) -> Path:
    """A workspace whose story has one DONE and one PENDING task."""
    write_tasks(
        ws,
        {
            "T1": {"status": "DONE", "commitSha": "a1", "completedAt": "2024-05-01T10:00:00Z"},
            "T2": {"status": "PENDING"},
        },
    )
    return ws


SIMPLE_OUT = (
    b'{"resumePoint":"phase-2-task-2","tasksCompleted":[{"id":"T1","commitSha":"a1"}],'
    b'"tasksPending":["T2"],"lastCommitSha":"a1","staleWarnings":[]}\n'
)


class TestUsage:
    """Missing, unknown and malformed flags exit 64 with a `usage:` line and no stdout."""

    @pytest.mark.parametrize(
        ("argv", "first"),
        [
            ((), "missing --story-id"),
            (("--story-id", S), "missing --epic-id"),
            (("--epic-id", "0049"), "missing --story-id"),
            (("--story-id",), "flag --story-id needs a value"),
            ((*ARGS, "--epic-id"), "flag --epic-id needs a value"),
            ((*ARGS, "--bogus"), "unknown flag --bogus"),
            ((*ARGS, "--bogus=1"), "unknown flag --bogus"),
            (("--bogus", *ARGS), "unknown flag --bogus"),
            ((*ARGS, "-x"), "unexpected argument '-x'"),
            ((*ARGS, "extra"), "unexpected argument 'extra'"),
            ((*ARGS, "--"), "unexpected argument '--'"),
            ((*ARGS, "--direct=yes"), "flag --direct takes no value"),
            ((*ARGS, "--detail=1"), "flag --detail takes no value"),
        ],
    )
    def test_refused(
        self, argv: tuple[str, ...], first: str, simple: Path, run_storyd: Run
    ) -> None:
        done = resume(run_storyd, simple, *argv)
        assert done.returncode == 64
        lines = stderr_lines(done)
        assert lines[0] == first
        assert any(line.startswith("usage:") for line in lines)

    @pytest.mark.parametrize(
        ("flag", "value"),
        [
            ("--lock-timeout", "abc"),
            ("--lock-timeout", "-1"),
            ("--lock-timeout", "nan"),
            ("--lock-timeout", "inf"),
            ("--lock-timeout", "3601"),
            ("--timeout", "0"),
            ("--timeout", "x"),
            ("--staleness", "ctime"),
            ("--staleness", ""),
        ],
    )
    def test_bad_option_values(self, flag: str, value: str, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, *ARGS, "--direct", flag, value)
        assert done.returncode == 64
        lines = stderr_lines(done)
        assert lines[0].startswith(f"invalid {flag} ")
        assert any(line.startswith("usage:") for line in lines)

    @pytest.mark.parametrize(
        "argv",
        [
            ("--state-file", str(STATE), "--story-id", S),
            ("--state-file", str(STATE), "--epic-id", "0049"),
            (*ARGS, "--unit", S),
        ],
    )
    def test_conflicting_selectors(
        self, argv: tuple[str, ...], simple: Path, run_storyd: Run
    ) -> None:
        done = resume(run_storyd, simple, *argv, "--direct")
        assert done.returncode == 64
        assert any(line.startswith("usage:") for line in stderr_lines(done))

    def test_valid_option_values_accepted(self, simple: Path, run_storyd: Run) -> None:
        done = resume(
            run_storyd,
            simple,
            *ARGS,
            "--direct",
            "--lock-timeout",
            "0",
            "--timeout",
            "1",
            "--staleness",
            "mtime",
        )
        assert done.stdout == SIMPLE_OUT


class TestFlagForms:
    """`--key value` and `--key=value` are the same request."""

    @pytest.mark.parametrize(
        "argv",
        [
            ("--story-id", S, "--epic-id", "0049"),
            (f"--story-id={S}", "--epic-id=0049"),
            (f"--story-id={S}", "--epic-id", "0049"),
            ("--epic-id=0049", "--story-id", S),
            ("--story-id", "story-0000-0000", f"--story-id={S}", "--epic-id", "0049"),
        ],
    )
    @pytest.mark.parametrize("direct", [True, False])
    def test_same_output(
        self, argv: tuple[str, ...], direct: bool, simple: Path, run_storyd: Run
    ) -> None:
        done = resume(run_storyd, simple, *argv, *(["--direct"] if direct else []))
        assert done.returncode == 0
        assert done.stdout == SIMPLE_OUT
        assert done.stderr == b""

    def test_workspace_equals_form(self, simple: Path, tmp_path: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, tmp_path, *ARGS, "--direct", f"--workspace={simple}")
        assert done.stdout == SIMPLE_OUT

    def test_relative_workspace(self, simple: Path, tmp_path: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, tmp_path, *ARGS, "--direct", "--workspace", "ws")
        assert done.stdout == SIMPLE_OUT


class TestStoryId:
    """Story ids are lower-cased, then must be exactly story-NNNN-NNNN."""

    @pytest.mark.parametrize("story", ["STORY-0049-0013", "Story-0049-0013", "sToRy-0049-0013"])
    def test_upper_case_normalised(self, story: str, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, "--story-id", story, "--epic-id", "0049", "--direct")
        assert done.stdout == SIMPLE_OUT

    @pytest.mark.parametrize(
        "story",
        [
            "story-0049-0013/../../x",
            "../",
            "..",
            "/etc/passwd",
            "story-0049-0013/",
            "story-49-13",
            "story-0049-01",
            "story-0049-00130",
            "story_0049_0013",
            "story-00a9-0013",
            "story-0049--013",
            "story-0049-0013.md",
            " story-0049-0013",
            "story-0049-0013 ",
            "story-0049-0013\n",
            "story-\u0660\u0660\u0664\u0669-0013",
            "",
        ],
    )
    def test_bad_shapes_refused(self, story: str, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, f"--story-id={story}", "--epic-id", "0049", "--direct")
        assert done.returncode == 64
        lines = stderr_lines(done)
        assert lines[0].startswith("invalid --story-id ")
        assert any(line.startswith("usage:") for line in lines)

    def test_traversal_never_reads_outside(self, tmp_path: Path, run_storyd: Run) -> None:
        # A state file where the traversal would land, had the id been used as a path.
        outside = tmp_path / "x"
        write_tasks(outside, {"T1": {"status": "DONE"}})
        inner = tmp_path / "a" / "b"
        inner.mkdir(parents=True)
        done = resume(
            run_storyd,
            inner,
            "--story-id",
            "story-0049-0013/../../x",
            "--epic-id",
            "0049",
            "--direct",
        )
        assert done.returncode == 64


class TestEpicId:
    """Epic ids are digits, zero-padded to four."""

    @pytest.mark.parametrize("epic", ["49", "049", "0049"])
    def test_padded(self, epic: str, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, "--story-id", S, "--epic-id", epic, "--direct")
        assert done.stdout == SIMPLE_OUT

    def test_five_digits_not_truncated(self, ws: Path, run_storyd: Run) -> None:
        write_epic(ws, "12345", tasks={S: {"T9": {"status": "PENDING"}}})
        done = resume(run_storyd, ws, "--story-id", S, "--epic-id", "12345", "--direct")
        assert envelope(done)["tasksPending"] == ["T9"]

    def test_padding_selects_the_padded_folder(self, ws: Path, run_storyd: Run) -> None:
        write_epic(ws, "0007", tasks={S: {"T7": {"status": "PENDING"}}})
        write_epic(ws, "7", tasks={S: {"WRONG": {"status": "PENDING"}}})
        done = resume(run_storyd, ws, "--story-id", S, "--epic-id", "7", "--direct")
        assert envelope(done)["tasksPending"] == ["T7"]

    @pytest.mark.parametrize(
        "epic",
        [
            "4a",
            "-1",
            "+49",
            "",
            " 49",
            "49 ",
            "../0049",
            "0049/..",
            "\u0664\u0669",
            "1e3",
            "1234567890",
        ],
    )
    def test_non_digits_refused(self, epic: str, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, "--story-id", S, f"--epic-id={epic}", "--direct")
        assert done.returncode == 64
        lines = stderr_lines(done)
        assert lines[0].startswith("invalid --epic-id ")
        assert any(line.startswith("usage:") for line in lines)


class TestStateFileMissing:
    """No regular state file: exit 1 with the seed's message."""

    @pytest.mark.parametrize("direct", [True, False])
    def test_absent(self, direct: bool, ws: Path, run_storyd: Run) -> None:
        (ws / "plans" / "epic-0049").mkdir(parents=True)
        done = resume(run_storyd, ws, *ARGS, *(["--direct"] if direct else []))
        assert (done.returncode, done.stderr) == (1, b"execution-state.json not found\n")

    @pytest.mark.parametrize("direct", [True, False])
    def test_workspace_absent(self, tmp_path: Path, run_storyd: Run, direct: bool) -> None:
        """Issue 20: the message names the workspace (the seed has no --workspace)."""
        flags = ["--direct"] if direct else []
        done = resume(run_storyd, tmp_path, *ARGS, *flags, "--workspace", "nowhere")
        where = tmp_path.resolve() / "nowhere"
        assert (done.returncode, done.stderr) == (
            1, f"workspace {where} does not exist\n".encode())

    def test_directory(self, ws: Path, run_storyd: Run) -> None:
        (ws / STATE).mkdir(parents=True)
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert (done.returncode, done.stderr) == (1, b"execution-state.json not found\n")

    def test_fifo_does_not_hang(self, ws: Path, run_storyd: Run) -> None:
        (ws / STATE).parent.mkdir(parents=True)
        os.mkfifo(ws / STATE)
        done = resume(run_storyd, ws, *ARGS, "--direct", timeout=10)
        assert (done.returncode, done.stderr) == (1, b"execution-state.json not found\n")

    def test_dangling_symlink(self, ws: Path, run_storyd: Run) -> None:
        (ws / STATE).parent.mkdir(parents=True)
        (ws / STATE).symlink_to(ws / "gone.json")
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert (done.returncode, done.stderr) == (1, b"execution-state.json not found\n")


class TestInvalidJson:
    """A state file that is not JSON exits 65 with one line naming the file and position."""

    @pytest.mark.parametrize(
        "text",
        [
            '{\n  "stories": {\n    "story-0049-0013": ,\n  }\n}\n',
            '{\n\n\n   "stories": {"a": tru}}',
            "{'stories': {}}",
            '{"stories": {}',
            '{"stories": {}} {}',
            "{stories: {}}",
            '{"stories": {"x": "a\tb"}}',
            '{"stories": {"x": "\\q"}}',
        ],
    )
    def test_position_matches_json_module(self, text: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, text)
        with pytest.raises(json.JSONDecodeError) as expected:
            json.loads(text)
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        lines = stderr_lines(done)
        assert len(lines) == 1
        assert lines[0].startswith(f"{STATE}: invalid JSON: ")
        err = expected.value
        assert lines[0].endswith(f" at line {err.lineno} column {err.colno}")

    @pytest.mark.parametrize(
        ("data", "where"),
        [
            (b"", "line 1 column 1"),
            (b"\n\n", "line 3 column 1"),
            (b'{"stories":\n {"x": "\xff"}}', "line 2 column 9"),
            (b"[1, NaN]", "line 1 column"),
            (b"\xef\xbb\xbf{\n,}", "line 2 column 1"),
        ],
    )
    def test_other_invalid_bytes(self, data: bytes, where: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, data)
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        lines = stderr_lines(done)
        assert len(lines) == 1
        assert lines[0].startswith(f"{STATE}: invalid JSON: ")
        assert where in lines[0]

    def test_bom_is_accepted(self, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, b'\xef\xbb\xbf{"stories": {"story-0049-0013": {}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert envelope(done)["resumePoint"] == "fresh-start"


class TestWrongShape:
    """Valid JSON of the wrong shape exits 65 with one line naming the node."""

    @pytest.mark.parametrize("top", ["[]", "[1]", '"text"', "5", "1.5", "null", "true"])
    def test_top_level_not_an_object(self, top: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, top)
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        lines = stderr_lines(done)
        assert len(lines) == 1
        assert lines[0].startswith(f"{STATE}: the top level must be a JSON object, not ")

    @pytest.mark.parametrize("top", ["5", "1.5", "null", "true"])
    def test_top_level_kind_named_in_words(self, top: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, top)
        done = resume(run_storyd, ws, *ARGS, "--direct")
        message = done.stderr.decode()
        for python_name in ("NoneType", "int", "float", "bool"):
            assert f"not {python_name}\n" not in message

    @pytest.mark.parametrize(
        ("stories", "kind"),
        [('"x"', "a string"), ("5", "a number"), ("true", "a boolean")],
    )
    def test_stories_not_an_object(
        self, stories: str, kind: str, ws: Path, run_storyd: Run
    ) -> None:
        write_raw(ws, f'{{"stories": {stories}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        assert done.stderr.decode() == f"{STATE}: stories: expected an object, got {kind}\n"

    def test_empty_stories_array_is_a_real_shape(self, ws: Path, run_storyd: Run) -> None:
        # the producer writes `stories` as an array of {id, ...} too: empty means absent
        write_raw(ws, '{"stories": []}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 2
        assert done.stderr.decode() == "Story not in execution-state.json\n"

    @pytest.mark.parametrize(
        ("node", "kind"),
        [('"DONE"', "a string"), ("[]", "an array"), ("7", "a number"), ("true", "a boolean")],
    )
    def test_task_node_not_an_object(self, node: str, kind: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, f'{{"stories": {{"{S}": {{"tasks": {{"T1": {{}}, "T2": {node}}}}}}}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        assert done.stderr.decode() == (
            f"{STATE}: stories.{S}.tasks.T2: expected an object, got {kind}\n"
        )

    def test_null_task_node_not_called_a_number(self, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, f'{{"stories": {{"{S}": {{"tasks": {{"T1": null}}}}}}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        assert "got a number" not in done.stderr.decode()
        assert "null" in done.stderr.decode()

    @pytest.mark.parametrize(("tasks", "kind"), [("[]", "an array"), ('"x"', "a string")])
    def test_tasks_not_an_object(self, tasks: str, kind: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, f'{{"stories": {{"{S}": {{"tasks": {tasks}}}}}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        assert (
            done.stderr.decode() == f"{STATE}: stories.{S}.tasks: expected an object, got {kind}\n"
        )

    def test_story_node_not_an_object(self, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, f'{{"stories": {{"{S}": "x"}}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 65
        assert done.stderr.decode() == f"{STATE}: stories.{S}: expected an object, got a string\n"

    def test_other_story_malformed_is_ignored(self, ws: Path, run_storyd: Run) -> None:
        write_raw(
            ws,
            f'{{"stories": {{"story-0049-0001": {{"tasks": {{"T": "x"}}}}, '
            f'"{S}": {{"tasks": {{"T1": {{"status": "DONE"}}}}}}}}}}',
        )
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert envelope(done)["resumePoint"] == "all-done"


class TestStoryLookup:
    """A story absent from `stories` exits 2; a story without tasks is a fresh start."""

    @pytest.mark.parametrize(
        "text",
        [
            f'{{"stories": {{"{S}": null}}}}',
            f'{{"stories": {{"{S}": false}}}}',
            '{"stories": {"story-0049-0014": {"tasks": {}}}}',
            f'{{"stories": {{"{S.upper()}": {{"tasks": {{}}}}}}}}',
            '{"stories": {}}',
            '{"stories": null}',
            '{"epic": "0049"}',
            "{}",
        ],
    )
    def test_not_in_state(self, text: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, text)
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert (done.returncode, done.stderr) == (2, b"Story not in execution-state.json\n")

    @pytest.mark.parametrize(
        "node",
        ["{}", '{"tasks": null}', '{"tasks": false}', '{"tasks": {}}', '{"other": 1}'],
    )
    def test_no_tasks_is_fresh_start(self, node: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, f'{{"stories": {{"{S}": {node}}}}}')
        touch_story(ws, epoch("2030-01-01T00:00:00Z"))
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.stdout == (
            b'{"resumePoint":"fresh-start","tasksCompleted":[],"tasksPending":[],'
            b'"lastCommitSha":null,"staleWarnings":[]}\n'
        )
        assert done.stderr == b""


DONE_STATUSES = [
    "DONE",
    "done",
    "Done",
    "MERGED",
    "merged",
    "COMPLETE",
    "complete",
    "Concluída",
    "CONCLUÍDA",
    "concluída",
    "Concluida",
    "CONCLUIDA",
]
PENDING_STATUSES = [
    "PENDING",
    "pending",
    "IN_PROGRESS",
    "in_progress",
    "PR_CREATED",
    "PR_APPROVED",
    "PR_MERGED",
    "pr_merged",
    "FAILED",
    "BLOCKED",
    "UNKNOWN",
    "Unknown",
]


class TestClassification:
    """The seed's status table, its warnings, the resume point and lastCommitSha."""

    @pytest.mark.parametrize("status", DONE_STATUSES)
    def test_done_statuses(self, status: str, ws: Path, run_storyd: Run) -> None:
        write_tasks(ws, {"T1": {"status": status, "commitSha": "c1"}, "T2": {"status": "PENDING"}})
        done = resume(run_storyd, ws, *ARGS, "--direct")
        env = envelope(done)
        assert env["tasksCompleted"] == [{"id": "T1", "commitSha": "c1"}]
        assert env["tasksPending"] == ["T2"]
        assert env["resumePoint"] == "phase-2-task-2"
        assert done.stderr == b""

    @pytest.mark.parametrize("status", PENDING_STATUSES)
    def test_pending_statuses_without_warning(self, status: str, ws: Path, run_storyd: Run) -> None:
        write_tasks(
            ws,
            {
                "T1": {"status": "DONE", "commitSha": "c1"},
                "T2": {"status": status, "commitSha": "c2"},
            },
        )
        done = resume(run_storyd, ws, *ARGS, "--direct")
        env = envelope(done)
        assert env["tasksPending"] == ["T2"]
        assert env["lastCommitSha"] == "c1"
        assert done.stderr == b""

    @pytest.mark.parametrize(
        ("node", "shown"),
        [
            ({"status": "WEIRD"}, "WEIRD"),
            ({"status": ""}, ""),
            ({"status": "Concluído"}, "Concluído"),
            ({"status": 3}, "3"),
            ({"status": True}, "true"),
            ({"status": {"a": [1, None]}}, '{"a":[1,null]}'),
            ({"status": ["DONE"]}, '["DONE"]'),
        ],
    )
    def test_unknown_status_warns(
        self, node: dict[str, object], shown: str, ws: Path, run_storyd: Run
    ) -> None:
        write_tasks(ws, {"T1": {"status": "DONE"}, "TASK-X": node, "T3": {"status": "odd"}})
        done = resume(run_storyd, ws, *ARGS, "--direct")
        env = envelope(done)
        assert env["tasksPending"] == ["TASK-X", "T3"]
        assert stderr_lines(done) == [
            f"warn: unknown status '{shown}' for task TASK-X; treated as PENDING",
            "warn: unknown status 'odd' for task T3; treated as PENDING",
        ]

    @pytest.mark.parametrize("raw", ["1.5", "[1, 2.5]", '{"x": 0.1}', "1e3"])
    def test_float_status_warns_like_tojson(self, raw: str, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, f'{{"stories": {{"{S}": {{"tasks": {{"T1": {{"status": {raw}}}}}}}}}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.returncode == 0, done.stderr
        assert envelope(done)["tasksPending"] == ["T1"]
        assert stderr_lines(done)[0].startswith("warn: unknown status '")

    @pytest.mark.parametrize("node", [{}, {"status": None}, {"status": False}])
    def test_missing_status_is_pending(
        self, node: dict[str, object], ws: Path, run_storyd: Run
    ) -> None:
        write_tasks(ws, {"T1": {"status": "DONE"}, "T2": node})
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert envelope(done)["tasksPending"] == ["T2"]
        assert done.stderr == b""

    @pytest.mark.parametrize(
        ("statuses", "point"),
        [
            (["PENDING", "DONE", "PENDING"], "phase-2-task-1"),
            (["DONE", "PENDING", "DONE", "PENDING"], "phase-2-task-2"),
            (["DONE", "DONE", "FAILED", "DONE"], "phase-2-task-3"),
            (["BLOCKED", "DONE"], "phase-2-task-1"),
            (["DONE", "DONE", "DONE"], "all-done"),
            (["DONE"], "all-done"),
            (["PENDING", "IN_PROGRESS"], "fresh-start"),
            (["FAILED"], "fresh-start"),
        ],
    )
    def test_resume_point(self, statuses: list[str], point: str, ws: Path, run_storyd: Run) -> None:
        write_tasks(ws, {f"T{i}": {"status": s} for i, s in enumerate(statuses, 1)})
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["resumePoint"] == point
        assert env["tasksCompleted"] == [
            {"id": f"T{i}", "commitSha": None} for i, s in enumerate(statuses, 1) if s == "DONE"
        ]
        assert env["tasksPending"] == [f"T{i}" for i, s in enumerate(statuses, 1) if s != "DONE"]

    @pytest.mark.parametrize(
        ("last", "expected"),
        [
            ({"status": "DONE"}, None),
            ({"status": "DONE", "commitSha": None}, None),
            ({"status": "DONE", "commitSha": ""}, None),
            ({"status": "DONE", "commitSha": "fff999"}, "fff999"),
        ],
    )
    def test_last_commit_sha_is_the_last_done(
        self, last: dict[str, object], expected: str | None, ws: Path, run_storyd: Run
    ) -> None:
        write_tasks(
            ws,
            {
                "T1": {"status": "DONE", "commitSha": "aaa111"},
                "T2": last,
                "T3": {"status": "PENDING", "commitSha": "zzz"},
            },
        )
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["lastCommitSha"] == expected
        assert env["tasksCompleted"][0] == {"id": "T1", "commitSha": "aaa111"}  # type: ignore[index]
        assert env["tasksCompleted"][1]["commitSha"] == last.get("commitSha")  # type: ignore[index]

    def test_non_string_commit_sha_is_null(self, ws: Path, run_storyd: Run) -> None:
        write_tasks(ws, {"T1": {"status": "DONE", "commitSha": 1234}})
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["tasksCompleted"] == [{"id": "T1", "commitSha": None}]
        assert env["lastCommitSha"] is None

    def test_non_ascii_ids_byte_identical(self, ws: Path, run_storyd: Run) -> None:
        ids = ["TÂSK-ü-001", "任务-002", "😀", 'q"b\\s/', "tab\tnl\n", "del\x7f", "\u2028sep", "é"]
        write_tasks(
            ws,
            {
                ids[0]: {"status": "DONE", "commitSha": "ş1"},
                **{i: {"status": "PENDING"} for i in ids[1:]},
            },
        )
        touch_story(ws, epoch("2020-01-01T00:00:00Z"))
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert done.stdout == (
            '{"resumePoint":"phase-2-task-2","tasksCompleted":[{"id":"TÂSK-ü-001","commitSha":"ş1"}],'
            '"tasksPending":["任务-002","😀","q\\"b\\\\s/","tab\\tnl\\n","del\\u007f","\u2028sep","é"],'
            '"lastCommitSha":"ş1","staleWarnings":[]}\n'
        ).encode("utf-8")

    def test_escaped_ids_in_file_render_raw(self, ws: Path, run_storyd: Run) -> None:
        write_raw(ws, f'{{"stories": {{"{S}": {{"tasks": {{"\\u00e9\\ud83d\\ude00": {{}}}}}}}}}}')
        done = resume(run_storyd, ws, *ARGS, "--direct")
        assert envelope(done)["tasksPending"] == ["é😀"]
        assert "é😀".encode() in done.stdout

    def test_duplicate_task_keeps_first_position_last_value(
        self, ws: Path, run_storyd: Run
    ) -> None:
        write_raw(
            ws,
            f'{{"stories": {{"{S}": {{"tasks": {{"T1": {{"status": "PENDING"}}, '
            '"T2": {"status": "DONE"}, "T1": {"status": "DONE", "commitSha": "x"}}}}}',
        )
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["tasksCompleted"] == [
            {"id": "T1", "commitSha": "x"},
            {"id": "T2", "commitSha": None},
        ]
        assert env["resumePoint"] == "all-done"


BASE = "2024-05-01T10:00:00Z"
SAME_INSTANT = [
    "2024-05-01T10:00:00Z",
    "2024-05-01t10:00:00z",
    "2024-05-01T12:00:00+02:00",
    "2024-05-01T12:00:00+0200",
    "2024-05-01T05:00:00-05",
    "2024-05-01T10:00:00.999Z",
    "2024-05-01T10:00:00,25Z",
    "2024-05-01T15:30:00.123456+05:30",
    "2024-05-01 10:00:00Z",
    "2024-05-01T10:00Z",
]


class TestStaleness:
    """A DONE task completed before the story file's mtime (whole seconds) is stale."""

    @pytest.mark.slow
    @pytest.mark.parametrize(("offset", "stale"), [(1.0, True), (0.0, False), (0.999, False)])
    @pytest.mark.parametrize("stamp", SAME_INSTANT)
    def test_timestamp_forms(
        self, stamp: str, offset: float, stale: bool, ws: Path, run_storyd: Run
    ) -> None:
        write_tasks(ws, {"T1": {"status": "DONE", "completedAt": stamp}})
        touch_story(ws, epoch(BASE) + offset)
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["staleWarnings"] == (["Story file modified after task T1 DONE"] if stale else [])

    @pytest.mark.parametrize("staleness", ["mtime", "git"])
    @pytest.mark.parametrize(("offset", "stale"), [(3600.0, True), (-1.0, False)])
    def test_modes_agree_outside_git(
        self, staleness: str, offset: float, stale: bool, ws: Path, run_storyd: Run
    ) -> None:
        write_tasks(
            ws,
            {
                "T1": {"status": "DONE", "completedAt": BASE},
                "T2": {"status": "DONE", "completedAt": "2024-05-01T11:00:00Z"},
            },
        )
        touch_story(ws, epoch(BASE) + offset)
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct", "--staleness", staleness))
        assert env["staleWarnings"] == (["Story file modified after task T1 DONE"] if stale else [])

    @pytest.mark.parametrize(
        "zone",
        [
            ("UTC", "2024-05-01T10:00:00Z"),
            ("Asia/Kolkata", "2024-05-01T04:30:00Z"),
            ("America/New_York", "2024-05-01T14:00:00Z"),
        ],
        ids=lambda zone: zone[0],
    )
    @pytest.mark.parametrize("case", [(1.0, True), (0.0, False)], ids=["after", "same-second"])
    def test_naive_time_is_local(
        self,
        zone: tuple[str, str],
        case: tuple[float, bool],
        ws: Path,
        run_storyd: Run,
        isolated_env: dict[str, str],
    ) -> None:
        (tz, utc_of_local_ten), (offset, stale) = zone, case
        if not Path("/usr/share/zoneinfo", tz).exists():
            pytest.skip(f"no tzdata for {tz}")
        write_tasks(ws, {"T1": {"status": "DONE", "completedAt": "2024-05-01T10:00:00"}})
        touch_story(ws, epoch(utc_of_local_ten) + offset)
        done = resume(run_storyd, ws, *ARGS, "--direct", env={**isolated_env, "TZ": tz})
        assert envelope(done)["staleWarnings"] == (
            ["Story file modified after task T1 DONE"] if stale else []
        )

    @pytest.mark.parametrize(
        "bad",
        [
            "",
            "yesterday",
            "not-a-date",
            "2024-13-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2024-05-01T25:00:00Z",
            "2024-05-01T10:00:00ZZ",
            "2024-05-01T10:00:00.Z",
            1714557600,
            None,
            ["2024-05-01T10:00:00Z"],
            {"at": "2024-05-01"},
        ],
    )
    def test_malformed_completed_at_skipped(self, bad: object, ws: Path, run_storyd: Run) -> None:
        write_tasks(
            ws,
            {
                "T1": {"status": "DONE", "completedAt": bad},
                "T2": {"status": "DONE", "completedAt": BASE},
                "T3": {"status": "DONE"},
            },
        )
        touch_story(ws, epoch("2030-01-01T00:00:00Z"))
        done = resume(run_storyd, ws, *ARGS, "--direct", "--staleness", "mtime")
        assert envelope(done)["staleWarnings"] == ["Story file modified after task T2 DONE"]
        assert done.stderr == b""

    def test_absent_story_file(self, ws: Path, run_storyd: Run) -> None:
        write_tasks(ws, {"T1": {"status": "DONE", "completedAt": "2000-01-01T00:00:00Z"}})
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["staleWarnings"] == []

    def test_zero_mtime_counts_as_absent(self, ws: Path, run_storyd: Run) -> None:
        write_tasks(ws, {"T1": {"status": "DONE", "completedAt": "1960-01-01T00:00:00Z"}})
        touch_story(ws, 0)
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["staleWarnings"] == []

    def test_only_done_tasks_warn(self, ws: Path, run_storyd: Run) -> None:
        write_tasks(
            ws,
            {
                "T1": {"status": "FAILED", "completedAt": BASE},
                "T2": {"status": "MERGED", "completedAt": BASE},
                "T3": {"status": "IN_PROGRESS", "completedAt": BASE},
                "T4": {"status": "Concluida", "completedAt": "2024-05-01T09:00:00Z"},
            },
        )
        touch_story(ws, epoch(BASE) + 60)
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["staleWarnings"] == [
            "Story file modified after task T2 DONE",
            "Story file modified after task T4 DONE",
        ]

    def test_story_file_is_read_from_the_epic_folder(self, ws: Path, run_storyd: Run) -> None:
        write_tasks(ws, {"T1": {"status": "DONE", "completedAt": BASE}})
        decoy = ws / f"{S}.md"
        decoy.write_text("x", encoding="utf-8")
        os.utime(decoy, (epoch(BASE) + 100, epoch(BASE) + 100))
        env = envelope(resume(run_storyd, ws, *ARGS, "--direct"))
        assert env["staleWarnings"] == []


def _git(repo: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, timeout=30)


@pytest.fixture
def git_env(isolated_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """An environment where git ignores the user's configuration and commits at 09:00Z."""
    return {
        **isolated_env,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "HOME": str(tmp_path),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_AUTHOR_DATE": "2024-05-01T09:00:00Z",
        "GIT_COMMITTER_DATE": "2024-05-01T09:00:00Z",
    }


class TestGitStaleness:
    """Git mode dates a tracked, clean story file from its last commit when that is earlier."""

    @pytest.fixture
    def repo(self, ws: Path, git_env: dict[str, str]) -> Path:
        write_tasks(ws, {"T1": {"status": "DONE", "completedAt": BASE}})
        touch_story(ws, epoch(BASE))
        _git(ws, "init", "-q", env=git_env)
        _git(ws, "add", str(STORY), env=git_env)
        _git(ws, "commit", "-q", "-m", "story", env=git_env)
        touch_story(ws, epoch("2024-06-01T00:00:00Z"))  # a fresh checkout's mtime
        return ws

    def test_clean_checkout_is_not_stale(
        self, repo: Path, run_storyd: Run, git_env: dict[str, str]
    ) -> None:
        done = resume(run_storyd, repo, *ARGS, "--direct", env=git_env)
        assert envelope(done)["staleWarnings"] == []

    def test_mtime_mode_is_the_literal_rule(
        self, repo: Path, run_storyd: Run, git_env: dict[str, str]
    ) -> None:
        done = resume(run_storyd, repo, *ARGS, "--direct", "--staleness", "mtime", env=git_env)
        assert envelope(done)["staleWarnings"] == ["Story file modified after task T1 DONE"]

    def test_modified_story_is_stale(
        self, repo: Path, run_storyd: Run, git_env: dict[str, str]
    ) -> None:
        (repo / STORY).write_text("# story, edited\n", encoding="utf-8")
        os.utime(repo / STORY, (epoch("2024-06-01T00:00:00Z"),) * 2)
        done = resume(run_storyd, repo, *ARGS, "--direct", env=git_env)
        assert envelope(done)["staleWarnings"] == ["Story file modified after task T1 DONE"]

    def test_commit_after_completion_is_stale(
        self, repo: Path, run_storyd: Run, git_env: dict[str, str]
    ) -> None:
        later = {**git_env, "GIT_COMMITTER_DATE": "2024-05-01T11:00:00Z"}
        (repo / STORY).write_text("# story v2\n", encoding="utf-8")
        _git(repo, "commit", "-q", "-am", "edit", env=later)
        os.utime(repo / STORY, (epoch("2024-06-01T00:00:00Z"),) * 2)
        done = resume(run_storyd, repo, *ARGS, "--direct", env=git_env)
        assert envelope(done)["staleWarnings"] == ["Story file modified after task T1 DONE"]

    def test_untracked_story_is_stale(
        self, ws: Path, run_storyd: Run, git_env: dict[str, str]
    ) -> None:
        write_tasks(ws, {"T1": {"status": "DONE", "completedAt": BASE}})
        _git(ws, "init", "-q", env=git_env)
        touch_story(ws, epoch(BASE) + 10)
        done = resume(run_storyd, ws, *ARGS, "--direct", env=git_env)
        assert envelope(done)["staleWarnings"] == ["Story file modified after task T1 DONE"]


class TestDetail:
    """`--detail` wraps the envelope with its findings and the path that answered."""

    @pytest.mark.parametrize("direct", [True, False])
    def test_shape(self, direct: bool, ws: Path, run_storyd: Run) -> None:
        write_tasks(ws, {"T1": {"status": "DONE", "commitSha": 7}, "T2": {"status": "HUH"}})
        plain = resume(run_storyd, ws, *ARGS, "--direct")
        done = resume(run_storyd, ws, *ARGS, "--detail", *(["--direct"] if direct else []))
        assert done.returncode == 0
        body = json.loads(done.stdout, object_pairs_hook=list)
        assert [k for k, _ in body] == ["envelope", "findings", "next", "source"]
        detail = json.loads(done.stdout)
        assert detail["source"] == "direct"
        assert detail["next"] == {  # the seed's resume point, phase-2-task-2, names it
            "task": "T2", "why": "the first task not DONE (the seed's resume rule)",
            "status": "HUH"}
        assert json.dumps(detail["envelope"]) == json.dumps(json.loads(plain.stdout))
        assert [(f["code"], f["task"]) for f in detail["findings"]] == [
            ("invalid-commit-sha", "T1"),
            ("unknown-status", "T2"),
        ]
        for finding in detail["findings"]:
            assert list(finding) == ["detector", "code", "severity", "task", "message"]
            assert finding["severity"] == "warning"
        assert (
            done.stderr
            == plain.stderr
            == (b"warn: unknown status 'HUH' for task T2; treated as PENDING\n")
        )

    def test_detail_on_failure_prints_nothing(self, ws: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, ws, *ARGS, "--detail", "--direct")
        assert done.returncode == 1


class TestStateFileFlag:
    """`--state-file` names a state file inside the workspace, never outside it."""

    def test_same_answer_as_ids(self, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, "--state-file", str(STATE), "--unit", S, "--direct")
        assert done.stdout == SIMPLE_OUT

    def test_single_unit_needs_no_unit_flag(self, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, f"--state-file={STATE}", "--direct")
        assert done.stdout == SIMPLE_OUT

    def test_several_units_need_one_named(self, ws: Path, run_storyd: Run) -> None:
        write_epic(ws, "0049", tasks={S: {}, "story-0049-0014": {}})
        done = resume(run_storyd, ws, "--state-file", str(STATE), "--direct")
        assert done.returncode == 64
        assert "name one with --unit" in done.stderr.decode()

    def test_unknown_unit(self, simple: Path, run_storyd: Run) -> None:
        done = resume(run_storyd, simple, "--state-file", str(STATE), "--unit", "nope", "--direct")
        assert done.returncode == 2

    @pytest.mark.parametrize(
        "path",
        [
            "../outside/plans/epic-0049/execution-state.json",
            "plans/../../outside/plans/epic-0049/execution-state.json",
            "plans/epic-0049/../../../outside/plans/epic-0049/execution-state.json",
            "{outside}/plans/epic-0049/execution-state.json",
            "link/plans/epic-0049/execution-state.json",
        ],
    )
    def test_traversal_refused(self, path: str, tmp_path: Path, run_storyd: Run) -> None:
        outside = tmp_path / "outside"
        write_tasks(outside, {"T1": {"status": "DONE"}})
        ws = tmp_path / "ws"
        ws.mkdir()
        (ws / "link").symlink_to(outside)
        done = resume(run_storyd, ws, "--state-file", path.format(outside=outside), "--direct")
        assert done.returncode == 64
        assert "outside the workspace" in done.stderr.decode()

    def test_not_a_state_file(self, simple: Path, run_storyd: Run) -> None:
        (simple / "notes.json").write_text("{}", encoding="utf-8")
        done = resume(run_storyd, simple, "--state-file", "notes.json", "--direct")
        assert done.returncode == 64
        assert "not a state file of any supported convention" in done.stderr.decode()
