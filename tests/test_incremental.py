"""A write to a big state file re-answers the stories that changed, and only those.

Real daemon subprocess, real files: the daemon parses with orjson and keeps the entries
of unchanged stories; its answers must still be the bytes `storyd resume --direct` prints.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from daemon_harness import (
    DaemonProcess,
    atomic_write,
    epic_relpath,
    spawn_daemon_fixture,  # noqa: F401  (registers the spawn_daemon fixture)
    wait_for,
)
from test_daemon import direct, same_output, via_daemon

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
        same_output(via_daemon(proc, ws, *args), direct(proc.env, ws, *args))


TRICKY_STATE = (
    b'{"epic":"0049","stories":{"story-0049-0001":{"tasks":{'
    b'"T1":{"status":"DONE","commitSha":123456789012345678901234567890,'
    b'"completedAt":"2026-01-01T00:00:00Z"},'
    b'"T\\ud800":{"status":"DONE","commitSha":"x\\udc00"},'
    b'"T2":{"status":"PENDING","n":1e400},'
    b'"T2":{"status":"DONE","commitSha":1.0}}},'
    b'"story-0049-0002":{"tasks":{"T1":{"status":"DONE","commitSha":18446744073709551616}}}}}'
)


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
        daemon, cli = via_daemon(proc, ws, *args), direct(proc.env, ws, *args)
        assert daemon.returncode == 0, daemon.stderr
        same_output(daemon, cli)
