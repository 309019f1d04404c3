"""Claims (issue 45): exactly one winner among racing processes on one store, leases
that end when their claimant dies, fencing tokens, and the three commands' exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from daemon_harness import wait_for
from locks_harness import FlockWriter
from race_gate import gated, rounds_won

from storyd.api import claims
from storyd.api.claims_store import connect

RACER = str(Path(__file__).with_name("claims_racer.py"))
# 16 claimants x 200 rounds by default; STORYD_CLAIM_RACE_ROUNDS makes a CI run shorter
ROUNDS = int(os.environ.get("STORYD_CLAIM_RACE_ROUNDS", "200"))
CLAIMANTS = 16


def _place(unit: str = "u", task: str = "", ws: str = "/w") -> claims.Place:
    return claims.Place(ws, "state.json", unit, task)


class TestGrant:
    """One owner at a time per overlapping place; the token only grows per unit."""

    def test_second_owner_is_refused_until_release(self, store: Path) -> None:
        first = claims.claim(_place(), "alice", 60)
        with pytest.raises(claims.Held) as refused:
            claims.claim(_place(), "bob", 60)
        assert refused.value.code == 75
        assert "held by alice (token 1)" in refused.value.message
        assert claims.claim(_place(), "alice", 60).token == first.token  # a renewal
        claims.release(_place(), "alice")
        assert claims.claim(_place(), "bob", 60).token == 2

    @pytest.mark.parametrize(("held", "asked", "overlap"), [
        (("u", ""), ("u", "t1"), True),  # the whole unit holds its tasks
        (("u", "t1"), ("u", ""), True),
        (("", ""), ("u", "t1"), True),  # the whole file holds its units
        (("u", "t1"), ("u", "t2"), False),
        (("u", ""), ("v", ""), False),
    ])  # fmt: skip
    def test_overlap(self, store: Path, held: tuple[str, str], asked: tuple[str, str],
                     overlap: bool) -> None:  # fmt: skip
        claims.claim(_place(*held), "alice", 60)
        if overlap:
            with pytest.raises(claims.Held):
                claims.claim(_place(*asked), "bob", 60)
        else:
            assert claims.claim(_place(*asked), "bob", 60).owner == "bob"

    def test_reading_makes_no_store(self, store: Path) -> None:
        assert (claims.listing(), claims.lost(), claims.log()) == ([], [], [])
        assert claims.release(_place(), "alice") is None
        assert not store.exists()  # the hooks would import sqlite3 from now on

    def test_corrupt_store_is_moved_aside_and_tokens_still_grow(self, store: Path) -> None:
        first = claims.claim(_place(), "alice", 60)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store}{suffix}").unlink(missing_ok=True)
        store.write_bytes(b"not a database" * 100)
        again = claims.claim(_place(), "bob", 60)
        assert again.token > first.token
        assert list(store.parent.glob("claims.sqlite3.corrupt-*"))

    def test_locked_store_is_exit_75(self, store: Path) -> None:
        holder = connect(str(store))
        holder.execute("BEGIN IMMEDIATE")
        try:
            waiting = connect(str(store), busy=0.05)
            with pytest.raises(claims.LockTimeout, match="locked"):
                claims.claim(_place(), "bob", 60, conn=waiting)
            waiting.close()
        finally:
            holder.execute("ROLLBACK")
            holder.close()


class TestContext:
    """The lines session-start would add: the session's claims first, then others'."""

    def test_lines(self, store: Path) -> None:
        from storyd.api.claims_context import context_lines

        assert context_lines("/w", "s1") == []  # nothing ever claimed
        claims.claim(_place("a"), "alice", 60)
        claims.claim(_place("b"), "session:s1", 60)
        lines = context_lines("/w", "s1")
        assert lines[0] == "storyd claims:"
        assert lines[1].startswith("- you hold state.json b (token 1")
        assert lines[2].startswith("- alice holds state.json a until ")


class TestLockFile:
    """A writer that holds the claims lock (flock(1) here) is waited for, boundedly."""

    @pytest.mark.slow
    def test_held_lock_is_exit_75_and_the_waiter_lets_go(self, store: Path,
                                                          tmp_path: Path) -> None:  # fmt: skip
        conn = connect(str(store), busy=0.3)
        writer = FlockWriter(Path(f"{store}.lock"), "-x", tmp_path / "fifo")
        try:
            with pytest.raises(claims.LockTimeout, match=r"claims lock for more than 0\.3 s"):
                claims.claim(_place(), "bob", 60, conn=conn)
        finally:
            writer.release()
            writer.kill()  # its pipe closed
        wait_for(lambda: not [t for t in threading.enumerate() if t.name == "claims-lock"],
                 message="the lock's waiting thread to end")  # fmt: skip
        assert claims.claim(_place(), "bob", 60, conn=conn).token == 1
        conn.close()


class TestFence:
    """storyd's own writes carry the owner's token and are refused when it is not current."""

    def test_other_holder_refuses_and_force_is_logged(self, store: Path) -> None:
        claims.claim(_place(), "alice", 60)
        with pytest.raises(claims.Held, match=r"held by alice.*write refused"):
            claims.fence(_place(), "bob")
        assert claims.fence(_place(), "bob", force=True) is None
        assert claims.log()[-1]["kind"] == "forced"

    def test_stale_token_is_refused(self, store: Path) -> None:
        old = claims.claim(_place(), "alice", 60)
        claims.release(_place(), "alice")
        claims.claim(_place(), "alice", 60)  # a newer grant, token 2
        with pytest.raises(claims.Held, match="no longer current"):
            claims.fence(_place(), "alice", old.token)

    def test_claim_lost_names_both_tokens(self, store: Path) -> None:
        claims.claim(_place(), "bob", 60)
        claims.release(_place(), "bob")
        claims.claim(_place(), "alice", 60)
        found = claims.record_lost(_place(), "bob")
        assert found is not None
        assert (found["writerToken"], found["holderToken"]) == (1, 2)
        assert claims.lost(owner="bob")[0]["code"] == "claim-lost"


@pytest.mark.slow
class TestRace:
    """Real processes on one store, started together at a FIFO gate."""

    def test_one_winner_per_round(self, store: Path, tmp_path: Path) -> None:
        gate = tmp_path / "gate"
        commands = [([sys.executable, RACER, str(gate), str(ROUNDS), f"p{i}", "/w"], None)
                    for i in range(CLAIMANTS)]  # fmt: skip
        with gated(gate, commands) as racers:
            outs = [racer.communicate(timeout=120) for racer in racers]
        assert rounds_won(racers, outs, ROUNDS) == ([], [])
        tokens = {c.token for c in claims.listing()}
        assert tokens == {1}  # each unit granted once, its first token

    def test_killed_claimant_lease_expires_within_ttl_plus_one(self, store: Path) -> None:
        with subprocess.Popen([sys.executable, RACER, "-", "0", "dead", "/w", "hold"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) as holder:  # fmt: skip
            assert holder.stdout is not None
            token = int(holder.stdout.readline())
            granted = time.time()
            holder.kill()
        place = claims.Place("/w", "state.json", "held")
        with pytest.raises(claims.Held):
            claims.claim(place, "next", 60)  # the dead one's lease still runs

        def take() -> claims.Claim | None:
            try:
                return claims.claim(place, "next", 60)
            except claims.Held:
                return None

        taken = wait_for(take, timeout=3.0, message="the dead claimant's lease to end")
        assert time.time() - granted <= 1.0 + 1.0
        assert taken.token == token + 1
        kinds = [e["kind"] for e in claims.log(place)]
        assert kinds == ["granted", "expired", "granted"]


@pytest.mark.slow
class TestCommands:
    """`storyd claim`, `release` and `claims` as a script sees them."""

    def test_exit_codes_and_json(self, store: Path, tmp_path: Path, run_storyd) -> None:  # type: ignore[no-untyped-def]
        ws = tmp_path / "ws"
        ws.mkdir()
        (ws / "tasks.json").write_text("{}")
        target = ["--workspace", str(ws), "--state-file", "tasks.json", "--unit", "u1"]
        env = {**os.environ, "STORYD_CLAIMS": str(store)}
        got = run_storyd("claim", *target, "--owner", "ci", "--json", env=env)
        assert got.returncode == 0, got.stderr
        line = json.loads(got.stdout)
        assert (line["token"], line["owner"]) == (1, "ci") and line["expires"].endswith("Z")
        other = run_storyd("claim", *target, "--owner", "bob", env=env)
        assert other.returncode == 75
        assert b"held by ci (token 1) until" in other.stderr
        assert len(other.stderr.splitlines()) == 1
        listed = run_storyd("claims", "--json", env=env)
        assert [json.loads(x)["owner"] for x in listed.stdout.splitlines()] == ["ci"]
        gone = run_storyd("release", *target, "--owner", "ci", env=env)
        assert gone.returncode == 0 and b"released" in gone.stdout
        assert run_storyd("claim", *target, "--owner", "bob", env=env).returncode == 0
