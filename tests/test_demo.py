"""`storyd demo`, the README's main job: it serves the shipped demo and every query answers."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "daemon" / "demo"
Run = Callable[..., subprocess.CompletedProcess[bytes]]


@pytest.mark.slow
def test_demo_runs_every_query_and_stops_cleanly(
        run_storyd: Run, tmp_path: Path, isolated_env: dict[str, str]) -> None:
    """From any folder, without --workspace: the demo ships inside the package. It
    leaves nothing in the user's state folder (its history once stayed there)."""
    state = tmp_path / "state"
    env = dict(isolated_env, XDG_STATE_HOME=str(state), STORYD_HISTORY=str(state / "h.db"))
    done = run_storyd("demo", cwd=tmp_path, timeout=120, env=env)
    assert not state.exists(), sorted(str(p) for p in state.rglob("*"))
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    sections = out.split("\n$ ")
    titles = [s.split("\n", 1)[0] for s in sections[1:]]
    assert titles[0].startswith("storyd resume --story-id story-0049-0013")
    assert any(t.startswith("storyd epic") for t in titles)
    assert any(t.startswith("storyd reconcile") for t in titles)
    resume = sections[1]
    assert '"resumePoint":"phase-2-task-4"' in resume and "(exit 0)" in resume
    check = next(s for s in sections if s.startswith("storyd check"))
    assert "(exit 1)" in check and "unrecorded-commit/unrecorded" in check
    epic = next(s for s in sections if s.startswith("storyd epic"))
    assert "executable next: story-0049-0013, story-0049-0014" in epic
    reconcile = next(s for s in sections if s.startswith("storyd reconcile"))
    assert "(exit 1)" in reconcile  # changes proposed, nothing written
    assert "+          \"status\": \"DONE\"," in reconcile
    assert "daemon stopped (exit 0); its log and the workspace's copy are removed" in out


@pytest.mark.slow
def test_demo_keep_leaves_the_log_with_one_first_look_line(run_storyd: Run) -> None:
    done = run_storyd("demo", "--workspace", str(DEMO), "--keep", cwd=ROOT, timeout=120)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    last = out.rstrip().rsplit("\n", 1)[-1]
    log_path, _, ws = last.removeprefix("daemon stopped (exit 0); its log: ").partition(
        "; the workspace: ")
    try:
        assert Path(ws, "plans").is_dir(), last
        events = [orjson.loads(line) for line in Path(log_path).read_bytes().splitlines()]
        (first_look,) = [e for e in events if e["event"] == "first_look"]
        assert first_look["at_start"] is True and first_look["units_out_of_step"] >= 1
        assert not [e for e in events if e["event"] == "drift"], "a drift line per finding"
    finally:
        shutil.rmtree(Path(log_path).parent, ignore_errors=True)


def test_a_folder_without_plans_is_named(run_storyd: Run, tmp_path: Path) -> None:
    done = run_storyd("demo", "--workspace", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 64
    assert done.stderr.decode() == (
        f"storyd demo: {tmp_path}: no demo workspace here (no plans/ folder); "
        "pass --workspace DIR\n")


@pytest.mark.slow
def test_the_wheel_carries_every_file_of_the_demo(built_wheel: Path) -> None:
    """What `pip install .` and `pipx install` install: the demo, hidden folders too."""
    import zipfile

    names = set(zipfile.ZipFile(built_wheel).namelist())
    shipped = {f"storyd/demo/{p.relative_to(DEMO).as_posix()}"
               for p in DEMO.rglob("*") if p.is_file()}
    assert any("/.claude/" in name for name in shipped)
    assert shipped <= names, sorted(shipped - names)
