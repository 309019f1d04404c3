"""Claims across machines (issue 45, item 4), with a real `nats-server -js`.

Two "machines" (configurations with different `[fleet] machine` names, each with its own
clone of one repository) x 8 claimant processes race on the same units while the server
is killed and started again on the same port and store: one winner per round, and every
grant a claimant was told of is in the bucket. A machine that cannot reach the server
refuses a fleet unit (75, one line) and still claims a workspace without a remote; a
claim is seen from the other machine within a second; a stale token is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from daemon_harness import wait_for
from nats_harness import NEEDS_NATS, NatsServer, fleet_config, free_port
from race_gate import gated

from storyd.core import switches

RACER = str(Path(__file__).with_name("claims_fleet_racer.py"))
REMOTE = "https://ci-token@example.com/team/app.git"
ROUNDS = int(os.environ.get("STORYD_FLEET_RACE_ROUNDS", "40"))
PER_MACHINE = 8

pytestmark = NEEDS_NATS


def _machine(root: Path, name: str, url: str, remote: str | None = REMOTE) -> dict[str, str]:
    """A machine: its configuration home and its clone; the environment of its processes."""
    home = root / name
    (home / "config" / "storyd").mkdir(parents=True)
    (home / "config" / "storyd" / "config.toml").write_text(fleet_config(url, name))
    ws = home / "clone"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    if remote:
        subprocess.run(["git", "-C", str(ws), "remote", "add", "origin", remote], check=True)
    (ws / "state.json").write_text("{}")
    return {**os.environ, "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_STATE_HOME": str(home / "state"), "STORYD_CLAIMS": str(home / "claims.db"),
            "WS": str(ws)}  # fmt: skip


def _bucket(url: str) -> dict[str, dict[str, object]]:
    """Every claim in the bucket by unit, read with nats-py."""
    import nats

    async def read() -> dict[str, dict[str, object]]:
        nc = await nats.connect(url)
        try:
            kv = await nc.jetstream().key_value("storyd-claims")
            found = {}
            for key in await kv.keys():
                if key.startswith("c."):
                    for c in orjson.loads((await kv.get(key)).value)["claims"]:
                        found[c["unit"]] = c
            return found
        finally:
            await nc.close()

    return asyncio.run(read())


def _holder(stored: dict[str, object] | None) -> tuple[str, object] | None:
    """`machine/owner` and token of a claim in the bucket."""
    return None if stored is None else (f"{stored['machine']}/{stored['owner']}", stored["token"])


def _claim(env: dict[str, str], *args: str, unit: str = "u") -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "storyd", "claim", "--workspace", env["WS"], "--state-file",
            "state.json", "--unit", unit, "--json", *args]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30,
                          check=False)  # fmt: skip


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """This process as a machine: switch its configuration home; the bucket's connection
    closed and the process state reset afterwards."""

    def become(env: dict[str, str]) -> None:
        for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "STORYD_CLAIMS"):
            monkeypatch.setenv(name, env[name])

    switches.reset()
    yield become
    for store in getattr(switches.CONFIG.fleet_claims, "stores", {}).values():
        store.close()
    switches.reset()


@pytest.mark.slow
def test_two_machines_race_through_a_server_restart(tmp_path: Path) -> None:
    server = NatsServer(tmp_path).start()
    try:
        machines = [_machine(tmp_path, name, server.url) for name in ("alpha", "beta")]
        gate = tmp_path / "gate"
        commands = [([sys.executable, RACER, str(gate), str(ROUNDS), f"p{i}", env["WS"]], env)
                    for env in machines for i in range(PER_MACHINE)]  # fmt: skip
        with gated(gate, commands) as racers:
            first = racers[0].stdout
            assert first is not None
            seen = [first.readline() for _ in range(ROUNDS // 3)]  # a third of the way
            assert all(seen), "a racer ended early"
            server.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            server.proc.wait(10)  # type: ignore[union-attr]
            server.start()  # same port, same store
            outs = [racer.communicate(timeout=300) for racer in racers]
        outs[0] = (b"".join(seen) + outs[0][0], outs[0][1])
        wins: dict[int, list[tuple[str, int]]] = {}
        offline = 0
        for n, (racer, (out, err)) in enumerate(zip(racers, outs, strict=True)):
            assert racer.returncode == 0, err.decode()
            for line in out.decode().splitlines():
                kind, *rest = line.split()
                offline += kind == "offline"
                if kind == "won":
                    owner = f"{'alpha' if n < PER_MACHINE else 'beta'}/p{n % PER_MACHINE}"
                    wins.setdefault(int(rest[0]), []).append((owner, int(rest[1])))
        doubles = {n: w for n, w in wins.items() if len(w) > 1}
        nobody = [n for n in range(ROUNDS) if n not in wins]
        assert (doubles, nobody) == ({}, [])
        assert offline > 0, "no racer met the restart: the test proved nothing about it"
        stored = _bucket(server.url)
        lost = {n: (w, stored.get(f"r{n}")) for n, [w] in wins.items()
                if _holder(stored.get(f"r{n}")) != w}  # fmt: skip
        assert lost == {}
        tokens = [c["token"] for c in stored.values()]
        assert len(set(tokens)) == len(tokens)  # one grant each, each its own token
    finally:
        server.stop()


@pytest.mark.slow
def test_offline_machine_refuses_fleet_units_and_keeps_local_ones(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    env = _machine(tmp_path, "alpha", url)
    refused = _claim(env)
    assert refused.returncode == 75
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "cannot reach nats://127.0.0.1" in refused.stderr
    assert "fleet units are claimed only through the server" in refused.stderr
    local = _machine(tmp_path, "solo", url, remote=None)  # no remote: this machine's only
    env_local = {**env, "WS": local["WS"]}
    granted = _claim(env_local)
    assert granted.returncode == 0, granted.stderr
    assert json.loads(granted.stdout)["token"] == 1


@pytest.mark.slow
def test_a_claim_is_seen_on_the_other_machine_within_a_second(tmp_path: Path, in_process,
                                                              ) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    from storyd.api import claims

    server = NatsServer(tmp_path).start()
    try:
        alpha, beta = (_machine(tmp_path, n, server.url) for n in ("alpha", "beta"))
        in_process(beta)
        assert claims.listing(beta["WS"]) == []  # connected, nothing claimed
        got = _claim(alpha, "--owner", "ann")
        done = time.monotonic()
        assert got.returncode == 0, got.stderr
        seen = wait_for(lambda: claims.listing(beta["WS"]), 1.0, "the claim on beta")
        assert time.monotonic() - done < 1.0
        assert (seen[0].owner, seen[0].token) == ("ann", json.loads(got.stdout)["token"])
        assert seen[0].place.workspace == beta["WS"]  # the same repository, beta's clone
        with pytest.raises(claims.Held, match="held by ann on alpha"):
            claims.claim(claims.Place(beta["WS"], "state.json", "u"), "ann", 60)
    finally:
        server.stop()


@pytest.mark.slow
def test_stale_token_is_refused_across_machines(tmp_path: Path, in_process) -> None:  # type: ignore[no-untyped-def]
    from storyd.api import claims

    server = NatsServer(tmp_path).start()
    try:
        alpha, beta = (_machine(tmp_path, n, server.url) for n in ("alpha", "beta"))
        old = json.loads(_claim(alpha, "--owner", "ann", "--ttl", "0.5").stdout)["token"]
        in_process(beta)
        place = claims.Place(beta["WS"], "state.json", "u")

        def take() -> claims.Claim | None:
            try:
                return claims.claim(place, "bob", 60)
            except claims.Held:
                return None

        newer = wait_for(take, 3.0, "ann's lease to end, by the server's clock")
        assert newer.token > old
        in_process(alpha)
        alpha_place = claims.Place(alpha["WS"], "state.json", "u")
        with pytest.raises(claims.Held, match=r"held by bob.*write refused"):
            claims.fence(alpha_place, "ann", old)
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("skew", [3600.0, -3600.0])
def test_a_skewed_clock_neither_takes_a_live_lease_nor_keeps_an_ended_one(
        tmp_path: Path, in_process, monkeypatch: pytest.MonkeyPatch, skew: float,
) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """Beta's clock an hour ahead (or behind): leases are judged by the server's clock."""
    from types import SimpleNamespace

    from storyd.api import claims
    from storyd.fleet import claims_kv

    server = NatsServer(tmp_path).start()
    try:
        alpha, beta = (_machine(tmp_path, n, server.url) for n in ("alpha", "beta"))
        fake = SimpleNamespace(time=lambda: time.time() + skew, monotonic=time.monotonic)
        monkeypatch.setattr(claims_kv, "time", fake)
        in_process(beta)
        place = claims.Place(beta["WS"], "state.json", "u")
        claims.listing(beta["WS"])  # beta has talked to the server: it knows its offset
        assert _claim(alpha, "--owner", "ann", "--ttl", "30").returncode == 0
        with pytest.raises(claims.Held, match="held by ann on alpha"):
            claims.claim(place, "bob", 60)  # an hour ahead, ann's 30 s look long over
        short = _claim(alpha, "--owner", "ann", "--ttl", "0.5", unit="v")
        assert short.returncode == 0, short.stderr
        started = time.monotonic()

        def take() -> claims.Claim | None:
            try:
                return claims.claim(claims.Place(beta["WS"], "state.json", "v"), "bob", 60)
            except claims.Held:
                return None

        wait_for(take, 3.0, "ann's 0.5 s lease to end on the server's clock")
        assert time.monotonic() - started < 0.5 + 1.0  # an hour behind: not an hour late
    finally:
        server.stop()


@pytest.mark.slow
def test_a_stale_holders_reconcile_is_refused_by_the_fleet(tmp_path: Path) -> None:
    """Ann's lease on alpha ended and bob took the story on beta: ann's `reconcile
    --apply` on alpha is refused naming bob, nothing written; bob's own goes through."""
    from cli_harness import run_storyd_cli
    from daemon_harness import reconcile_env, write_config
    from epic_state_harness import EPIC, STORY
    from git_harness import GitWorkspace

    server = NatsServer(tmp_path).start()
    try:
        repo = GitWorkspace(tmp_path / "ws").init()
        repo.commit("base", {"README": "hello\n"})
        subprocess.run(["git", "-C", str(repo.path), "remote", "add", "origin", REMOTE],
                       check=True)  # fmt: skip
        t1, _ = repo.tasks_commits(STORY, 2)
        state = repo.record({STORY: [t1]}, pending=1)
        alpha = reconcile_env(tmp_path / "alpha")
        write_config(tmp_path / "alpha", fleet_config(server.url, "alpha"))
        beta = reconcile_env(tmp_path / "beta")
        write_config(tmp_path / "beta", fleet_config(server.url, "beta"))

        def storyd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
            return run_storyd_cli(*args, "--workspace", str(repo.path), env=env, cwd=repo.path)

        story = ("--epic-id", EPIC, "--story-id", STORY)
        got = storyd(alpha, "claim", *story, "--owner", "ann", "--ttl", "0.5")
        assert got.returncode == 0, got.stderr
        wait_for(lambda: storyd(beta, "claim", *story, "--owner", "bob").returncode == 0, 5.0,
                 "ann's lease to end and bob to take the story on beta")  # fmt: skip
        before = state.read_bytes()
        refused = storyd(alpha, "reconcile", "--apply", "--owner", "ann")
        assert refused.returncode == 75, refused.stderr
        assert b"held by bob (token" in refused.stderr
        assert state.read_bytes() == before
        done = storyd(beta, "reconcile", "--apply", "--owner", "bob")
        assert done.returncode == 0, done.stderr
        assert state.read_bytes() != before
    finally:
        server.stop()


@pytest.mark.slow
def test_the_daemons_claim_op_uses_the_bucket_and_says_when_it_is_away(
        tmp_path: Path, spawn_daemon) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """A daemon with [fleet] grants through the bucket (another machine is refused), and
    with the server gone answers FLEET_OFFLINE (75) while it serves everything else."""
    from daemon_harness import write_config

    server = NatsServer(tmp_path).start()
    try:
        write_config(tmp_path, fleet_config(server.url, "alpha"))
        beta = _machine(tmp_path, "beta", server.url)
        daemon = spawn_daemon([beta["WS"]])
        ask = {"op": "claim", "workspace": beta["WS"], "stateFile": "state.json", "unit": "u",
               "owner": "ann"}  # fmt: skip
        granted = daemon.request(ask)
        assert granted["ok"], granted
        refused = _claim(beta, "--owner", "bob")
        assert refused.returncode == 75 and "held by ann on alpha" in refused.stderr
        server.stop()
        away = daemon.request({**ask, "unit": "v"})
        assert not away["ok"] and away["error"]["code"] == 75, away
        assert away["error"]["name"] == "FLEET_OFFLINE", away
        assert daemon.request({"op": "ping"})["ok"]
    finally:
        server.stop()


@pytest.mark.slow
def test_a_key_that_is_not_storyds_is_one_line(tmp_path: Path) -> None:
    """Someone else's value under a claim key: 78 naming the key and how to clear it."""
    import nats

    from storyd.fleet.claims_kv import key_of

    server = NatsServer(tmp_path).start()
    try:
        alpha = _machine(tmp_path, "alpha", server.url)
        assert _claim(alpha, "--owner", "ann").returncode == 0  # the bucket exists
        key = key_of("example.com/team/app", "state.json")

        async def spoil() -> None:
            nc = await nats.connect(server.url)
            try:
                await (await nc.jetstream().key_value("storyd-claims")).put(key, b"oops")
            finally:
                await nc.close()

        asyncio.run(spoil())
        got = _claim(alpha, "--owner", "bob", unit="v")
        assert got.returncode == 78, got.stderr
        assert got.stderr.count("\n") == 1 and f"nats kv del storyd-claims {key}" in got.stderr
    finally:
        server.stop()


@pytest.mark.slow
def test_the_hooks_never_reach_the_fleet(tmp_path: Path) -> None:
    """With [fleet] set and claims made on this machine, no hook imports `nats` or the
    fleet's package (they list and renew local claims only: `listing(fleet=False)`)."""
    from agents_harness import AgentsEnv, demo_workspace, hook_payload
    from cli_harness import lean_pythonpath

    from storyd.api.hooks.answer import EVENTS

    ws = demo_workspace(tmp_path)
    subprocess.run(["git", "-C", str(ws), "remote", "add", "origin", REMOTE], check=True)
    agents = AgentsEnv(tmp_path)
    unreachable = f"nats://127.0.0.1:{free_port()}"
    agents.config(f"roots = [{str(tmp_path)!r}]\n", extra=fleet_config(unreachable, "alpha"))
    env = dict(agents.env, PYTHONPATH=lean_pythonpath(), XDG_CACHE_HOME=str(tmp_path / "c"),
               STORYD_CLAIMS=str(tmp_path / "claims.db"))  # fmt: skip
    local = _machine(tmp_path, "solo", unreachable, remote=None)
    made = _claim({**env, "WS": local["WS"]}, "--owner", "session:s1")
    assert made.returncode == 0, made.stderr  # a local claim: the hooks look at claims now
    launcher = str(Path(__file__).resolve().parents[1] / "bin" / "storyd")
    payloads = {"session-start": hook_payload("SessionStart", ws, source="startup"),
                "stop": hook_payload("Stop", ws, stop_hook_active=False),
                "post-tool-use": hook_payload("PostToolUse", ws, tool_name="Edit",
                                              tool_input={"file_path": str(ws / "x")}),
                "session-end": hook_payload("SessionEnd", ws)}  # fmt: skip
    for event, payload in payloads.items():
        if event not in EVENTS:
            continue  # a hook this tree does not have yet
        done = subprocess.run([sys.executable, "-S", "-X", "importtime", launcher, "hook",
                               event], input=orjson.dumps({**payload, "session_id": "s1"}),
                              cwd="/", env=env, capture_output=True, timeout=60,
                              check=False)  # fmt: skip
        names = [line.rsplit("|", 1)[1].strip() for line in done.stderr.decode().splitlines()
                 if line.startswith("import time:")]  # fmt: skip
        assert "storyd.cli.commands.hook" in names, done.stderr.decode()[-2000:]
        fleet = [n for n in names if n.split(".")[0] == "nats" or n.startswith("storyd.fleet")]
        assert fleet == [], f"{event} imported {fleet}"
