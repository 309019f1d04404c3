"""The seed's six acceptance scenarios, byte for byte, through `storyd resume` and the reference."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
REFERENCE = Path(__file__).resolve().parent.parent / "bench" / "reference" / "story-resume.sh"
SCENARIOS = (
    "fresh-start",
    "resume-phase-2-task-4",
    "stale-warning",
    "state-file-missing",
    "all-done",
    "story-not-in-state",
)
# How `storyd resume` is asked: no daemon runs in these tests, so every variant reads the
# files directly; the default (git) staleness mode equals mtime mode outside a repository.
MODES = {
    "direct": ["--direct"],
    "fallback": [],
    "direct-mtime": ["--direct", "--staleness", "mtime"],
    "fallback-git": ["--staleness=git"],
}

Run = Callable[..., subprocess.CompletedProcess[bytes]]


@dataclass(frozen=True)
class Golden:
    """One scenario folder: its inputs and the exact output expected."""

    name: str
    argv: list[str]
    state: bytes | None
    setup: dict[str, object]
    stdout: bytes
    stderr: bytes
    exit: int

    @classmethod
    def load(cls, name: str) -> Golden:
        folder = GOLDEN / name
        state = folder / "execution-state.json"
        return cls(
            name=name,
            argv=(folder / "argv").read_text(encoding="utf-8").splitlines(),
            state=state.read_bytes() if state.exists() else None,
            setup=json.loads((folder / "setup.json").read_text(encoding="utf-8")),
            stdout=(folder / "expected.stdout").read_bytes(),
            stderr=(folder / "expected.stderr").read_bytes(),
            exit=int((folder / "expected.exit").read_text(encoding="utf-8")),
        )

    def story_mtime(self) -> float | None:
        """The story file's mtime as the scenario arranges it (None: no story file)."""
        story = self.setup["storyFile"]
        if story is None:
            return None
        rule = story["mtime"]  # type: ignore[index]
        if "task" in rule:
            assert self.state is not None, f"{self.name}: a task-relative mtime needs a state file"
            stories = json.loads(self.state)["stories"]
            stamps = [
                s["tasks"][rule["task"]]["completedAt"]
                for s in stories.values()
                if rule["task"] in s.get("tasks", {})
            ]
            assert len(stamps) == 1, f"{self.name}: task {rule['task']} must appear once"
            base = datetime.fromisoformat(stamps[0]).timestamp()
        else:
            base = datetime.fromisoformat(rule["at"]).timestamp()
        return base + float(rule["offsetSeconds"])

    def build(self, workspace: Path) -> Path:
        """Lay the scenario out under `workspace` and return it."""
        workspace.mkdir(parents=True, exist_ok=True)
        state_path = workspace / str(self.setup["stateFile"])
        state_path.parent.mkdir(parents=True, exist_ok=True)
        if self.state is not None:
            state_path.write_bytes(self.state)
        story = self.setup["storyFile"]
        if story is not None:
            path = workspace / story["path"]  # type: ignore[index]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("# story\n", encoding="utf-8")
            mtime = self.story_mtime()
            os.utime(path, (mtime, mtime))  # type: ignore[arg-type]
        return workspace


def _reference_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "LC_ALL": "C.UTF-8", "TZ": "UTC"}


def _has_reference_tools() -> str | None:
    missing = [
        tool for tool in ("jq", "flock", "bash", "date", "stat") if shutil.which(tool) is None
    ]
    return f"the reference needs {', '.join(missing)} on PATH" if missing else None


class TestGoldenFolders:
    """Each golden folder is complete and arranges the staleness its scenario names."""

    @pytest.mark.parametrize("name", SCENARIOS)
    def test_folder_has_every_file(self, name: str) -> None:
        folder = GOLDEN / name
        for leaf in ("argv", "setup.json", "expected.stdout", "expected.stderr", "expected.exit"):
            assert (folder / leaf).is_file(), f"{name}/{leaf} is missing"

    def test_no_unlisted_scenarios(self) -> None:
        on_disk = {p.name for p in GOLDEN.iterdir() if p.is_dir()}
        assert on_disk == set(SCENARIOS)

    @pytest.mark.parametrize("name", SCENARIOS)
    def test_nonzero_exit_has_empty_stdout(self, name: str) -> None:
        golden = Golden.load(name)
        assert (golden.exit == 0) == (golden.stdout != b"")
        if golden.exit == 0:
            assert golden.stdout.endswith(b"\n") and golden.stdout.count(b"\n") == 1

    def test_stale_scenario_story_is_between_completions(self) -> None:
        golden = Golden.load("stale-warning")
        tasks = json.loads(golden.state or b"{}")["stories"]["story-0049-0013"]["tasks"]
        done = [
            datetime.fromisoformat(t["completedAt"]).timestamp()
            for t in tasks.values()
            if t["status"] == "DONE"
        ]
        mtime = golden.story_mtime()
        assert mtime is not None
        assert done[0] < mtime < done[1]

    def test_resume_scenario_story_is_older_than_every_completion(self) -> None:
        golden = Golden.load("resume-phase-2-task-4")
        tasks = json.loads(golden.state or b"{}")["stories"]["story-0049-0013"]["tasks"]
        mtime = golden.story_mtime()
        assert mtime is not None
        stamps = [
            datetime.fromisoformat(t["completedAt"]).timestamp()
            for t in tasks.values()
            if "completedAt" in t
        ]
        assert stamps and all(mtime < s for s in stamps)


class TestStorydMatchesGoldens:
    """`storyd resume` prints exactly the golden stdout, stderr and exit code."""

    @pytest.mark.slow
    @pytest.mark.parametrize("mode", list(MODES))
    @pytest.mark.parametrize("name", SCENARIOS)
    def test_byte_identical(self, name: str, mode: str, tmp_path: Path, run_storyd: Run) -> None:
        golden = Golden.load(name)
        workspace = golden.build(tmp_path / "ws")
        done = run_storyd("resume", *golden.argv, *MODES[mode], cwd=workspace)
        assert done.stdout == golden.stdout
        assert done.stderr == golden.stderr
        assert done.returncode == golden.exit

    @pytest.mark.parametrize("name", SCENARIOS)
    def test_workspace_flag_from_elsewhere(
        self, name: str, tmp_path: Path, run_storyd: Run
    ) -> None:
        golden = Golden.load(name)
        workspace = golden.build(tmp_path / "ws")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        done = run_storyd(
            "resume", *golden.argv, "--direct", f"--workspace={workspace}", cwd=elsewhere
        )
        assert (done.returncode, done.stdout, done.stderr) == (
            golden.exit,
            golden.stdout,
            golden.stderr,
        )

    @pytest.mark.parametrize("name", SCENARIOS)
    def test_read_only(self, name: str, tmp_path: Path, run_storyd: Run) -> None:
        golden = Golden.load(name)
        workspace = golden.build(tmp_path / "ws")
        before = {
            p: (p.read_bytes(), p.stat().st_mtime_ns) for p in workspace.rglob("*") if p.is_file()
        }
        run_storyd("resume", *golden.argv, "--direct", cwd=workspace)
        after = {
            p: (p.read_bytes(), p.stat().st_mtime_ns) for p in workspace.rglob("*") if p.is_file()
        }
        assert after == before


class TestReferenceMatchesGoldens:
    """The bash + jq reference prints the same bytes, so the goldens are the seed's."""

    @pytest.mark.parametrize("name", SCENARIOS)
    def test_byte_identical(self, name: str, tmp_path: Path, isolated_env: dict[str, str]) -> None:
        reason = _has_reference_tools()
        if reason:
            pytest.skip(reason)
        golden = Golden.load(name)
        workspace = golden.build(tmp_path / "ws")
        done = subprocess.run(
            ["bash", str(REFERENCE), *golden.argv],
            cwd=workspace,
            capture_output=True,
            env=_reference_env(isolated_env),
            timeout=30,
            check=False,
        )
        assert done.stdout == golden.stdout
        assert done.stderr == golden.stderr
        assert done.returncode == golden.exit
