"""Claims where `status` does not reach alone (issue 45): `storyd list` carries each unit's
claim (directly and through a real daemon), and a daemon started with `--config OTHER`
claims with that file's `[claims] ttl`, not the usual path's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agents_harness import demo_workspace
from cli_harness import STORYD
from epic_state_harness import EPIC, STORY

UNIT = {"epicId": EPIC, "storyId": STORY}


def _listed(env: dict[str, str] | None, ws: Path, *args: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run([STORYD, "list", "--workspace", str(ws), *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    units = [json.loads(line) for line in done.stdout.splitlines()]
    return {str(u["unit"]): u for u in units}


@pytest.mark.slow
@pytest.mark.parametrize("door", ["direct", "daemon"])
def test_list_carries_the_claim(door: str, store: Path, tmp_path: Path,
                                spawn_daemon: Any) -> None:  # fmt: skip
    ws = demo_workspace(tmp_path)
    claimed = subprocess.run(
        [STORYD, "claim", "--workspace", str(ws), "--epic-id", EPIC, "--story-id", STORY,
         "--owner", "alice", "--ttl", "300", "--json"],
        capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert claimed.returncode == 0, claimed.stderr
    token = json.loads(claimed.stdout)["token"]
    if door == "daemon":
        daemon = spawn_daemon([ws])
        units = _listed(daemon.env, ws)
    else:
        units = _listed(None, ws, "--direct")
    held = [u for u in units.values() if "claim" in u]
    assert len(held) == 1, units
    claim = held[0]["claim"]
    assert (claim["owner"], claim["token"], claim["state"]) == ("alice", token, "live")
    assert len(units) > 1  # the other units carry none


@pytest.mark.slow
def test_a_daemon_claims_with_its_own_config(store: Path, tmp_path: Path,
                                             spawn_daemon: Any) -> None:  # fmt: skip
    ws = demo_workspace(tmp_path)
    other = tmp_path / "other.toml"
    other.write_text("[notify]\ndesktop = false\n\n[claims]\nttl = 123\n")
    daemon = spawn_daemon([ws], args=["--config", str(other)])
    (Path(daemon.env["XDG_CONFIG_HOME"]) / "storyd").mkdir(parents=True, exist_ok=True)
    (Path(daemon.env["XDG_CONFIG_HOME"]) / "storyd" / "config.toml").write_text(
        "[claims]\nttl = 777\n")  # the usual path: not the daemon's
    got = daemon.request({"op": "claim", "workspace": str(ws), "owner": "a", **UNIT})
    assert got["ok"], got
    claim = got["claim"]
    assert isinstance(claim, dict)
    from storyd.core.isotime import parse_epoch

    lease = parse_epoch(str(claim["expires"])) - parse_epoch(str(claim["granted"]))  # type: ignore[operator]
    assert abs(lease - 123) < 1, claim
