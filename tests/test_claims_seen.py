"""Claims seen where people look (issue 45): the last state storyd saw of a claimed unit,
the `claim` field of status, resume --detail, top and the fleet view, `claim-lost` as a
finding of status and check, the claims' log in `storyd history`, and claimants racing
through the daemon's socket (and half of them directly on the same store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agents_harness import demo_workspace
from cli_harness import STORYD
from daemon_harness import wait_for
from epic_state_harness import EPIC, STORY
from race_gate import gated, rounds_won

from storyd.api import claims, claimview
from storyd.api.topview import frame
from storyd.api.unitdetail import detail_lines
from storyd.fleet.view import render

STATE = f"plans/epic-{EPIC}/execution-state.json"
OTHER = "story-0049-0014"
RACER = str(Path(__file__).with_name("claims_door_racer.py"))
# 16 claimants x 200 rounds by default; STORYD_CLAIM_RACE_ROUNDS makes a CI run shorter
ROUNDS = int(os.environ.get("STORYD_CLAIM_RACE_ROUNDS", "200"))
CLAIMANTS = 16


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """storyd demo's workspace (epic 0049: story 13 at task 4 of 5, story 14 fresh)."""
    return demo_workspace(tmp_path)


def _unit(ws: Path, story: str = STORY, task: str = "") -> claims.Place:
    return claims.Place(str(ws.resolve()), STATE, story, task)


def _abandoned(place: claims.Place, owner: str) -> claims.Claim:
    """A claim whose lease (50 ms) has ended unrenewed."""
    held = claims.claim(place, owner, 0.05)
    wait_for(lambda: not claims.listing(place.workspace, owner=owner, abandoned=False),
             timeout=2.0, message="the 50 ms lease to end")  # fmt: skip
    return held


def _finish_task_4(ws: Path) -> None:
    """The agent's write: task 4 of story 13 DONE (a new mtime)."""
    path = ws / STATE
    body = json.loads(path.read_text())
    before = path.stat().st_mtime_ns
    text = json.dumps(body).replace('"IN_PROGRESS"', '"DONE"', 1)
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def _run(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([STORYD, *args], cwd=cwd, env=env, capture_output=True, timeout=60,
                          check=False)  # fmt: skip


def _units(out: bytes) -> dict[str, dict[str, Any]]:
    return {u["unit"]: u for u in json.loads(out)["units"]}


class TestLastState:
    """A grant and each renewal keep what storyd saw of the unit."""

    def test_grant_keeps_the_units_state(self, store: Path, ws: Path) -> None:
        held = claims.claim(_unit(ws), "alice", 60)
        last = json.loads(held.last or "null")
        assert (last["resumePoint"], last["task"], last["status"]) == (
            "phase-2-task-4", "TASK-0049-0013-004", "IN_PROGRESS")
        assert (last["done"], last["total"]) == (3, 5)

    def test_renewal_reads_again_only_when_the_file_changed(self, store: Path, ws: Path) -> None:
        claims.claim(_unit(ws), "alice", 60)
        first = claims.renew_owner("alice")[0].last
        assert claims.renew_owner("alice")[0].last == first  # same mtime: the same text
        _finish_task_4(ws)
        last = json.loads(claims.renew_owner("alice")[0].last or "null")
        assert (last["done"], last["task"]) == (4, "TASK-0049-0013-005")
        assert [e["kind"] for e in claims.log(_unit(ws))] == ["granted"] + ["renewed"] * 3

    def test_abandoned_claim_says_the_last_state(self, store: Path, ws: Path) -> None:
        _abandoned(_unit(ws), "alice")
        [field] = [claimview.claim_field(c) for c in claims.listing()]
        assert field["state"] == "abandoned"
        assert field["last"]["task"] == "TASK-0049-0013-004"  # type: ignore[index]
        assert "last seen: at phase-2-task-4, task TASK-0049-0013-004 (IN_PROGRESS), 3/5 done" \
            in claimview.claim_text(field)

    def test_a_file_that_does_not_parse_leaves_what_was_seen(self, store: Path,
                                                             ws: Path) -> None:  # fmt: skip
        before = claims.claim(_unit(ws), "alice", 60).last
        (ws / STATE).write_text("{ torn")
        assert claims.renew_owner("alice")[0].last == before


@pytest.mark.slow
class TestCommands:
    """`storyd claims`, status, check, resume --detail and history, run as processes:
    directly, and through a real daemon."""

    def test_claims_lists_the_abandoned_with_its_last_state(
            self, store: Path, ws: Path, run_storyd: Any) -> None:  # fmt: skip
        _abandoned(_unit(ws), "alice")
        out = run_storyd("claims", "--workspace", str(ws))
        assert out.returncode == 0, out.stderr
        line = out.stdout.decode()
        assert "(ABANDONED); last seen: at phase-2-task-4, task TASK-0049-0013-004" in line
        listed = json.loads(run_storyd("claims", "--json").stdout)
        assert listed["last"]["resumePoint"] == "phase-2-task-4"

    @pytest.mark.parametrize("door", ["direct", "daemon"])
    def test_status_and_detail_carry_the_claim(self, store: Path, ws: Path, door: str,
                                               spawn_daemon: Any) -> None:  # fmt: skip
        if door == "daemon":
            env, flags = spawn_daemon([ws]).env, []
        else:
            env, flags = dict(os.environ), ["--direct"]
        held = claims.claim(_unit(ws), "alice", 600)
        _abandoned(_unit(ws, OTHER), "bob")
        out = _run(env, "status", "--json", *flags, cwd=ws)
        assert out.returncode == 0, out.stderr
        found = _units(out.stdout)
        assert json.loads(out.stdout)["source"] == door
        mine = found[STORY]["claim"]
        assert {k: mine[k] for k in ("owner", "token", "state")} == {
            "owner": "alice", "token": held.token, "state": "live"}
        assert mine["expires"] == held.as_dict()["expires"]
        assert found[OTHER]["claim"]["state"] == "abandoned"
        assert found[OTHER]["claim"]["last"]["resumePoint"] == "fresh-start"
        assert "claim" not in found["story-0049-0012"]  # absent, not null
        text = _run(env, "status", *flags, cwd=ws).stdout.decode()
        assert f"claimed by alice (token {held.token})" in text
        assert "ABANDONED by bob (token 1): lease ended" in text
        detail = _run(env, "resume", "--detail", *flags, "--epic-id", EPIC, "--story-id",
                      STORY, cwd=ws)  # fmt: skip
        assert detail.returncode == 0, detail.stderr
        body = json.loads(detail.stdout)
        assert body["claim"]["owner"] == "alice" and body["claim"]["state"] == "live"
        free = _run(env, "resume", "--detail", *flags, "--epic-id", EPIC, "--story-id",
                    "story-0049-0012", cwd=ws)  # fmt: skip
        assert "claim" not in json.loads(free.stdout)

    @pytest.mark.parametrize("door", ["direct", "daemon"])
    def test_claim_lost_is_a_finding_of_status_and_check(
            self, store: Path, ws: Path, door: str, spawn_daemon: Any) -> None:  # fmt: skip
        if door == "daemon":
            env, flags = spawn_daemon([ws]).env, []
        else:
            env, flags = dict(os.environ), ["--direct"]
        held = claims.claim(_unit(ws), "alice", 600)
        clean = _run(env, "check", *flags, cwd=ws)
        assert b"claim-lost" not in clean.stdout
        written = claims.Place(str(ws.resolve()), STATE)
        assert claims.record_lost(written, "session:s2") is not None
        claims.record_lost(written, "session:s2")  # said again: still one line
        said = (f"claims/claim-lost: written by session:s2 (token none) while alice holds "
                f"the current grant (token {held.token})")
        checked = _run(env, "check", *flags, cwd=ws)
        assert checked.returncode == 1, checked.stderr
        lines = [ln for ln in checked.stdout.decode().splitlines() if "claim-lost" in ln]
        assert lines == [f"{ws.resolve()}/{STATE} {STORY}: warning: {said}"]
        status = _run(env, "status", *flags, cwd=ws).stdout.decode()
        assert status.count("claim-lost") == 1 and said in status
        found = _units(_run(env, "status", "--json", *flags, cwd=ws).stdout)[STORY]
        [lost] = [f for f in found["findingList"] if f["code"] == "claim-lost"]
        assert lost["evidence"] == {"writer": "session:s2", "writerToken": "none",
                                    "holder": "alice", "holderToken": str(held.token),
                                    "at": lost["evidence"]["at"]}  # fmt: skip
        claims.release(_unit(ws), "alice")  # the grant it was written under ends
        after = _run(env, "check", *flags, cwd=ws)
        assert b"claim-lost" not in after.stdout

    def test_history_merges_the_claims_log_with_the_versions(
            self, store: Path, ws: Path, spawn_daemon: Any) -> None:  # fmt: skip
        daemon = spawn_daemon([ws])
        env = daemon.env
        unit = ["--epic-id", EPIC, "--story-id", STORY]

        def versions() -> list[dict[str, Any]]:
            out = _run(env, "history", "--json", *unit, cwd=ws)
            return [json.loads(x) for x in out.stdout.splitlines()]

        def recorded() -> int:
            return len([v for v in versions() if v.get("source") == "daemon"])

        wait_for(recorded, timeout=10, message="the daemon to record the unit")
        claims.claim(_unit(ws), "alice", 600)
        claims.renew_owner("alice")
        claims.renew_owner("alice")
        before = recorded()
        _finish_task_4(ws)
        wait_for(lambda: recorded() > before, timeout=10, message="the daemon to record the write")
        claims.release(_unit(ws), "alice")
        _abandoned(_unit(ws), "bob")
        found = versions()
        steps = [e.get("claim") or "version" for e in found]
        start = steps.index("granted")
        assert steps[start:] == ["granted", "renewed", "version", "released", "granted",
                                 "expired"]  # fmt: skip
        assert set(steps[:start]) == {"version"}
        assert [e["at"] for e in found] == sorted(e["at"] for e in found)
        assert found[start + 1]["count"] == 2  # two renewals of one grant: one entry
        assert found[-1]["last"]["task"] == "TASK-0049-0013-005"
        text = _run(env, "history", *unit, cwd=ws).stdout.decode()
        assert "claim granted to alice (token 1)" in text
        assert "claim renewed by alice (token 1) (2 times)" in text
        assert "claim lease of bob (token 2) ended; last seen: at phase-2-task-5" in text

    def test_history_without_versions_shows_the_claims(self, store: Path, ws: Path,
                                                       run_storyd: Any) -> None:  # fmt: skip
        claims.claim(_unit(ws), "alice", 600)
        out = run_storyd("history", "--epic-id", EPIC, "--story-id", STORY, cwd=ws)
        assert out.returncode == 0, out.stderr
        assert b"claim granted to alice (token 1)" in out.stdout


class TestViews:
    """top's frame, its detail and the fleet view draw the `claim` field."""

    def _units(self, ws: Path) -> list[dict[str, object]]:
        from storyd.api.units import units

        return claimview.attach(units([str(ws)], direct=True).units)

    def test_top_frame_and_detail(self, store: Path, ws: Path) -> None:
        claims.claim(_unit(ws), "alice", 600)
        _abandoned(_unit(ws, OTHER), "bob")
        found = self._units(ws)
        shown = frame(found, width=200, now=time.time())
        assert "RESUME / CLAIM / FINDING" in shown
        line = next(x for x in shown.splitlines() if STORY in x)
        assert "phase-2-task-4  [alice #1 " in line and "m left]" in line
        assert "[bob #1 abandoned]" in shown
        mine = next(u for u in found if u["unit"] == STORY)
        assert any(x.startswith("  claim       claimed by alice (token 1)")
                   for x in detail_lines(mine))  # fmt: skip

    def test_nothing_claimed_changes_nothing(self, store: Path, ws: Path) -> None:
        found = self._units(ws)
        assert not any("claim" in u for u in found)
        assert "CLAIM" not in frame(found, width=200)
        assert not store.exists()  # reading made no database

    def test_fleet_view(self) -> None:
        field = {"owner": "alice", "token": 7, "granted": "2026-11-28T00:00:00.000Z",
                 "expires": "2026-11-28T00:15:00.000Z", "state": "abandoned"}  # fmt: skip
        unit = {"machine": "m1", "workspace": "/w", "stateFile": "s.json", "unit": "u",
                "format": "epic", "done": 1, "total": 2, "resumePoint": "t2", "stale": False,
                "claim": field}  # fmt: skip
        assert "[alice #7 abandoned]" in render({}, [unit], [], color=False)


def _race(tmp_path: Path, env: dict[str, str], doors: list[str], workspace: str) -> None:
    """CLAIMANTS racers through `doors` (one each, in turn) x ROUNDS rounds: every round
    has exactly one winner."""
    gate = tmp_path / "gate"
    commands = [([sys.executable, RACER, str(gate), str(ROUNDS), f"p{i}", workspace,
                  doors[i % len(doors)]], env) for i in range(CLAIMANTS)]  # fmt: skip
    with gated(gate, commands) as racers:
        outs = [racer.communicate(timeout=300) for racer in racers]
    assert rounds_won(racers, outs, ROUNDS) == ([], [])
    listed = claims.listing(workspace)
    assert len(listed) == ROUNDS and {c.token for c in listed} == {1}


@pytest.mark.slow
class TestRaceThroughTheDaemon:
    """16 claimant processes x 200 rounds through a real daemon's socket, then half of
    them through it and half directly on the same store: one winner a round."""

    @pytest.mark.parametrize("mixed", [False, True], ids=["daemon", "half-direct"])
    def test_one_winner_per_round(self, store: Path, tmp_path: Path, spawn_daemon: Any,
                                  mixed: bool) -> None:  # fmt: skip
        workspace = tmp_path / "w"
        workspace.mkdir()
        daemon = spawn_daemon([])
        doors = [str(daemon.socket), "direct"] if mixed else [str(daemon.socket)]
        _race(tmp_path, daemon.env, doors, str(workspace.resolve()))
        assert daemon.running()


@pytest.mark.slow
class TestLiveView:
    """`storyd top`'s live view, on a real daemon: a grant shows without a unit changing,
    and a lease that ends unrenewed turns `abandoned` without any write."""

    def test_claims_follow_the_store(self, store: Path, ws: Path, spawn_daemon: Any,
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
        pytest.importorskip("textual", reason="the tui extra: pip install '.[tui]'")
        import asyncio

        from textual.widgets import DataTable

        from storyd.tui.app import TopApp

        daemon = spawn_daemon([ws])
        monkeypatch.setenv("XDG_STATE_HOME", str(daemon.root / "state"))
        claims.listing()  # nothing claimed yet: no database
        app = TopApp([str(ws)], socket=str(daemon.socket))

        def cells() -> list[str]:
            table = app.query_one(DataTable)
            return [" ".join(str(c) for c in table.get_row_at(i))
                    for i in range(table.row_count)]  # fmt: skip

        async def until(pilot: Any, check: Any, timeout: float = 10.0) -> None:
            deadline = time.monotonic() + timeout
            while not check():
                assert time.monotonic() < deadline, f"timed out: {cells()}"
                await pilot.pause(0.05)

        async def drive() -> None:
            async with app.run_test(size=(200, 30)) as pilot:
                await until(pilot, lambda: app.rows and app.link == "live")
                assert not any("alice" in row for row in cells())
                claims.claim(_unit(ws), "alice", 2.0)  # no unit changes: the store does
                await until(pilot, lambda: any("alice #1" in row and "left" in row
                                               for row in cells()))  # fmt: skip
                await until(pilot, lambda: any("alice #1 abandoned" in row for row in cells()),
                            timeout=5.0)  # fmt: skip
                await pilot.press("q")

        asyncio.run(drive())


@pytest.mark.slow
class TestMcp:
    """The agent's `status` and `check` tools show what `storyd status` and `check` do."""

    def test_status_carries_the_claim_and_check_the_claim_lost(self, store: Path, ws: Path,
                                                               tmp_path: Path) -> None:  # fmt: skip
        from agents_harness import AgentsEnv
        from mcp_harness import session

        env = AgentsEnv(tmp_path)
        held = claims.claim(_unit(ws), "alice", 600)
        claims.record_lost(claims.Place(str(ws.resolve()), STATE), "session:s2")

        async def work(client: Any) -> tuple[Any, Any]:
            return await client.call_tool("status", {}), await client.call_tool("check", {})

        status, checked = session({**env.env, "STORYD_CLAIMS": str(store)}, ws,
                                  tmp_path / "mcp.err", work)  # fmt: skip
        found = {u["unit"]: u for u in status.structured_content["units"]}
        assert found[STORY]["claim"]["owner"] == "alice"
        assert found[STORY]["claim"]["token"] == held.token
        lost = [f for f in checked.structured_content["findings"] if f["code"] == "claim-lost"]
        assert [f["evidence"]["holder"] for f in lost] == ["alice"]
        assert checked.structured_content["exitCode"] == 1
