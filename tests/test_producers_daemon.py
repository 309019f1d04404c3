"""The producers' newer shapes through a real daemon: the same answers as --direct.

Sequential epics (`storyd epic`), the session whose current_step passed over Governance,
and the autodev pointer with an extra field and a workspace flow table.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess
from format_harness import copy_fixture

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def same_via_daemon(proc: DaemonProcess, ws: Path, *argv: str) -> bytes:
    """Ask the daemon (it must answer: the request counter moves), then --direct; equal."""
    before = proc.stats()["requests"]
    via = run_storyd_cli(*argv, "--timeout", "5000", env=proc.env, cwd=ws)
    assert proc.stats()["requests"] > before  # type: ignore[operator]
    direct = run_storyd_cli(*argv, "--direct", env=proc.env, cwd=ws)
    assert via.returncode == direct.returncode == 0, (via.stderr, direct.stderr)
    via_out, direct_out = via.stdout, direct.stdout
    if b'"source"' in via_out:  # --detail says where the answer came from
        via_out = json.dumps({**json.loads(via_out), "source": "-"}).encode()
        direct_out = json.dumps({**json.loads(direct_out), "source": "-"}).encode()
    assert via_out == direct_out
    return via.stdout


def test_sequential_epic_via_daemon(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    target = ws / "plans" / "epic-0059" / "execution-state.json"
    target.parent.mkdir(parents=True)
    shutil.copyfile(FIXTURES / "epic-real" / "newer" / "epic-0059-sequential.json", target)
    proc = spawn_daemon([ws])
    out = same_via_daemon(proc, ws, "epic", "--epic-id", "59", "--json", "--workspace", str(ws))
    assert json.loads(out)["executable"] == ["story-0059-0001"]


def test_session_passed_over_governance_via_daemon(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = copy_fixture(FIXTURES / "session" / "real-step-4-governance-pending", tmp_path / "ws")
    proc = spawn_daemon([ws])
    argv = ("resume", "--state-file", "agent-output/nordic-foods/00-session-state.json",
            "--detail", "--staleness", "mtime")
    detail = json.loads(same_via_daemon(proc, ws, *argv))
    assert detail["envelope"]["resumePoint"] == "step-3_5"
    assert "prerequisite-pending" in {f["code"] for f in detail["findings"]}


def test_autodev_extra_field_and_flow_table_via_daemon(
    spawn_daemon: Spawn, tmp_path: Path
) -> None:
    ws = copy_fixture(FIXTURES / "autodev" / "greenfield-plan", tmp_path / "ws")
    state = ws / "_docs" / "_autodev_state.md"
    state.write_text(state.read_text().rstrip("\n") + " tracker: jira\n")
    flow = ws / ".claude" / "skills" / "autodev" / "flows" / "greenfield.md"
    flow.parent.mkdir(parents=True)
    rows = "".join(f"| {n} | step {n} |\n" for n in ["1", "2", "3", "4", "4.5", "5"])
    flow.write_text("| Step | Name |\n|---|---|\n" + rows)
    proc = spawn_daemon([ws])
    detail = json.loads(same_via_daemon(proc, ws, "resume", "--state-file",
                                        "_docs/_autodev_state.md", "--detail"))
    assert {f["code"] for f in detail["findings"]} == {"extra-field", "flow-table"}
    assert detail["envelope"]["tasksPending"] == ["step-3", "step-4", "step-4.5", "step-5"]
    status = run_storyd_cli("status", "--workspace", str(ws), "--json", env=proc.env)
    assert b'"tracker":"jira"' in status.stdout.replace(b" ", b"")
