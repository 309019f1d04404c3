"""The epic producer's newer files (epics 0059 onwards) and its older location.

Fixtures: tests/fixtures/epic-real/newer/ (SOURCES.json names each file's repository,
path and commit). Sequential epics run one story at a time in `executionOrder` (else
x-internal-epic-build-plan's Kahn order); `blocks` and `externalDependencies` gate
stories as `blockedBy` does; the producer's Portuguese statuses are mapped, and a story
status outside its vocabulary is a finding; docs/stories/epic-XXXX/ is read too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, wait_for
from epic_corpus import ENVELOPE_KEYS

Run = Callable[..., subprocess.CompletedProcess[bytes]]
Spawn = Callable[..., DaemonProcess]
NEWER = Path(__file__).resolve().parent / "fixtures" / "epic-real" / "newer"
SOURCES = {e["file"]: e for e in json.loads((NEWER / "SOURCES.json").read_text("utf-8"))}


def lay(name: str, ws: Path, root: str = "plans", epic: str | None = None) -> Path:
    """Copy a fixture to <root>/epic-<id>/execution-state.json; the file's path."""
    epic = epic or SOURCES[name]["path"].split("epic-")[1][:4]
    target = ws / root / f"epic-{epic}" / "execution-state.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(NEWER / name, target)
    return target


def epic_json(run: Run, ws: Path, epic: str) -> dict[str, object]:
    done = run("epic", "--epic-id", epic, "--json", "--direct", cwd=ws)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def edit(path: Path, story: str, **fields: object) -> None:
    data = json.loads(path.read_text("utf-8"))
    data["storyStatuses"][story].update(fields)
    path.write_text(json.dumps(data), "utf-8")


# -- 1. sequential epics ----------------------------------------------------------------


def test_sequential_epic_offers_one_story(tmp_path: Path, run_storyd: Run) -> None:
    """epic 0059: "mode": "sequential" and 12 PENDING stories. The producer runs one."""
    lay("epic-0059-sequential.json", tmp_path)
    view = epic_json(run_storyd, tmp_path, "59")
    assert view["mode"] == "sequential"
    assert view["executable"] == ["story-0059-0001"]
    queued = view["queued"]
    assert [q["id"] for q in queued] == [f"story-0059-{i:04d}" for i in range(2, 13)]  # type: ignore[index,union-attr]
    assert queued[0]["reason"] == "sequential: runs after story-0059-0001"  # type: ignore[index]
    text = run_storyd("epic", "--epic-id", "59", "--direct", cwd=tmp_path).stdout.decode()
    assert "executable next: story-0059-0001  (sequential: one story at a time)" in text
    assert "queued: story-0059-0012: sequential: runs after story-0059-0001" in text


def test_execution_order_is_the_recorded_one(tmp_path: Path, run_storyd: Run) -> None:
    """epic 0062 (flowVersion 4): executionOrder puts 0003 before 0002."""
    state = lay("epic-0062-v4-execution-order.json", tmp_path)
    view = epic_json(run_storyd, tmp_path, "62")
    assert view["order"][:3] == ["story-0062-0001", "story-0062-0003", "story-0062-0002"]  # type: ignore[index]
    assert view["executable"] == ["story-0062-0001"]
    edit(state, "story-0062-0001", status="SUCCESS")  # no PR recorded: on the branch
    view = epic_json(run_storyd, tmp_path, "62")
    assert view["executable"] == ["story-0062-0003"]
    assert view["finished"] == ["story-0062-0001"]


def test_sequential_order_follows_the_dependencies(tmp_path: Path, run_storyd: Run) -> None:
    """epic 0063 (flowVersion 4, layout v4, per-story title): no executionOrder, so the
    producer's Kahn phases, each by id; the first ready story runs."""
    lay("epic-0063-v4-layout.json", tmp_path)
    view = epic_json(run_storyd, tmp_path, "63")
    assert view["order"][:6] == [  # type: ignore[index]
        "story-0063-0002", "story-0063-0003", "story-0063-0007",
        "story-0063-0008", "story-0063-0009", "story-0063-0010",
    ]
    assert view["executable"] == ["story-0063-0002"]
    blocked = {b["id"]: b["reason"] for b in view["blocked"]}  # type: ignore[attr-defined]
    assert blocked["story-0063-0004"] == "waiting for story-0063-0001 (PENDING)"
    assert len(view["queued"]) == 5  # type: ignore[arg-type]
    assert {r["title"] for r in view["stories"]} == {"short note"}  # type: ignore[attr-defined]


# -- 2. blocks and externalDependencies ---------------------------------------------------


def _finished_epic(ws: Path, epic: str) -> None:
    folder = ws / "plans" / f"epic-{epic}"
    folder.mkdir(parents=True)
    stories = {f"story-{epic}-0001": {"status": "SUCCESS"}}
    (folder / "execution-state.json").write_text(json.dumps({"storyStatuses": stories}), "utf-8")


@pytest.mark.slow
def test_external_dependencies_gate_and_are_named(tmp_path: Path, run_storyd: Run) -> None:
    """epic 0066 (schemaVersion 2.0.0): three blocking external epics, none here yet."""
    lay("epic-0066-schema-2-pendente.json", tmp_path)
    view = epic_json(run_storyd, tmp_path, "66")
    assert view["executable"] == []
    blocked = {b["id"]: b["reason"] for b in view["blocked"]}  # type: ignore[attr-defined]
    assert blocked["story-0066-0001"] == (
        "waiting for external EPIC-0063 (no state file of it in this workspace), "
        "external EPIC-0065 (no state file of it in this workspace), "
        "external EPIC-0067 (no state file of it in this workspace)"
    )
    for epic in ("0063", "0065"):
        _finished_epic(tmp_path, epic)
    partial = tmp_path / "plans" / "epic-0067"
    partial.mkdir(parents=True)
    stories = {"story-0067-0001": {"status": "SUCCESS"}, "story-0067-0002": {"status": "Pendente"}}
    (partial / "execution-state.json").write_text(json.dumps({"storyStatuses": stories}), "utf-8")
    view = epic_json(run_storyd, tmp_path, "66")
    blocked = {b["id"]: b["reason"] for b in view["blocked"]}  # type: ignore[attr-defined]
    assert blocked["story-0066-0001"] == (
        "waiting for external EPIC-0067 "
        "(1 of 2 stories finished in plans/epic-0067/execution-state.json)"
    )
    _finished_epic(tmp_path / "again", "0067")
    shutil.copyfile(tmp_path / "again/plans/epic-0067/execution-state.json",
                    partial / "execution-state.json")
    view = epic_json(run_storyd, tmp_path, "66")
    assert view["executable"] == ["story-0066-0001", "story-0066-0002", "story-0066-0009"]
    assert all(e["met"] for e in view["externalDependencies"])  # type: ignore[attr-defined]


def test_blocks_gate_like_blocked_by(tmp_path: Path, run_storyd: Run) -> None:
    """`blocks` is the inverse of `blockedBy`: 0004 records only 0003, but 0001 blocks it."""
    state = lay("epic-0066-schema-2-pendente.json", tmp_path)
    data = json.loads(state.read_text("utf-8"))
    del data["externalDependencies"]
    data["storyStatuses"]["story-0066-0004"]["blockedBy"] = []
    data["storyStatuses"]["story-0066-0003"]["status"] = "Concluída"
    state.write_text(json.dumps(data), "utf-8")
    view = epic_json(run_storyd, tmp_path, "66")
    blocked = {b["id"]: b["reason"] for b in view["blocked"]}  # type: ignore[attr-defined]
    assert blocked["story-0066-0004"] == "waiting for story-0066-0001 (PENDING)"
    assert "story-0066-0004" not in view["executable"]  # type: ignore[operator]


# -- 3. the producer's own words ----------------------------------------------------------


@pytest.mark.slow
def test_portuguese_statuses_are_the_producers_words(tmp_path: Path, run_storyd: Run) -> None:
    """epic 0066 mid-run: COMPLETE and Pendente side by side; epic 0071: `refinada`."""
    lay("epic-0066-schema-2-mixed.json", tmp_path)
    view = epic_json(run_storyd, tmp_path, "66")
    rows = {r["id"]: r for r in view["stories"]}  # type: ignore[attr-defined]
    assert rows["story-0066-0003"]["recorded"] == "Pendente"
    assert (rows["story-0066-0003"]["status"], rows["story-0066-0003"]["reason"]) == (
        "PENDING", "not started")
    blocked = {b["id"]: b["reason"] for b in view["blocked"]}  # type: ignore[attr-defined]
    assert blocked["story-0066-0003"].startswith(  # their PRs #850/#851: no merge on this base
        "waiting for story-0066-0001 (SUCCESS, not merged), story-0066-0002 (SUCCESS, not merged)")
    assert view["finished"] == ["story-0066-0001", "story-0066-0002", "story-0066-0009"]
    detail = run_storyd("resume", "--epic-id", "66", "--story-id", "story-0066-0003",
                        "--detail", "--direct", cwd=tmp_path)
    assert detail.returncode == 0 and detail.stderr == b""
    assert json.loads(detail.stdout)["findings"] == []
    lay("epic-0071-refinada.json", tmp_path)
    view = epic_json(run_storyd, tmp_path, "71")
    assert len(view["executable"]) == 8  # type: ignore[arg-type]


def _unknown_status_workspace(ws: Path) -> Path:
    state = lay("epic-0066-schema-2-pendente.json", ws)
    edit(state, "story-0066-0002", status="Em Revisão")
    return state


@pytest.mark.slow
def test_unknown_story_status_is_a_finding_everywhere(tmp_path: Path, run_storyd: Run) -> None:
    ws = tmp_path / "ws"
    _unknown_status_workspace(ws)
    plain = run_storyd("resume", "--epic-id", "66", "--story-id", "story-0066-0002",
                       "--direct", cwd=ws)
    assert plain.returncode == 0
    assert list(json.loads(plain.stdout)) == ENVELOPE_KEYS
    detail = json.loads(run_storyd("resume", "--epic-id", "66", "--story-id",
                                   "story-0066-0002", "--detail", "--direct", cwd=ws).stdout)
    [found] = detail["findings"]
    assert (found["code"], found["severity"]) == ("unknown-story-status", "warning")
    assert "'Em Revisão'" in found["message"] and "Pendente" in found["message"]
    status = run_storyd("status", "--workspace", str(ws), "--direct")
    assert status.returncode == 0 and b"format/unknown-story-status" in status.stdout
    check = run_storyd("check", "--workspace", str(ws), "--direct")
    assert check.returncode == 1, check.stdout  # a warning: a human must say what it means
    assert check.stdout.count(b"unknown-story-status") == 1
    view = epic_json(run_storyd, ws, "66")
    blocked = {b["id"]: b["reason"] for b in view["blocked"]}  # type: ignore[attr-defined]
    assert blocked["story-0066-0002"] == "EM REVISÃO: unknown status 'Em Revisão'; left as recorded"


@pytest.mark.slow
def test_unknown_story_status_via_the_daemon(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    state = lay("epic-0066-schema-2-pendente.json", ws)
    proc = spawn_daemon([ws])
    edit(state, "story-0066-0002", status="Em Revisão")
    argv = ("resume", "--epic-id", "66", "--story-id", "story-0066-0002", "--detail",
            "--timeout", "5000")

    def codes() -> set[str]:
        answer = run_storyd_cli(*argv, env=proc.env, cwd=ws)
        return {f["code"] for f in json.loads(answer.stdout)["findings"]}

    wait_for(lambda: "unknown-story-status" in codes(), timeout=10, message="the finding")
    check = run_storyd_cli("check", "--workspace", str(ws), env=proc.env)
    assert check.returncode == 1 and b"unknown-story-status" in check.stdout


# -- 4. docs/stories/ ---------------------------------------------------------------------


@pytest.mark.slow
def test_older_location_is_read(tmp_path: Path, run_storyd: Run) -> None:
    """docs/stories/epic-0013/ (before the producer's move to plans/, 2026-04-04)."""
    lay("docs-stories-epic-0013.json", tmp_path, root="docs/stories")
    by_id = run_storyd("resume", "--epic-id", "13", "--story-id", "story-0013-0002", "--direct",
                       cwd=tmp_path)
    assert by_id.returncode == 0, by_id.stderr
    by_file = run_storyd("resume", "--state-file", "docs/stories/epic-0013/execution-state.json",
                         "--unit", "story-0013-0002", "--direct", cwd=tmp_path)
    assert by_file.returncode == 0 and by_file.stdout == by_id.stdout
    status = run_storyd("status", "--workspace", str(tmp_path), "--direct", "--json")
    assert status.returncode == 0, status.stderr
    assert status.stdout.count(b"docs/stories/epic-0013/execution-state.json") >= 26
    view = epic_json(run_storyd, tmp_path, "13")
    assert view["stateFile"] == "docs/stories/epic-0013/execution-state.json"
    assert view["olderCopy"] is None


@pytest.mark.slow
def test_plans_wins_over_the_older_copy_and_says_so(tmp_path: Path, run_storyd: Run) -> None:
    lay("docs-stories-epic-0013.json", tmp_path, root="docs/stories")
    newer = lay("docs-stories-epic-0013.json", tmp_path)
    data = json.loads(newer.read_text("utf-8"))
    data["stories"]["story-0013-0001"]["status"] = "SUCCESS"
    newer.write_text(json.dumps(data), "utf-8")
    view = epic_json(run_storyd, tmp_path, "13")
    assert view["stateFile"] == "plans/epic-0013/execution-state.json"
    assert view["olderCopy"] == "docs/stories/epic-0013/execution-state.json"
    text = run_storyd("epic", "--epic-id", "13", "--direct", cwd=tmp_path).stdout
    assert b"also kept at docs/stories/epic-0013/execution-state.json (the older" in text
    detail = json.loads(run_storyd("resume", "--epic-id", "13", "--story-id", "story-0013-0001",
                                   "--detail", "--direct", cwd=tmp_path).stdout)
    [twin] = [f for f in detail["findings"] if f["code"] == "epic-in-two-places"]
    assert twin["severity"] == "info"
    assert "docs/stories/epic-0013/execution-state.json" in twin["message"]
    old_file = "docs/stories/epic-0013/execution-state.json"
    old = json.loads(run_storyd("resume", "--state-file", old_file, "--unit", "story-0013-0001",
                                "--detail", "--direct", cwd=tmp_path).stdout)
    [twin] = [f for f in old["findings"] if f["code"] == "epic-in-two-places"]
    assert "plans/epic-0013/execution-state.json also exists" in twin["message"]


@pytest.mark.slow
def test_daemon_watches_the_older_location(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)  # docs/ first, as in a real repository
    proc = spawn_daemon([ws])
    lay("docs-stories-epic-0013.json", ws, root="docs/stories")
    argv = ("resume", "--epic-id", "13", "--story-id", "story-0013-0002", "--timeout", "5000")
    direct = run_storyd_cli(*argv, "--direct", env=proc.env, cwd=ws)
    assert direct.returncode == 0, direct.stderr

    def served() -> bool:
        hits = proc.stats()["hits"]
        answer = run_storyd_cli(*argv, env=proc.env, cwd=ws)
        return answer.stdout == direct.stdout and proc.stats()["hits"] == hits + 1  # type: ignore[operator]

    wait_for(served, timeout=10, message="the daemon's cache holds docs/stories/epic-0013")
