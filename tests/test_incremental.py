"""A write to a big state file re-answers the stories that changed, and only those.

Real daemon subprocess, real files: the daemon parses with orjson and keeps the entries
of unchanged stories; its answers must still be the bytes `storyd resume --direct` prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from daemon_harness import (
    DaemonProcess,
    EventStream,
    assert_same_output,
    resume_via_daemon,
    resume_without_daemon,
    wait_for,
    write_config,
)
from epic_state_harness import atomic_write, epic_relpath

from storyd.api.answers import Options
from storyd.server.engine import Engine, Workspace

Spawn = Callable[..., DaemonProcess]
REL = epic_relpath("0049")
COUNT = 40
CHANGED = "story-0049-0020"


def story(n: int) -> str:
    return f"story-0049-{n:04d}"


def stories(done_t3: str | None = None) -> dict[str, object]:
    """COUNT stories: T1 done, T2 with an unknown status (a format finding), T3 pending."""
    return {
        story(n): {"tasks": {
            "T1": {"status": "DONE", "commitSha": f"{n:040x}",
                   "completedAt": "2026-01-01T00:00:00Z"},
            "T2": {"status": "HUH"},
            "T3": {"status": "DONE", "commitSha": "c" * 40} if story(n) == done_t3
            else {"status": "PENDING"},
        }}
        for n in range(1, COUNT + 1)
    }


def write(ws: Path, body: dict[str, object]) -> None:
    document = {"epic": "0049", "stories": body}
    atomic_write(ws / REL, orjson.dumps(document, option=orjson.OPT_INDENT_2))


def snapshot(proc: DaemonProcess, ws: Path) -> dict[str, tuple[object, object, object]]:
    """unit -> (generation, done, findings) from the `list` op with detail."""
    return {str(u["unit"]): (u["generation"], u["done"], u["findingList"])
            for u in proc.units(ws, detail=True)}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    write(path, stories())
    return path


@pytest.mark.slow
def test_one_story_changed_only_that_story_rebuilt(spawn_daemon: Spawn, ws: Path) -> None:
    proc = spawn_daemon([ws])
    before = snapshot(proc, ws)
    assert len(before) == COUNT
    assert all(findings for _, _, findings in before.values())  # each has its finding

    write(ws, stories(done_t3=CHANGED))
    after = wait_for(lambda: (s := snapshot(proc, ws))[CHANGED][1] == 2 and s, timeout=10,
                     message="the changed story's new DONE count")

    generation, _done, findings = after[CHANGED]
    assert generation > before[CHANGED][0]  # type: ignore[operator]
    old_findings = before[CHANGED][2]
    assert isinstance(findings, list) and isinstance(old_findings, list)
    assert all(f in findings for f in old_findings)  # its unknown-status finding stays
    # and the detectors ran again on it: T3 is now DONE while T2 is not
    assert any(f["code"] == "out-of-order" and f["task"] == "T3" for f in findings)
    assert {k: v for k, v in after.items() if k != CHANGED} == {
        k: v for k, v in before.items() if k != CHANGED
    }, "an unchanged story was rebuilt"
    for name in (CHANGED, story(1), story(COUNT)):
        args = ("--story-id", name, "--epic-id", "0049")
        assert_same_output(resume_via_daemon(proc, ws, *args),
                           resume_without_daemon(proc.env, ws, *args))


TRICKY_STATE = (
    b'{"epic":"0049","stories":{"story-0049-0001":{"tasks":{'
    b'"T1":{"status":"DONE","commitSha":123456789012345678901234567890,'
    b'"completedAt":"2026-01-01T00:00:00Z"},'
    b'"T\\ud800":{"status":"DONE","commitSha":"x\\udc00"},'
    b'"T2":{"status":"PENDING","n":1e400},'
    b'"T2":{"status":"DONE","commitSha":1.0}}},'
    b'"story-0049-0002":{"tasks":{"T1":{"status":"DONE","commitSha":18446744073709551616}}}}}'
)


@pytest.mark.slow
@pytest.mark.parametrize("data", [
    pytest.param(TRICKY_STATE, id="big-ints-surrogates-duplicates-overflow"),
    pytest.param(TRICKY_STATE.replace(b"1e400", b"2").replace(b"\\ud800", b"3")
                 .replace(b"\\udc00", b"4"), id="big-ints-and-floats-only"),
])
def test_tricky_state_file_answers_as_direct(spawn_daemon: Spawn, ws: Path,
                                              data: bytes) -> None:
    """Inputs where orjson and `_json` differ: the daemon's bytes are still the CLI's."""
    proc = spawn_daemon([ws])
    atomic_write(ws / REL, data)
    wait_for(lambda: {str(u["unit"]) for u in proc.units(ws)} == {story(1), story(2)},
             timeout=10, message="the tricky file's units")
    for name in (story(1), story(2)):
        args = ("--story-id", name, "--epic-id", "0049")
        daemon, cli = resume_via_daemon(proc, ws, *args), resume_without_daemon(proc.env, ws, *args)
        assert daemon.returncode == 0, daemon.stderr
        assert_same_output(daemon, cli)


# -- in process: which units a write rebuilds, and a read at a write's very end --------

def _engine(ws: Path) -> tuple[Engine, Workspace]:
    engine = Engine(Options(staleness="mtime"))
    workspace = engine.add_workspace(str(ws))
    engine.scan(workspace)
    return engine, workspace


def _units(workspace: Workspace) -> dict[str, object]:
    return {key: entry.unit for (_, key), entry in workspace.entries.items()}


def test_a_write_builds_only_the_stories_whose_nodes_changed(ws: Path) -> None:
    engine, workspace = _engine(ws)
    before = _units(workspace)
    assert len(before) == COUNT

    write(ws, stories(done_t3=CHANGED))
    assert engine.touch(workspace, REL) is True
    after = _units(workspace)

    assert after[CHANGED] is not before[CHANGED]
    rebuilt = [key for key in before if after[key] is not before[key]]
    assert rebuilt == [CHANGED]
    entry = workspace.entries[(REL, CHANGED)]
    assert b'"tasksPending":[]' not in entry.line and b'"c' + b"c" * 39 in entry.line


def test_a_companion_change_rebuilds_its_units(ws: Path) -> None:
    """A story file's change can change answers (staleness) without a node changing."""
    engine, workspace = _engine(ws)
    before = _units(workspace)
    story_file = ws / "plans" / "epic-0049" / f"{CHANGED}.md"
    story_file.write_text("# edited\n", encoding="utf-8")
    engine.touch(workspace, f"plans/epic-0049/{CHANGED}.md")
    after = _units(workspace)
    assert all(after[key] is not before[key] for key in before)  # the whole file re-read
    assert workspace.entries[(REL, CHANGED)].unit.story_file == f"plans/epic-0049/{CHANGED}.md"


def test_a_side_table_change_rebuilds_the_story_it_names(tmp_path: Path) -> None:
    """The `stories` array shape merges `storyEntries` into each story's node: a change
    there is a change of that story, and of no other."""
    ws = tmp_path / "ws"
    items = [{"id": story(n), "tasks": {"T1": {"status": "PENDING"}}} for n in (1, 2, 3)]
    document: dict[str, object] = {"epic": "0049", "stories": items, "storyEntries": {}}
    (ws / REL).parent.mkdir(parents=True)
    atomic_write(ws / REL, orjson.dumps(document))
    engine, workspace = _engine(ws)
    before = _units(workspace)

    document["storyEntries"] = {story(2): {"prNumber": 41}}
    atomic_write(ws / REL, orjson.dumps(document))
    engine.touch(workspace, REL)
    after = _units(workspace)

    assert [key for key in before if after[key] is not before[key]] == [story(2)]
    assert workspace.entries[(REL, story(2))].summary()["pr"] == "41"


def test_a_torn_read_at_a_writes_end_changes_nothing(ws: Path) -> None:
    engine, workspace = _engine(ws)
    entries = dict(workspace.entries)
    generation = engine.log.generation
    whole = (ws / REL).read_bytes()
    (ws / REL).write_bytes(whole[: len(whole) // 2])

    assert engine.touch(workspace, REL, tentative=True) is False
    assert workspace.entries == entries and engine.log.generation == generation
    assert workspace.files[REL].unreadable_since is None

    assert engine.touch(workspace, REL) is True  # once settled, it is what it is
    assert workspace.files[REL].unreadable_since is not None
    codes = {f.code for f in workspace.entries[(REL, CHANGED)].findings}
    assert "state-unreadable" in codes


@pytest.mark.slow
def test_a_finished_write_is_answered_before_the_settle_window(
    spawn_daemon: Spawn, ws: Path, tmp_path: Path
) -> None:
    """A write's end (close after writing, rename) is read at once; a torn file seen
    then waits for the settle window instead of being reported unreadable."""
    write_config(tmp_path, "[limits]\nsettle_ms = 3000\n")
    proc = spawn_daemon([ws])
    whole = orjson.dumps({"epic": "0049", "stories": stories(done_t3=CHANGED)},
                         option=orjson.OPT_INDENT_2)
    with EventStream(proc, workspace=str(ws)) as stream:
        start = stream.mark()
        with open(ws / REL, "wb") as handle:  # torn: half written, then closed
            handle.write(whole[: len(whole) // 2])
        written = time.monotonic()
        with open(ws / REL, "wb") as handle:
            handle.write(whole)
        stamp, _ = stream.wait(
            lambda e: e.get("event") == "changed" and e.get("unit") == CHANGED
            and e.get("done") == 2,
            start=start, timeout=10, message="the finished write's changed event")
        assert stamp - written < 2.0, "waited out the 3 s settle window"
        unreadable = [e for e in stream.since(start)
                      if e.get("event") == "drift"
                      and (e.get("finding") or {}).get("code") == "state-unreadable"]
        assert unreadable == []
