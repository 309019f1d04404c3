"""The same answer either way (issue 40 item 5): hooks, `check` and `status` give the same
findings from a real daemon and from a direct read, at every instant.

- A state file the session broke after making commits: the daemon still serves the last
  good units, but builds no finding on them (no block, no repair that would exit 65);
  both paths report the parse error once, with the same message.
- A rebase stopped on a conflict: every daemon answer, from the first one a few
  milliseconds after git stops, carries the direct read's operation-in-progress finding
  and none of the detectors' findings (the direct read runs none then); once the rebase
  is aborted, the first answer is the direct read's again.

Each of these failed on a40ee61 (the stop blocked from the last good version; the daemon's
check warned during the rebase and lacked the finding for its first 2 s).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, run_hook
from cli_harness import BIN, run_storyd_cli
from daemon_harness import DaemonProcess, wait_for
from git_harness import GitWorkspace, rebase_stops

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
EPIC_STATE = "plans/epic-0049/execution-state.json"
OPERATION = ("git-operation", "operation-in-progress")
Findings = dict[tuple[str, str], list[tuple[str, str, str, str]]]


def _findings(units: list[dict[str, object]]) -> Findings:
    """Each unit's findings, as comparable tuples (detector, code, severity, message)."""
    found: Findings = {}
    for unit in units:
        listed = unit.get("findingList") or []
        assert isinstance(listed, list)
        found[(str(unit["stateFile"]), str(unit["unit"]))] = sorted(
            (str(f["detector"]), str(f["code"]), str(f["severity"]), str(f["message"]))
            for f in listed
        )
    return found


def _status(env: dict[str, str], ws: Path, *extra: str) -> dict[str, object]:
    done = run_storyd_cli("status", "--json", "--quiet", "--workspace", str(ws), *extra,
                          env=env, cwd=ws)  # fmt: skip
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    body = orjson.loads(done.stdout)
    assert isinstance(body, dict)
    return body


def _check(env: dict[str, str], ws: Path, *extra: str) -> tuple[int, str]:
    done = run_storyd_cli("check", "--quiet", "--workspace", str(ws), *extra, env=env, cwd=ws)
    assert b"Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout.decode()


# -- a state file the session broke -----------------------------------------------------------


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


@pytest.fixture
def broken(tmp_path: Path) -> tuple[Path, AgentsEnv]:
    """storyd demo's workspace; a session began before TASK-0049-0013-004's commit, made
    it, then left the epic's state file torn mid-write (it no longer parses)."""
    ws, env = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    _git(ws, "reset", "-q", "HEAD~1")  # the task's work not yet committed
    began = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                     env.env)  # fmt: skip
    assert began.returncode == 0 and b"Traceback" not in began.stderr, began.stderr
    _git(ws, "add", "work")
    _git(ws, "commit", "-q", "-m", "TASK-0049-0013-004: work landed in this session")
    return ws, env


def _tear(ws: Path) -> None:
    state = ws / EPIC_STATE
    state.write_bytes(state.read_bytes()[: len(state.read_bytes()) // 2])


def _reported(check: tuple[int, str]) -> tuple[int, list[str]]:
    """check's exit code and problem lines, less what only a cache can say (how many last
    good units it serves, and so the unit count)."""
    code, text = check
    lines = [re.sub(r" \(serving \d+ last good units?( since \S+)?\)$", "", line)
             for line in text.splitlines()[:-1]]  # fmt: skip
    return code, lines


def test_a_broken_state_file_is_reported_alike_and_never_blocks_a_stop(
    spawn_daemon: Spawn, broken: tuple[Path, AgentsEnv]
) -> None:
    ws, env = broken
    daemon = spawn_daemon([ws])
    denv = dict(daemon.env, XDG_STATE_HOME=env.env["XDG_STATE_HOME"])
    wait_for(lambda: any(u["unit"] == "story-0049-0013" for u in daemon.units(ws)), 20,
             "the daemon to read the epic")  # fmt: skip
    _tear(ws)
    wait_for(lambda: daemon.stats()["unreadable"], 20, "the daemon to see the torn file")

    payload = hook_payload("Stop", ws, stop_hook_active=False)
    served = run_hook("stop", payload, denv)
    assert served.returncode == 0 and b"Traceback" not in served.stderr, served.stderr
    assert served.stdout == b"", served.stdout.decode()  # no block from the last good units
    launched = subprocess.run([str(BIN / "storyd-hook"), "stop"], input=orjson.dumps(payload),
                              env=denv, cwd="/", capture_output=True, timeout=60, check=False)
    assert (launched.returncode, launched.stdout) == (0, b""), launched  # the `hook` op's

    via_daemon = _status(denv, ws)
    assert via_daemon["source"] == "daemon"
    [torn] = via_daemon["unreadable"]  # type: ignore[misc]
    assert torn["stateFile"] == EPIC_STATE and torn["units"] == 3, torn
    stale = [u for u in via_daemon["units"] if u["stateFile"] == EPIC_STATE]  # type: ignore[attr-defined]
    assert len(stale) == 3  # the last good units are served ...
    for unit in stale:  # ... marked, with nothing built on them
        assert unit["stale"] == "file unreadable" and unit["findingList"] == [], unit
    daemon_check = _check(denv, ws)

    daemon.stop()
    alone = run_hook("stop", payload, env.env)
    assert (alone.returncode, alone.stdout) == (served.returncode, served.stdout)
    direct = _status(env.env, ws)
    assert direct["source"] == "direct"
    [read] = direct["unreadable"]  # type: ignore[misc]
    assert (read["stateFile"], read["error"]) == (torn["stateFile"], torn["error"])
    kept = [u for u in via_daemon["units"] if u["stateFile"] != EPIC_STATE]  # type: ignore[attr-defined]
    assert _findings(kept) == _findings(direct["units"])  # type: ignore[arg-type]
    assert _reported(daemon_check) == _reported(_check(env.env, ws, "--direct"))
    assert daemon_check[0] == 1 and "UNREADABLE" in daemon_check[1]


# -- a rebase stopped on a conflict ----------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> GitWorkspace:
    """T3 committed but still PENDING (a warning), and a `side` branch whose rebase onto
    stops on a conflict (git_harness.rebase_stops)."""
    return rebase_stops(tmp_path / "ws")


def _listed(daemon: DaemonProcess, ws: Path) -> Findings:
    answer = daemon.request({"op": "list", "workspace": str(ws), "detail": True})
    assert answer["ok"] is True, answer
    return _findings(answer["units"])  # type: ignore[arg-type]


def test_a_stopped_rebase_is_said_alike_from_its_first_instant(
    spawn_daemon: Spawn, repo: GitWorkspace
) -> None:
    ws = repo.path
    daemon = spawn_daemon([ws])
    env = daemon.env
    before = _status(env, ws, "--direct")
    wait_for(lambda: _listed(daemon, ws) == _findings(before["units"]), 20,  # type: ignore[arg-type]
             "the daemon's first check")  # fmt: skip
    assert _check(env, ws)[0] == 1  # T3's unrecorded commit: a warning on both paths

    stopped = repo.run("rebase", "side")
    first = _listed(daemon, ws)  # within milliseconds of git stopping
    quick = [(time.monotonic(), _listed(daemon, ws)) for _ in range(30)]
    assert stopped.returncode != 0 and (ws / ".git" / "rebase-merge").is_dir(), stopped
    during = _findings(_status(env, ws, "--direct")["units"])  # type: ignore[arg-type]
    assert all(OPERATION in [f[:2] for f in found] for found in during.values()), during
    assert first == during
    assert [found for _, found in quick] == [during] * 30
    for _ in range(10):  # check, alternately from the daemon and read here: byte for byte
        via_daemon, direct = _check(env, ws), _check(env, ws, "--direct")
        assert via_daemon == direct and direct[0] == 0, (via_daemon, direct)

    repo.git("rebase", "--abort")
    after = _listed(daemon, ws)  # the operation's end, answered at once
    assert after == _findings(_status(env, ws, "--direct")["units"])  # type: ignore[arg-type]
    assert after == _findings(before["units"])  # type: ignore[arg-type]
    daemon.stop()
