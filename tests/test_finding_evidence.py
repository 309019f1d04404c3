"""Findings' structured evidence: the model, the wire, and reconcile reading it (never the
message), on real git repositories."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson
import pytest
from cli_harness import run_storyd_cli
from daemon_harness import daemon_env
from epic_state_harness import EPIC, STATE, STORY, task_id
from git_harness import GitWorkspace

from storyd.api.reconcile import make_plan
from storyd.api.reconcile.gather import Selection
from storyd.config import Config
from storyd.core.model import Finding, Unit, Wording
from storyd.detectors import Context
from storyd.detectors.history import HistoryDetector
from storyd.detectors.unrecorded import UnrecordedDetector

T1, T2, T3 = (task_id(STORY, n) for n in (1, 2, 3))
REWORDED = "reworded by a later release of the detector: no sha in here"


class TestModel:
    def test_evidence_defaults_to_empty_and_the_wire_form_is_unchanged(self) -> None:
        plain = Finding("d", "c", "info", "m", "t")
        assert dict(plain.evidence) == {}
        assert plain.as_dict() == {
            "detector": "d", "code": "c", "severity": "info", "task": "t", "message": "m"
        }
        assert orjson.dumps(plain.as_dict()) == (
            b'{"detector":"d","code":"c","severity":"info","task":"t","message":"m"}'
        )

    def test_evidence_is_on_the_wire_and_in_equality(self) -> None:
        a = Finding("d", "c", "info", "m", "t", {"b": "2", "a": "1"})
        b = Finding("d", "c", "info", "m", "t", {"a": "1", "b": "2"})
        assert a == b and hash(a) == hash(b)
        assert a != Finding("d", "c", "info", "m", "t") != Finding("d", "c", "info", "m", "t",
                                                                    {"a": "1"})
        assert len({a, b, Finding("d", "c", "info", "m", "t")}) == 2
        assert a.as_dict()["evidence"] == {"a": "1", "b": "2"}

    def test_evidence_is_immutable_and_string_only(self) -> None:
        source = {"commit": "abc"}
        finding = Finding("d", "c", "info", "m", None, source)
        source["commit"] = "changed"
        assert finding.evidence["commit"] == "abc"
        with pytest.raises(TypeError):
            finding.evidence["commit"] = "x"  # type: ignore[index]
        with pytest.raises(AttributeError):
            finding.evidence = MappingProxyType({})
        with pytest.raises(TypeError, match="strings to strings"):
            Finding("d", "c", "info", "m", None, {"n": 1})  # type: ignore[dict-item]

    def test_a_wording_is_filled_in_from_task_and_evidence(self) -> None:
        words = Wording("commit {commit} of {task} does not exist")
        shared = Finding("d", "c", "error", words, "T1", {"commit": "abc1234"})
        spelled = Finding("d", "c", "error", "commit abc1234 of T1 does not exist", "T1",
                          {"commit": "abc1234"})
        assert shared.message == "commit abc1234 of T1 does not exist"
        assert shared == spelled and hash(shared) == hash(spelled)
        assert shared.as_dict() == spelled.as_dict()
        assert "abc1234 of T1" in repr(shared)
        other = Finding("d", "c", "error", words, "T2", {"commit": "abc1234"})
        assert other != shared and other.message.endswith("of T2 does not exist")

    def test_a_wording_that_does_not_fit_is_refused_when_the_finding_is_made(self) -> None:
        with pytest.raises(ValueError, match=r"does not fit the finding.*'sha'"):
            Finding("d", "c", "error", Wording("commit {sha} is gone"), "T1", {"commit": "a"})
        with pytest.raises(ValueError, match="does not fit"):
            Finding("d", "c", "error", Wording("odd {0} brace"), "T1")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A private config, runtime and state home, with no daemon answering."""
    environ = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    environ["XDG_STATE_HOME"] = str(tmp_path / "state")
    for key in ("XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "STORYD_SOCKET", "XDG_STATE_HOME"):
        monkeypatch.setenv(key, environ[key])
    return environ


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> GitWorkspace:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    return repo


def write_epic(repo: GitWorkspace, tasks: dict[str, dict[str, object]],
               story_status: str | None = None) -> None:
    story: dict[str, object] = {"tasks": tasks}
    if story_status:
        story = {"status": story_status, **story}
    path = repo.path / STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"epic": EPIC, "title": "t", "stories": {STORY: story}}, indent=2)
    path.write_text(text + "\n", encoding="utf-8")


def reword(
    monkeypatch: pytest.MonkeyPatch, detector: type[HistoryDetector | UnrecordedDetector]
) -> list[Finding]:
    """Make `detector` say everything in other words, keeping its evidence; returns what
    it said."""
    said: list[Finding] = []
    original: Callable[..., list[Finding]] = detector.check

    def check(self: object, story: Unit, context: Context) -> list[Finding]:
        found = [
            Finding(f.detector, f.code, f.severity, REWORDED, f.task, dict(f.evidence))
            for f in original(self, story, context)
        ]
        said.extend(found)
        return found

    monkeypatch.setattr(detector, "check", check)
    return said


def plan_repairs(repo: GitWorkspace) -> list[dict[str, object]]:
    plan = make_plan(str(repo.path), Selection(), Config(), None, 5.0).as_dict()
    return [r for f in plan["files"] for r in f["repairs"]]  # type: ignore[attr-defined]


class TestRewordedMessages:
    """A detector that rewords its messages does not break the repairs."""

    def test_unrecorded_commit(self, repo: GitWorkspace, monkeypatch: pytest.MonkeyPatch) -> None:
        t1, t2 = repo.tasks_commits(STORY, 2)
        write_epic(repo, {T1: {"status": "DONE", "commitSha": t1}, T2: {"status": "PENDING"}})
        said = reword(monkeypatch, UnrecordedDetector)
        [repair] = plan_repairs(repo)
        assert [(f.code, dict(f.evidence)) for f in said] == [
            ("unrecorded", {"commit": t2, "tip": "main"})
        ]
        assert repair["finding"]["message"] == REWORDED  # type: ignore[index]
        changes = {c["field"]: c["new"] for c in repair["changes"]}  # type: ignore[attr-defined]
        assert changes["status"] == "DONE" and changes["commitSha"] == t2

    def test_rewritten_commit(self, repo: GitWorkspace, monkeypatch: pytest.MonkeyPatch) -> None:
        t1, t2 = repo.tasks_commits(STORY, 2)
        write_epic(repo, {T1: {"status": "DONE", "commitSha": t1},
                          T2: {"status": "DONE", "commitSha": t2}})
        repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, amended")
        new = repo.head()
        said = reword(monkeypatch, HistoryDetector)
        [repair] = plan_repairs(repo)
        assert [dict(f.evidence) for f in said] == [
            {"commit": t2, "replacement": new, "tip": "main"}
        ]
        assert repair["finding"]["message"] == REWORDED  # type: ignore[index]
        assert [(c["old"], c["new"]) for c in repair["changes"]] == [(t2, new)]  # type: ignore[attr-defined]

    def test_squash_landed(self, repo: GitWorkspace, monkeypatch: pytest.MonkeyPatch) -> None:
        repo.git("checkout", "-q", "-b", "topic")
        t1, t2 = repo.tasks_commits(STORY, 2)
        repo.git("checkout", "-q", "main")
        repo.commit("unrelated upstream work", {"u": "u\n"})
        write_epic(repo, {T1: {"status": "DONE", "commitSha": t1},
                          T2: {"status": "DONE", "commitSha": t2},
                          T3: {"status": "PR_CREATED"}}, story_status="PR_CREATED")
        repo.git("merge", "-q", "--squash", "topic")
        landed = repo.commit(f"feat({STORY}): the whole story")
        said = reword(monkeypatch, HistoryDetector)
        repairs = plan_repairs(repo)
        assert {(f.code, f.evidence["landed"], f.evidence["why"]) for f in said} == {
            ("squash-merged", landed, "subject-names-story")
        }
        first = repairs[0]
        assert first["code"] == "squash-merged"
        assert first["evidence"][0]["commit"] == landed  # type: ignore[index]
        assert first["evidence"][0]["why"] == "subject-names-story"  # type: ignore[index]
        changes = [(c["field"], c["new"]) for c in first["changes"]]  # type: ignore[attr-defined]
        assert ("story status", "SUCCESS") in changes and ("status", "DONE") in changes

    def test_a_finding_without_evidence_is_left_alone(
        self, repo: GitWorkspace, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The message alone is never enough: it is not parsed."""
        t1, t2 = repo.tasks_commits(STORY, 2)
        write_epic(repo, {T1: {"status": "DONE", "commitSha": t1}, T2: {"status": "PENDING"}})
        original = UnrecordedDetector.check

        def bare(self: UnrecordedDetector, story: Unit, context: Context) -> list[Finding]:
            return [Finding(f.detector, f.code, f.severity, f.message, f.task)
                    for f in original(self, story, context)]

        monkeypatch.setattr(UnrecordedDetector, "check", bare)
        plan = make_plan(str(repo.path), Selection(), Config(), None, 5.0).as_dict()
        assert plan["files"] == []
        left: list[dict[str, Any]] = plan["leftAlone"]  # type: ignore[assignment]
        assert [x["reason"] for x in left] == ["the finding names no commit"]
        assert t2[:12] in left[0]["finding"]["message"]


@pytest.mark.slow
def test_resume_detail_shows_the_evidence_of_a_rewritten_commit(
    env: dict[str, str], repo: GitWorkspace
) -> None:
    t1, t2 = repo.tasks_commits(STORY, 2)
    write_epic(repo, {T1: {"status": "DONE", "commitSha": t1},
                      T2: {"status": "DONE", "commitSha": t2}})
    repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, amended")
    new = repo.head()
    done = run_storyd_cli("resume", "--direct", "--detail", "--epic-id", EPIC,
                          "--story-id", STORY, env=env, cwd=repo.path)
    assert done.returncode == 0, done.stderr
    [finding] = [f for f in orjson.loads(done.stdout)["findings"] if f["code"] == "unreachable"]
    assert finding["task"] == T2
    assert finding["evidence"] == {"commit": t2, "replacement": new, "tip": "main"}
