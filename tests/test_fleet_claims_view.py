"""A unit's claim in the fleet's summaries (issue 45): machine A's publisher puts each
unit's claim (holder, token, lease end, live or abandoned) into its summary, so machine
B's `storyd fleet status` and `storyd top --fleet` show A's holder, and a release is
seen there too. Two real daemons (--config with [fleet]) on a real nats-server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_harness import STORYD
from daemon_harness import wait_for
from epic_state_harness import EPIC, story_id
from nats_harness import NEEDS_NATS, fleet_config
from test_top_fleet import _workspace

pytestmark = [pytest.mark.slow, NEEDS_NATS]

UNIT = "story-0049-0001"


def _storyd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STORYD, *args], capture_output=True, text=True, timeout=60,
                          check=False, env={**env, "COLUMNS": "160"})  # fmt: skip


def test_machine_b_sees_machine_a_holder(tmp_path: Path, spawn_daemon: Any, nats_server: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    server = nats_server()
    daemons, spaces, configs = {}, {}, {}
    for machine in ("alpha", "beta"):
        configs[machine] = cfg = tmp_path / f"{machine}.toml"
        cfg.write_text("[notify]\ndesktop = false\n\n" + fleet_config(server.url, machine))
        spaces[machine] = _workspace(tmp_path / machine / "ws", 1)
        monkeypatch.setenv("STORYD_CLAIMS", str(tmp_path / f"{machine}.claims.db"))
        daemons[machine] = spawn_daemon([spaces[machine]], args=["--config", str(cfg)],
                                        socket_path=tmp_path / f"{machine}.sock")  # fmt: skip
    beta_env = daemons["beta"].env

    def units() -> dict[str, dict[str, Any]]:
        done = _storyd(beta_env, "fleet", "status", "--json", "--config", str(configs["beta"]))
        assert done.returncode == 0, done.stderr
        return {f"{u['machine']}:{u['unit']}": u for u in json.loads(done.stdout)["units"]}

    wait_for(lambda: len(units()) == 2, 15, "both machines' units")
    assert not any("claim" in u for u in units().values())
    got = daemons["alpha"].request({"op": "claim", "workspace": str(spaces["alpha"]),
                                    "epicId": EPIC, "storyId": story_id(1),
                                    "owner": "alice", "ttl": 600})  # fmt: skip
    assert got["ok"], got
    token = got["claim"]["token"]  # type: ignore[index]

    def claimed() -> dict[str, Any] | None:
        return units()[f"alpha:{UNIT}"].get("claim")

    claim = wait_for(claimed, 10, "alpha's claim in beta's fleet view")
    assert (claim["owner"], claim["token"], claim["state"]) == ("alice", token, "live")
    assert "claim" not in units()[f"beta:{UNIT}"]
    frame = _storyd(beta_env, "top", "--fleet", "--once", "--url", server.url)
    assert frame.returncode == 0, frame.stderr
    row = next(x for x in frame.stdout.splitlines() if f"alpha:ws:{UNIT}" in x)
    assert f"alice #{token}" in row, frame.stdout
    text = _storyd(beta_env, "fleet", "status", "--config", str(configs["beta"])).stdout
    assert f"[alice #{token}" in text, text
    gone = daemons["alpha"].request({"op": "release", "workspace": str(spaces["alpha"]),
                                     "epicId": EPIC, "storyId": story_id(1),
                                     "owner": "alice"})  # fmt: skip
    assert gone["released"] is True, gone
    wait_for(lambda: claimed() is None, 10, "the release in beta's fleet view")
    assert os.path.exists(tmp_path / "alpha.claims.db")
    assert not os.path.exists(tmp_path / "beta.claims.db")
