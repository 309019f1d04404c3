"""Issue 22: publishing to NATS JetStream, with real `nats-server -js` and real daemons.

Two daemons with different machine names publish to one server; the server stops and
comes back mid-run; every event reaches the stream once and the KV bucket holds the
newest summary of every unit. Bad input (an unreachable URL, a server without
JetStream, a refused connection, a bucket made with other settings) is one log line
and one doctor line while the daemon keeps answering.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest
from cli_harness import STORYD, run_storyd_cli
from daemon_harness import EventStream, wait_for
from epic_state_harness import write_epic
from nats_harness import NEEDS_NATS, fleet_config, free_port

EPIC = "0007"
REMOTE = "https://ci-token@example.com/team/app.git"
PUBLIC = "https://example.com/team/app.git"
SHA = "a" * 40


def _task(done: bool) -> dict[str, object]:
    if done:
        return {"status": "done", "commitSha": SHA, "completedAt": "2025-01-01T00:00:00Z"}
    return {"status": "pending"}


def _story(*done: bool) -> dict[str, object]:
    return {"tasks": {f"TASK-{i + 1}": _task(d) for i, d in enumerate(done)}}


def _workspace(path: Path, stories: dict[str, object]) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "remote", "add", "origin", REMOTE], check=True)
    write_epic(path, EPIC, stories)
    return path


def _config(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[notify]\ndesktop = false\n\n{text}', encoding="utf-8")
    return path


def _kv(url: str) -> dict[str, dict[str, object]]:
    """The bucket's live keys and values, read with nats-py."""
    import nats

    from storyd.fleet.reader import kv_entries

    async def read() -> dict[str, dict[str, object]]:
        nc = await nats.connect(url)
        try:
            kv = await nc.jetstream().key_value("storyd-units")
            found = await kv_entries(kv, ">")
            return {key: orjson.loads(entry.value) for key, entry in found.items()}
        finally:
            await nc.close()

    return asyncio.run(read())


def _stream(url: str) -> list[tuple[str, dict[str, object]]]:
    """Every message stored in the events stream (message id, payload), with no dedup."""
    import nats

    async def read() -> list[tuple[str, dict[str, object]]]:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            info = await js.stream_info("STORYD_EVENTS")
            found = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                msg = await js.get_msg("STORYD_EVENTS", seq)
                found.append(((msg.headers or {}).get("Nats-Msg-Id", ""), orjson.loads(msg.data)))
            return found
        finally:
            await nc.close()

    return asyncio.run(read())


def _fleet(daemon: object) -> dict[str, object]:
    return daemon.stats()["fleet"]  # type: ignore[attr-defined,no-any-return]


def _identity(event: dict[str, object]) -> tuple[object, ...]:
    finding = event.get("finding") or {}
    assert isinstance(finding, dict)
    return (event["event"], event["unit"], event["clock"], finding.get("code"))


@NEEDS_NATS
@pytest.mark.slow
def test_two_machines_through_an_outage(tmp_path: Path, spawn_daemon, nats_server) -> None:
    server = nats_server()
    ws_a = _workspace(tmp_path / "a", {"story-0007-0001": _story(True, False),
                                       "story-0007-0002": _story(True, True)})
    ws_b = _workspace(tmp_path / "b", {"story-0007-0001": _story(True, False),
                                       "story-0007-0002": _story(False, False),
                                       "story-0007-0003": _story(True, False)})
    cfg_a = _config(tmp_path, "alpha", fleet_config(server.url, "alpha"))
    cfg_b = _config(tmp_path, "beta", fleet_config(server.url, "beta"))
    alpha = spawn_daemon([ws_a], args=["--config", str(cfg_a)], socket_path=tmp_path / "a.sock")
    beta = spawn_daemon([ws_b], args=["--config", str(cfg_b)], socket_path=tmp_path / "b.sock")

    def units_of(machine: str) -> dict[str, dict[str, object]]:
        return {str(v["unit"]): v for k, v in _kv(server.url).items()
                if k.startswith(f"u.{machine}.")}

    wait_for(lambda: len(units_of("alpha")) == 2 and len(units_of("beta")) == 3, 10,
             "both machines' summaries in the bucket")
    first = units_of("alpha")["story-0007-0001"]
    assert first["remote"] == PUBLIC  # the token in the remote URL never leaves the machine
    assert (first["done"], first["total"], first["machine"]) == (1, 2, "alpha")
    assert "env" not in orjson.dumps(first).decode().lower()

    with EventStream(alpha) as seen:
        # online: story 1 finished on alpha
        write_epic(ws_a, EPIC, {"story-0007-0001": _story(True, True),
                                "story-0007-0002": _story(True, True)})
        wait_for(lambda: units_of("alpha")["story-0007-0001"]["done"] == 2, 10, "story 1 done")

        server.stop()
        wait_for(lambda: _fleet(alpha)["connected"] is False, 10, "alpha to see the outage")
        # offline: story 3 appears on alpha, story 2 goes away; alpha keeps answering
        write_epic(ws_a, EPIC, {"story-0007-0001": _story(True, True),
                                "story-0007-0003": _story(True, False)})
        seen.wait(lambda e: e["event"] == "removed", timeout=10, message="story 2 removed")
        assert {u["unit"] for u in alpha.units()} == {"story-0007-0001", "story-0007-0003"}
        assert _fleet(alpha)["backlog"] > 0

        server.start()
        wait_for(lambda: _fleet(alpha)["connected"] and _fleet(alpha)["backlog"] == 0, 20,
                 "alpha to publish its backlog after the server came back")
        emitted = seen.since()

    stored = [(i, m) for i, m in _stream(server.url) if m["machine"] == "alpha"]
    ids = Counter(i for i, _ in stored)
    assert all(n == 1 for n in ids.values()), f"duplicated message ids: {ids.most_common(3)}"
    assert Counter(_identity(m) for _, m in stored) == Counter(_identity(e) for e in emitted)
    assert {e["event"] for e in emitted} >= {"changed", "drift", "removed"}

    alpha_units = units_of("alpha")
    assert set(alpha_units) == {"story-0007-0001", "story-0007-0003"}  # story 2 deleted
    assert alpha_units["story-0007-0001"]["resumePoint"] == "all-done"
    assert alpha_units["story-0007-0003"]["done"] == 1

    status = run_storyd_cli("fleet", "status", "--json", "--config", str(cfg_a),
                            env=alpha.env)
    assert status.returncode == 0, status.stderr
    body = orjson.loads(status.stdout)
    flags = {(f["unit"], f["flag"]) for f in body["flags"]}
    assert ("story-0007-0001", "finished-and-open") in flags
    assert ("story-0007-0003", "in-flight-twice") in flags
    assert {u["machine"] for u in body["units"]} == {"alpha", "beta"}

    events = run_storyd_cli("fleet", "events", "--since", "all", "--no-follow", "--json",
                            "--machine", "alpha", "--config", str(cfg_a), env=alpha.env)
    assert events.returncode == 0, events.stderr
    lines = [orjson.loads(x) for x in events.stdout.splitlines()]
    assert len(lines) == len(stored)

    beta.stop()  # beta goes silent: after three heartbeats it is stale, not live
    _wait_stale(cfg_a, alpha.env, "beta", live="alpha")


def _wait_stale(cfg: Path, env: dict[str, str], stale: str, live: str) -> None:
    def stale_now() -> bool:
        done = run_storyd_cli("fleet", "status", "--json", "--config", str(cfg), env=env)
        found = orjson.loads(done.stdout)
        return found["machines"][stale]["stale"] and not found["flags"] and all(
            u["stale"] == (u["machine"] == stale) for u in found["units"])

    wait_for(stale_now, 15, f"{stale} to show as stale")
    text = run_storyd_cli("fleet", "status", "--config", str(cfg), env=env)
    assert f"{stale} (stale".encode() in text.stdout and f"{live} (live".encode() in text.stdout


@NEEDS_NATS
@pytest.mark.slow
@pytest.mark.parametrize("case", ["unreachable", "no-jetstream", "refused", "bucket"])
def test_bad_server_is_one_line_and_the_daemon_answers(
    case: str, tmp_path: Path, spawn_daemon, nats_server
) -> None:
    if case == "unreachable":
        url, expected = f"nats://127.0.0.1:{free_port()}", "cannot reach"
    elif case == "no-jetstream":
        url, expected = nats_server(jetstream=False).url, "has no JetStream"
    elif case == "refused":
        url, expected = nats_server(args=("--auth", "s3cret-token")).url, "refused"
    else:
        server = nats_server()
        _make_bucket(server.url, history=5)
        url, expected = server.url, "exists with history 5"
    ws = _workspace(tmp_path / "ws", {"story-0007-0001": _story(False)})
    cfg = _config(tmp_path, "m", fleet_config(url, "m1"))
    daemon = spawn_daemon([ws], args=["--config", str(cfg)])

    def failed_twice() -> bool:
        state = _fleet(daemon)
        return expected in str(state["lastError"]) and bool(state["lastErrorAt"])

    first = wait_for(failed_twice, 15, f"the error {expected!r}") and _fleet(daemon)["lastErrorAt"]
    wait_for(lambda: _fleet(daemon)["lastErrorAt"] != first, 40, "a retry")
    lines = [e for e in daemon.log_events() if e.get("event") == "fleet_unavailable"]
    assert len(lines) == 1 and expected in str(lines[0]["error"]), lines
    assert "Traceback" not in daemon.log_text()
    assert daemon.units() and daemon.request({"op": "ping"})["ok"] is True

    doctor = run_storyd_cli("doctor", "--config", str(cfg), "--socket", str(daemon.socket),
                            "--workspace", str(ws), env=daemon.env)
    fleet_lines = [x for x in doctor.stdout.decode().splitlines() if "fleet:" in x]
    assert len(fleet_lines) == 1 and expected in fleet_lines[0], doctor.stdout


def _make_bucket(url: str, history: int) -> None:
    import nats
    from nats.js.api import KeyValueConfig

    async def make() -> None:
        nc = await nats.connect(url)
        await nc.jetstream().create_key_value(KeyValueConfig(bucket="storyd-units",
                                                             history=history))
        await nc.close()

    asyncio.run(make())


@NEEDS_NATS
@pytest.mark.slow
def test_backlog_overflow_is_counted(tmp_path: Path, spawn_daemon) -> None:
    ws = _workspace(tmp_path / "ws", {"story-0007-0001": _story(False)})
    cfg = _config(tmp_path, "m", fleet_config(f"nats://127.0.0.1:{free_port()}", "m1",
                                              backlog=10))
    daemon = spawn_daemon([ws], args=["--config", str(cfg)])
    with EventStream(daemon) as seen:
        for n in range(1, 13):  # each write: a changed event (the first also a drift)
            write_epic(ws, EPIC, {"story-0007-0001": _story(*(i < n for i in range(12)))})
            seen.wait(lambda e, n=n: e["event"] == "changed" and e["done"] == n, timeout=5,
                      message=f"{n} done")
        emitted = len(seen.since())
    assert emitted > 10
    state = wait_for(lambda: (s := _fleet(daemon))["dropped"] == emitted - 10 and s, 5, "drops")
    assert state["backlog"] == 10 and state["connected"] is False


def test_config_refuses_secrets_and_bad_values(tmp_path: Path, isolated_env) -> None:
    bad = _config(tmp_path, "bad", '[fleet]\nurl = "nats://user:pw@host:4222"\n'
                  'machine = "a.b"\nbacklog = 1\nheartbeat = 0\nsecret = "x"\n')
    done = subprocess.run([STORYD, "config", "check", "--config", str(bad)],
                          capture_output=True, text=True, env=isolated_env, check=False)
    assert done.returncode == 78
    for field in ("fleet.url", "fleet.machine", "fleet.backlog", "fleet.heartbeat",
                  "fleet.secret"):
        assert f": {field}: " in done.stdout, done.stdout
    assert "use credentials = FILE" in done.stdout
    good = _config(tmp_path, "good", '[fleet]\nurl = "nats://host:4222"\nmachine = "ci-7"\n'
                   'credentials = "/nowhere/ci.creds"\n')
    shown = subprocess.run([STORYD, "config", "show", "--config", str(good)],
                           capture_output=True, text=True, env=isolated_env, check=False)
    assert '[fleet]\nbacklog = 10000\ncredentials = "/nowhere/ci.creds"' in shown.stdout
    checked = subprocess.run([STORYD, "config", "check", "--config", str(good)],
                             capture_output=True, text=True, env=isolated_env, check=False)
    assert checked.returncode == 0
    assert "fleet.credentials: warning: /nowhere/ci.creds is not a file" in checked.stdout


def test_no_fleet_table_imports_no_nats(isolated_env) -> None:
    code = (
        "import sys\n"
        "from storyd.config import Config\n"
        "from storyd.server.assembly import assemble\n"
        "from storyd.server.service import Settings\n"
        "parts = assemble(Settings(staleness='mtime'), Config(), None, lambda on: None, '')\n"
        "assert parts.fleet is None\n"
        "parts.close_optional_parts()\n"
        "loaded = [m for m in sys.modules if m.startswith(('nats.', 'storyd.fleet'))]\n"
        "assert 'nats' not in sys.modules and not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=isolated_env, check=False)
    assert done.returncode == 0, done.stderr


def test_fleet_commands_without_a_url(tmp_path: Path, isolated_env) -> None:
    done = subprocess.run([STORYD, "fleet", "status"], capture_output=True, text=True,
                          env=isolated_env, check=False)
    assert done.returncode == 78 and "no [fleet] url" in done.stderr
    assert "Traceback" not in done.stderr
    usage = subprocess.run([STORYD, "fleet"], capture_output=True, text=True,
                           env=isolated_env, check=False)
    assert usage.returncode == 64 and "storyd fleet status" in usage.stderr


@pytest.mark.slow
@NEEDS_NATS
def test_a_resent_message_id_is_stored_once(nats_server) -> None:
    """Two publishers with one machine and instance send the same ids: the second
    run's events are the server's duplicates (what a resend after a lost ack is)."""
    import time

    from storyd.fleet.config import Fleet
    from storyd.fleet.publisher import Publisher

    server = nats_server()

    class Quiet:
        def __getattr__(self, _name: str) -> object:
            return lambda *args, **kwargs: None

    def run() -> dict[str, int]:
        publisher = Publisher(Fleet(url=server.url, machine="m1"), instance="feedf00d",
                              current=list, log=Quiet(), version="test")
        publisher.start()
        for n in range(5):
            publisher.offer({"event": "drift", "clock": f"feedf00d:{n}", "workspace": "/w",
                             "stateFile": "s.json", "unit": f"u{n}", "format": "epic",
                             "finding": {"detector": "git", "code": "c", "severity": "warning",
                                         "message": "m"}})
        deadline = time.monotonic() + 10
        while sum(publisher.counters[k] for k in ("events", "duplicates")) < 5:
            assert time.monotonic() < deadline, publisher.state()
            time.sleep(0.01)
        publisher.close()
        return publisher.counters

    assert (run()["events"], run()["duplicates"]) == (5, 5)
    stored = _stream(server.url)
    assert [i for i, _ in stored] == [f"m1.feedf00d.{n}" for n in range(1, 6)]


def test_flags_and_staleness() -> None:
    from storyd.fleet import view

    now = 1_000_000.0
    when = "1970-01-12T13:46:40.000Z"  # == now
    machines = {"a": {"when": when, "heartbeat": 30}, "b": {"when": when, "heartbeat": 30},
                "c": {"when": "1970-01-12T13:41:40.000Z", "heartbeat": 30}}  # 300 s ago

    def unit(machine: str, key: str, done: int, point: str, remote: str = PUBLIC) -> dict:
        return {"machine": machine, "remote": remote, "stateFile": "s.json", "unit": key,
                "done": done, "resumePoint": point, "when": when}

    units = [unit("a", "s1", 8, "all-done"), unit("b", "s1", 2, "t3"),      # finished, open
             unit("a", "s2", 1, "t2"), unit("b", "s2", 0, "t1"),            # in flight twice
             unit("a", "s3", 0, "t1"), unit("b", "s3", 0, "t1"),            # neither started
             unit("a", "s4", 1, "t2"), unit("c", "s4", 3, "t4"),            # c is stale
             unit("a", "s5", 1, "t2", "git@h:x.git"), unit("b", "s5", 1, "t2", "git@h:y.git")]
    shown_machines, shown = view.annotate(machines, units, now)
    assert [m for m, v in shown_machines.items() if v["stale"]] == ["c"]
    assert all(u["stale"] == (u["machine"] == "c") for u in shown)
    assert shown[-1]["machine"] == "c"  # stale units sort after the live ones
    found = {(f["unit"], f["flag"]) for f in view.flags(shown)}
    assert found == {("s1", "finished-and-open"), ("s2", "in-flight-twice")}


@pytest.mark.slow
@NEEDS_NATS
def test_a_resync_is_whole_while_events_arrive(nats_server) -> None:
    """1,000 summaries re-published while events keep arriving: every one goes out, and
    a change that arrives while the engine is read wins over the older snapshot."""
    import threading
    import time

    from storyd.fleet.config import Fleet
    from storyd.fleet.publisher import Publisher

    server = nats_server()

    class Quiet:
        def __getattr__(self, _name: str) -> object:
            return lambda *args, **kwargs: None

    def summary(n: int, done: int, generation: int) -> dict[str, object]:
        return {"workspace": "/w", "stateFile": "s.json", "unit": f"u{n:04d}", "format": "epic",
                "done": done, "total": 8, "resumePoint": "t", "findings": 0, "worst": None,
                "generation": generation, "error": None, "findingList": []}

    publisher: Publisher

    def events() -> None:
        for n in range(300):
            publisher.offer({"event": "drift", "clock": f"x:{n}", "workspace": "/w",
                             "stateFile": "s.json", "unit": "u0001", "format": "epic",
                             "generation": 2000 + n,
                             "finding": {"detector": "git", "code": f"c{n}",
                                         "severity": "info", "message": "m"}})
            time.sleep(0.001)

    def current() -> list[dict[str, object]]:
        # a newer change of u0000 arrives while the engine is being read
        publisher.offer({"event": "changed", **summary(0, 7, 5000)})
        threading.Thread(target=events, daemon=True).start()
        return [summary(n, 1, n + 1) for n in range(1000)]

    publisher = Publisher(Fleet(url=server.url, machine="m1"), instance="0ddba11",
                          current=current, log=Quiet(), version="test")
    publisher.start()
    try:
        wait_for(lambda: publisher.counters["events"] == 301, 20, "the events")
        kv = wait_for(lambda: len(found := _kv(server.url)) == 1001 and found, 20,
                      "1,000 units and a heartbeat in the bucket")
    finally:
        publisher.close()
    done = {v["unit"]: v["done"] for k, v in kv.items() if k.startswith("u.")}
    assert done["u0000"] == 7 and done["u0999"] == 1
