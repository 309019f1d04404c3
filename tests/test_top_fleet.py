"""Issue 34: `storyd top --fleet --once`: every machine's units from NATS (issue 22's
reader) in the same frame, named machine:workspace:unit; a server that does not answer
is a clear error (69). Skips without nats-py or nats-server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cli_harness import STORYD
from daemon_harness import wait_for
from epic_state_harness import EPIC, story_id, task_id, write_epic
from git_harness import GitWorkspace
from nats_harness import NEEDS_NATS, fleet_config, free_port

pytestmark = [pytest.mark.slow, NEEDS_NATS]


def _workspace(path: Path, done: int) -> Path:
    repo = GitWorkspace(path).init()
    repo.commit("base", {"README": "x\n"})
    story = story_id(1)
    write_epic(repo.path, EPIC, {story: {"tasks": {
        task_id(story, n): {"status": "DONE" if n <= done else "PENDING"} for n in (1, 2)}}})
    return repo.path


def _top(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STORYD, "top", "--fleet", "--once", *args], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**env, "COLUMNS": "120"})  # fmt: skip


def test_every_machine_in_one_frame(tmp_path: Path, spawn_daemon, nats_server) -> None:
    server = nats_server()
    procs = []
    for machine, done in (("alpha", 1), ("beta", 2)):
        cfg = tmp_path / f"{machine}.toml"
        cfg.write_text("[notify]\ndesktop = false\n\n" + fleet_config(server.url, machine))
        ws = _workspace(tmp_path / machine / "ws", done)
        procs.append(spawn_daemon([ws], args=["--config", str(cfg)],
                                  socket_path=tmp_path / f"{machine}.sock"))  # fmt: skip
    env = dict(os.environ)

    def frame() -> str | None:
        done = _top(env, "--url", server.url)
        assert done.returncode == 0, done.stderr
        # both machines' heartbeats too: a daemon puts its units before its machine's key
        return done.stdout if "2 units" in done.stdout and "2 machines" in done.stdout else None

    text = wait_for(frame, 15, "both machines and their units in the frame")
    assert "storyd top (fleet, 2 machines)" in text
    assert "alpha:ws:story-0049-0001" in text and "beta:ws:story-0049-0001" in text
    lines = text.splitlines()
    beta = next(x for x in lines if "beta:ws:" in x)
    assert "2/2" in beta and "all-done" in beta
    assert "\033" not in text


def test_no_server_is_a_clear_error() -> None:
    done = _top(dict(os.environ), "--url", f"nats://127.0.0.1:{free_port()}")
    assert done.returncode == 69
    assert done.stderr.startswith("storyd top: cannot reach nats://127.0.0.1:")
    assert "Traceback" not in done.stderr


def test_the_live_view_follows_the_fleet(tmp_path: Path, spawn_daemon, nats_server) -> None:
    """`storyd top --fleet` live: both machines' units from the bucket, a write on one
    shows without a key press (the bucket's watch, no polling), and a server that goes
    away is said and followed again when it is back."""
    pytest.importorskip("textual", reason="the tui extra is not installed")
    import asyncio
    import time

    from textual.widgets import DataTable

    from storyd.fleet.config import Fleet
    from storyd.fleet.feed import FleetFeed
    from storyd.tui.app import TopApp

    server = nats_server()
    spaces = {}
    for machine, done in (("alpha", 0), ("beta", 2)):
        cfg = tmp_path / f"{machine}.toml"
        cfg.write_text("[notify]\ndesktop = false\n\n" + fleet_config(server.url, machine))
        spaces[machine] = _workspace(tmp_path / machine / "ws", done)
        spawn_daemon([spaces[machine]], args=["--config", str(cfg)],
                     socket_path=tmp_path / f"{machine}.sock")  # fmt: skip
    app = TopApp(feed=FleetFeed(Fleet(url=server.url)))

    def cells() -> list[str]:
        table = app.query_one(DataTable)
        return [" ".join(map(str, table.get_row_at(i))) for i in range(table.row_count)]

    async def until(pilot: object, check: object, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out: {cells()} [{app.link}] [{app.source}]")
            await pilot.pause(0.05)  # type: ignore[attr-defined]

    def alpha(progress: str) -> bool:
        return any("alpha:ws:story-0049-0001" in c and progress in c for c in cells())

    async def drive() -> None:
        async with app.run_test(size=(120, 24)) as pilot:
            # a daemon puts its units before its first heartbeat (the machine's key): a
            # view that reads the bucket between the two has both rows and one machine
            await until(pilot, lambda: len(app.rows) == 2 and app.link == "live"
                        and "fleet, 2 machines" in app.source)  # fmt: skip
            assert alpha("0/2") and any("beta:ws:story-0049-0001" in c for c in cells())
            story = story_id(1)
            write_epic(spaces["alpha"], EPIC, {story: {"tasks": {
                task_id(story, 1): {"status": "DONE"}, task_id(story, 2): {"status": "PENDING"},
            }}})  # fmt: skip
            await until(pilot, lambda: alpha("1/2"))  # no key pressed
            server.stop()
            await until(pilot, lambda: app.link != "live")
            assert server.url in app.link
            server.start()
            await until(pilot, lambda: app.link == "live" and len(app.rows) == 2, timeout=30)
            await pilot.press("r")  # a fleet unit is reconciled on its machine: said, not run
            assert type(app.screen).__name__ != "Reconcile"
            await pilot.press("enter")
            await until(pilot, lambda: type(app.screen).__name__ == "Detail")
            text = "\n".join(str(w.render()) for w in app.screen.query("Static"))
            assert "(on alpha)" in text or "(on beta)" in text
            assert "storyd top on " in text
            await pilot.press("escape")
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())
