"""A fleet unit's claims in this machine's claims log (issue 45): the grants, renewals
and releases this machine makes in the JetStream bucket are written to the local log as
the SQLite store writes its own, so `storyd history` shows them. Real nats-server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from agents_harness import demo_workspace
from cli_harness import STORYD
from epic_state_harness import EPIC, STORY
from nats_harness import NEEDS_NATS, fleet_config

pytestmark = [pytest.mark.slow, NEEDS_NATS]

REMOTE = "https://example.com/team/app.git"
UNIT = ["--epic-id", EPIC, "--story-id", STORY]


def _run(env: dict[str, str], ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STORYD, *args], env=env, cwd=ws, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_history_shows_the_fleet_grants(tmp_path: Path, nats_server) -> None:  # type: ignore[no-untyped-def]
    server = nats_server()
    ws = demo_workspace(tmp_path)
    subprocess.run(["git", "-C", str(ws), "remote", "add", "origin", REMOTE], check=True)
    config = tmp_path / "config" / "storyd"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(fleet_config(server.url, "alpha"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_STATE_HOME": str(tmp_path / "state"),
           "STORYD_CLAIMS": str(tmp_path / "claims.db")}  # fmt: skip
    env.pop("STORYD_SOCKET", None)
    target = ["--workspace", str(ws), *UNIT, "--owner", "alice"]
    first = _run(env, ws, "claim", *target, "--json")
    assert first.returncode == 0, first.stderr
    token = json.loads(first.stdout)["token"]
    again = _run(env, ws, "claim", *target, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["token"] == token, again.stderr
    import sqlite3

    with sqlite3.connect(env["STORYD_CLAIMS"]) as db:  # the bucket holds it, not this store
        assert db.execute("SELECT count(*) FROM claims").fetchone() == (0,)
    listed = [json.loads(x) for x in _run(env, ws, "claims", "--json").stdout.splitlines()]
    assert [c["owner"] for c in listed] == ["alice"], listed
    gone = _run(env, ws, "release", *target)
    assert gone.returncode == 0, gone.stderr
    out = _run(env, ws, "history", *UNIT)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"claim granted to alice (token {token})" in text, text
    assert f"claim renewed by alice (token {token})" in text, text
    assert f"claim released by alice (token {token})" in text, text
    entries = [json.loads(x) for x in _run(env, ws, "history", "--json", *UNIT).stdout.splitlines()]
    steps = [e["claim"] for e in entries if e.get("claim")]
    assert steps == ["granted", "renewed", "released"], entries
