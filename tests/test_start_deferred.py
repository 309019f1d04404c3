"""What `storyd serve` leaves until after its socket serves (issue 43): the detectors
are built at their first call, and the warm-up is queued only when `warm_up` is called
(runtime.py calls it a moment after serving)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest
from epic_state_harness import write_epic

from storyd.config.values import Config
from storyd.server.assembly import assemble
from storyd.server.lazydetect import Detectors
from storyd.server.service import Daemon, Settings

EPIC = "0043"
STORY = "story-0043-0001"


def _after_queued(daemon: Daemon) -> None:
    """Wait until the refresher has run everything queued so far (calls run in order)."""
    done: Future[None] = Future()
    daemon.refresher.call(lambda: done.set_result(None))
    done.result(timeout=10.0)


def test_detectors_are_built_at_their_first_call_only() -> None:
    detectors = Detectors(Config(), "mtime")
    try:
        detectors.hold_tips(False)  # releasing what was never held loads nothing
        assert not detectors.loaded
        detectors.hold_tips(True)
        assert detectors.loaded
        first = detectors.build()
        assert detectors.build() is first  # built once
        detectors.hold_tips(False)
    finally:
        detectors.close()
    assert not detectors.loaded
    with pytest.raises(RuntimeError, match="closed"):
        detectors.build()


@pytest.mark.slow
def test_the_warm_up_waits_for_warm_up_and_the_detectors_for_its_check(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    write_epic(workspace, EPIC, tasks={STORY: {"T1": {"status": "pending"}}})
    detectors = Detectors(Config(), "mtime")
    parts = assemble(Settings(staleness="mtime", verify_interval=3600.0), Config(),
                     detectors.detect, detectors.hold_tips, "")  # fmt: skip
    daemon = parts.daemon
    try:
        daemon.start([str(workspace)], warm=False)
        _after_queued(daemon)
        assert daemon.warm.read == 0 and not daemon.warm.done  # registered, not read
        assert not detectors.loaded
        daemon.warm_up()
        daemon.warm_up()  # once: a second call queues nothing
        ended = threading.Event()
        daemon.refresher.call(ended.set)
        assert ended.wait(10.0)
        assert daemon.warm.done and daemon.warm.read == 1 and daemon.warm.checked == 1
        assert detectors.loaded  # the warm-up's check built them
    finally:
        daemon.stop()
        parts.close_optional_parts()
        detectors.close()
