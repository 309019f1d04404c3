"""Issue 29 item 5: the state-file cap and the answer cap, on every door.

A state file over `limits.max_state_bytes` is refused before it is parsed, and an
answer over `limits.max_answer_bytes` is refused before it is sent; each error names
the size, the cap and the setting that raises it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, write_config
from epic_state_harness import write_epic

from storyd.core import switches
from storyd.core.caps import DEFAULT_MAX_ANSWER_BYTES, check_answer
from storyd.core.errors import DataError
from storyd.core.switches import DEFAULT_MAX_STATE_BYTES

Spawn = Callable[..., DaemonProcess]
STORY = "story-0002-0001"


def big_epic(ws: Path, tasks: int) -> Path:
    """Epic 0002: one story of `tasks` small tasks (about 45 bytes of JSON each)."""
    nodes = {f"TASK-0002-0001-{n:06d}": {"status": "PENDING"} for n in range(tasks)}
    return write_epic(ws, "0002", tasks={STORY: nodes})


def test_the_answer_cap_names_size_cap_and_setting() -> None:
    check_answer(DEFAULT_MAX_ANSWER_BYTES)  # at the cap: fine
    with pytest.raises(DataError) as raised:
        check_answer(DEFAULT_MAX_ANSWER_BYTES + 1)
    message = raised.value.message
    assert f"{DEFAULT_MAX_ANSWER_BYTES + 1:,} bytes" in message
    assert f"{DEFAULT_MAX_ANSWER_BYTES:,}-byte answer cap" in message
    assert "limits.max_answer_bytes" in message


def test_the_state_cap_is_a_switch(tmp_path: Path) -> None:
    from storyd.core.formats.base import Source

    path = big_epic(tmp_path, 2000)  # ~90 KB
    source = Source(str(tmp_path))
    relpath = str(path.relative_to(tmp_path))
    try:
        switches.configure(max_state_bytes=65536)
        with pytest.raises(DataError) as raised:
            source.read(relpath)
        assert "65,536-byte state-file cap" in raised.value.message
        assert "limits.max_state_bytes" in raised.value.message
        switches.configure(max_state_bytes=DEFAULT_MAX_STATE_BYTES)
        assert source.read(relpath) == path.read_bytes()
    finally:
        switches.reset()
    with pytest.raises(TypeError):
        switches.configure(max_state_bytes=0)


@pytest.mark.slow
def test_the_daemon_refuses_a_state_file_over_its_cap(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    ws = tmp_path / "ws"
    big_epic(ws, 2000)
    write_config(tmp_path, "[limits]\nmax_state_bytes = 65536\n")
    daemon = spawn_daemon([ws])
    answer = daemon.request({"op": "resume", "workspace": str(ws), "epic": "0002",
                             "story": STORY})
    assert answer["ok"] is False, answer
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == 65
    assert "65,536-byte state-file cap" in error["message"]
    assert "limits.max_state_bytes" in error["message"]


@pytest.mark.slow
def test_an_epic_view_over_the_answer_cap_is_refused_on_both_doors(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    ws = tmp_path / "ws"
    big_epic(ws, 2000)  # a view of ~160 KB
    write_config(tmp_path, "[limits]\nmax_answer_bytes = 65536\n")
    daemon = spawn_daemon([ws])
    answer = daemon.request({"op": "epic", "workspace": str(ws), "epic": "0002"}, timeout=30)
    assert answer["ok"] is False, answer
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == 65
    assert "65,536-byte answer cap" in error["message"]
    assert "limits.max_answer_bytes" in error["message"]
    # the same workspace under the cap: answered (the positive control)
    small = tmp_path / "small"
    big_epic(small, 20)
    assert daemon.request({"op": "epic", "workspace": str(small), "epic": "0002"})["ok"]
    # the direct path applies the default cap: this view is well under it
    direct = subprocess.run(
        [sys.executable, "-m", "storyd", "epic", "--epic-id", "0002", "--workspace", str(ws),
         "--direct", "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert direct.returncode == 0, direct.stderr


def done_epic(ws: Path, tasks: int) -> Path:
    """Epic 0002: one story of `tasks` DONE tasks (each one entry of the envelope)."""
    nodes = {f"TASK-0002-0001-{n:06d}": {"status": "DONE"} for n in range(tasks)}
    return write_epic(ws, "0002", tasks={STORY: nodes})


def test_an_envelope_over_the_cap_is_refused_by_the_pipeline(tmp_path: Path) -> None:
    from storyd.core import pipeline, target

    done_epic(tmp_path, 2000)  # an envelope of ~100 KB
    where = target.for_epic(str(tmp_path), "0002", STORY)
    (unit,) = pipeline.read_units(str(tmp_path), where.adapter, where.relpath,
                                  pipeline.Options(staleness="mtime"))
    assert pipeline.answer(str(tmp_path), unit, pipeline.Options(staleness="mtime")).line
    small = pipeline.Options(staleness="mtime", max_answer_bytes=65536)
    with pytest.raises(DataError) as raised:
        pipeline.answer(str(tmp_path), unit, small)
    assert "65,536-byte answer cap" in raised.value.message


@pytest.mark.slow
def test_a_cached_answer_over_the_cap_is_refused(tmp_path: Path, spawn_daemon: Spawn) -> None:
    ws = tmp_path / "ws"
    done_epic(ws, 2000)
    write_config(tmp_path, "[limits]\nmax_answer_bytes = 65536\n")
    daemon = spawn_daemon([ws])
    for _ in range(2):  # the miss, then the cached entry
        answer = daemon.request({"op": "resume", "workspace": str(ws), "epic": "0002",
                                 "story": STORY})
        assert answer["ok"] is False, answer
        error = answer["error"]
        assert isinstance(error, dict) and error["code"] == 65
        assert "65,536-byte answer cap" in error["message"], error


@pytest.mark.parametrize(("grown", "cap"), [(b"", 1 << 20), (b"x" * 3000, 1 << 20),
                                            (b"x" * 3000, 2048)])
def test_a_file_read_whole_in_one_call_still_sees_growth_and_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grown: bytes, cap: int
) -> None:
    """The read is one system call at fstat's size + 1; a file that grew after fstat
    is read on to its end, and refused once past the cap."""
    import os

    from storyd.core import locking

    path = tmp_path / "state.json"
    path.write_bytes(b"y" * 1000)
    real_fstat = os.fstat

    def fstat_then_grow(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        with open(path, "ab") as out:  # a writer appends between fstat and the read
            out.write(grown)
        return st

    monkeypatch.setattr(locking.os, "fstat", fstat_then_grow)
    try:
        switches.configure(max_state_bytes=cap)
        fd = os.open(path, os.O_RDONLY)
        try:
            if 1000 + len(grown) > cap:
                with pytest.raises(DataError, match="state-file cap"):
                    locking._read_all(fd, str(path))
            else:
                assert locking._read_all(fd, str(path)) == b"y" * 1000 + grown
        finally:
            os.close(fd)
    finally:
        switches.reset()
