"""Issue 33: every version of every unit kept, lost updates found (`regressed`), shown by
`storyd history` and the `history` op, across a restart, on a real daemon."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from agents_harness import hook_payload, run_hook
from cli_harness import run_storyd_cli
from daemon_harness import EventStream, wait_for
from epic_state_harness import STATE, write_epic
from git_harness import GitWorkspace

pytestmark = pytest.mark.slow

EPIC, STORY = "0049", "story-0049-0001"
T1, T2, T3 = "TASK-0049-0001-001", "TASK-0049-0001-002", "TASK-0049-0001-003"


def _tasks(shas: list[str]) -> dict[str, dict[str, object]]:
    """T1..T3, the first len(shas) DONE at those commits, the rest PENDING."""
    out: dict[str, dict[str, object]] = {}
    for n, tid in enumerate((T1, T2, T3)):
        if n < len(shas):
            out[tid] = {
                "status": "DONE",
                "commitSha": shas[n],
                "completedAt": "2026-11-25T10:00:00Z",
            }
        else:
            out[tid] = {"status": "PENDING"}
    return out


def _stale_copy(ws: Path, data: bytes) -> None:
    """A second writer: the producers' own protocol, under `flock -x`, tmp then mv."""
    state = ws / STATE
    stale = ws / "stale.json"
    stale.write_bytes(data)
    subprocess.run(["flock", "-x", str(state), "sh", "-c",
                    f"cp '{stale}' '{state}.tmp' && mv '{state}.tmp' '{state}'"],
                   check=True, timeout=10)  # fmt: skip


def _history(env: dict[str, str], ws: Path, *extra: str) -> list[dict[str, object]]:
    done = run_storyd_cli("history", "--workspace", str(ws), "--epic-id", EPIC,
                          "--story-id", STORY, "--json", *extra, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _regressed(proc: object, ws: Path) -> list[dict[str, object]]:
    units = proc.units(ws, detail=True)  # type: ignore[attr-defined]
    return [f for u in units for f in u.get("findingList", []) if f["code"] == "regressed"]


def _read_here_too(env: dict[str, str], ws: Path) -> None:
    """With no daemon asked, check and resume --detail find the same lost tasks."""
    direct = run_storyd_cli("check", "--direct", "--workspace", str(ws), env=env)
    assert direct.returncode == 1 and direct.stdout.count(b"regressed") == 2, direct.stdout
    detail = run_storyd_cli("resume", "--direct", "--detail", "--workspace", str(ws),
                            "--epic-id", EPIC, "--story-id", STORY, env=env)  # fmt: skip
    lost = [f["task"] for f in json.loads(detail.stdout)["findings"] if f["code"] == "regressed"]
    assert lost == [T2, T3], detail.stdout


def test_a_stale_copy_is_found_listed_and_kept_across_a_restart(
    tmp_path: Path, spawn_daemon: object
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    repo.commit("initial", {"README": "x\n"})
    write_epic(ws, EPIC, tasks={STORY: _tasks([])})
    proc = spawn_daemon([ws])  # type: ignore[operator]
    env = proc.env
    shas: list[str] = []
    with EventStream(proc) as events:
        for n in (1, 2, 3):  # three writes, each after its task's commit
            shas += repo.tasks_commits(STORY, 1, first=n)
            mark = events.mark()
            write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})
            events.wait(lambda e: e["event"] == "changed" and e.get("done") == n,  # noqa: B023
                        start=mark)  # fmt: skip
        mark = events.mark()
        stale = {"epic": EPIC, "stories": {STORY: {"tasks": _tasks(shas[:1])}}}
        _stale_copy(ws, json.dumps(stale).encode())
        _, drift = events.wait(lambda e: e["event"] == "drift"
                               and e["finding"]["code"] == "regressed", start=mark)  # fmt: skip
    lost = sorted(f["task"] for f in _regressed(proc, ws))
    assert lost == [T2, T3]
    assert drift["finding"]["severity"] == "warning"
    assert drift["finding"]["evidence"]["why"] == "undone"
    check = run_storyd_cli("check", "--workspace", str(ws), env=env)
    assert check.returncode == 1, check.stdout + check.stderr
    assert b"regressed" in check.stdout + check.stderr
    wait_for(lambda: proc.stats()["history"]["queued"] == 0, message="the writer")
    _read_here_too(env, ws)
    hook = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"), env)
    assert hook.returncode == 0, hook.stderr
    assert f"history/regressed {T2}".encode() in hook.stdout, hook.stdout  # the agent is told

    found = wait_for(lambda: (v := _history(env, ws)) and len(v) >= 5 and v,
                     message="five versions in history")  # fmt: skip
    assert [v["done"] for v in found] == [0, 1, 2, 3, 1]
    assert any(f"{T2} DONE → PENDING" in c for c in found[-1]["changes"])
    over_socket = proc.request({"op": "history", "workspace": str(ws), "stateFile": STATE,
                                "unit": STORY})  # fmt: skip
    assert [v["version"] for v in over_socket["versions"]] == [v["version"] for v in found]
    picture = run_storyd_cli("history", "--workspace", str(ws), "--epic-id", EPIC,
                             "--story-id", STORY, env=env).stdout.decode()  # fmt: skip
    assert "[" + "#" * 30 + "]   3/3" in picture, picture

    wait_for(lambda: proc.stats()["history"]["queued"] == 0, message="the writer")
    before = _history(env, ws)
    proc.stop()
    again = spawn_daemon([ws])  # type: ignore[operator]
    assert sorted(f["task"] for f in _regressed(again, ws)) == [T2, T3], "marks survive"
    wait_for(lambda: again.stats()["history"]["same"] >= 1, message="the restart's look")
    assert _history(env, ws) == before, "an unchanged unit is not recorded again"
    with EventStream(again) as events:
        mark = events.mark()
        write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})  # progress comes back
        events.wait(lambda e: e["event"] == "resolved"
                    and e["finding"]["code"] == "regressed", start=mark)  # fmt: skip
    wait_for(lambda: not _regressed(again, ws), message="the findings to resolve")
    assert run_storyd_cli("check", "--workspace", str(ws), env=env).returncode == 0
    again.stop()
    assert (
        os.stat(Path(env["XDG_STATE_HOME"]) / "storyd" / "history.sqlite3").st_mode & 0o777 == 0o600
    )


def test_reconcile_restores_what_a_stale_copy_lost_and_undo_puts_it_back(
    tmp_path: Path, spawn_daemon: object
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    shas = repo.tasks_commits(STORY, 2)
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas[:1])})
    proc = spawn_daemon([ws])  # type: ignore[operator]
    env = proc.env
    with EventStream(proc) as events:
        mark = events.mark()
        write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})
        events.wait(lambda e: e["event"] == "changed" and e.get("done") == 2, start=mark)
        mark = events.mark()
        stale = json.dumps({"epic": EPIC, "stories": {STORY: {"tasks": _tasks(shas[:1])}}})
        _stale_copy(ws, stale.encode())
        events.wait(lambda e: e["event"] == "drift" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
        stale_bytes = (ws / STATE).read_bytes()
        # history's marks reach the database before reconcile reads them
        wait_for(lambda: proc.stats()["history"]["queued"] == 0, message="the writer")  # type: ignore[index]
        preview = run_storyd_cli("reconcile", "--workspace", str(ws), "--only", "regressed",
                                 env=env)  # fmt: skip
        assert preview.returncode == 1, preview.stderr  # 1: a preview with repairs to apply
        assert f"history/regressed {STORY} {T2}" in preview.stdout.decode(), preview.stdout
        mark = events.mark()
        applied = run_storyd_cli("reconcile", "--workspace", str(ws), "--only", "regressed",
                                 "--apply", env=env)  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        events.wait(lambda e: e["event"] == "resolved" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
        task = json.loads((ws / STATE).read_bytes())["stories"][STORY]["tasks"][T2]
        assert task == {"status": "DONE", "commitSha": shas[1],
                        "completedAt": "2026-11-25T10:00:00Z"}  # fmt: skip
        assert run_storyd_cli("check", "--workspace", str(ws), env=env).returncode == 0
        mark = events.mark()
        undone = run_storyd_cli("reconcile", "--undo", "--workspace", str(ws), env=env)
        assert undone.returncode == 0, undone.stderr
        events.wait(lambda e: e["event"] == "drift" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
    assert (ws / STATE).read_bytes() == stale_bytes, "undo puts the stale copy back"


def _stale_after_two(tmp_path: Path, spawn_daemon: object) -> tuple[Path, object, list[str]]:
    """A daemon watching a workspace where a stale copy undid T2 (the finding is up)."""
    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    shas = repo.tasks_commits(STORY, 2)
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})
    proc = spawn_daemon([ws])  # type: ignore[operator]
    stale = json.dumps({"epic": EPIC, "stories": {STORY: {"tasks": _tasks(shas[:1])}}})
    _stale_copy(ws, stale.encode())
    wait_for(lambda: _regressed(proc, ws), message="the regressed finding")
    return ws, proc, shas


def test_accept_takes_the_new_version_with_or_without_the_daemon(
    tmp_path: Path, spawn_daemon: object
) -> None:
    ws, proc, shas = _stale_after_two(tmp_path, spawn_daemon)
    env = proc.env  # type: ignore[attr-defined]
    args = ("history", "--workspace", str(ws), "--epic-id", EPIC, "--story-id", STORY)
    done = run_storyd_cli(*args, "--accept", env=env)
    assert done.returncode == 0, done.stderr
    assert b"accepted by the daemon" in done.stdout
    wait_for(lambda: not _regressed(proc, ws), message="the finding to resolve")
    wait_for(lambda: "accepted" in [v["kind"] for v in _history(env, ws)],
             message="the accepted version in history")  # fmt: skip

    # again, with the daemon stopped: the database's marks restart from the newest version
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})
    wait_for(lambda: proc.units(ws)[0]["done"] == 2, message="T2 done again")  # type: ignore[attr-defined]
    wait_for(lambda: proc.stats()["history"]["queued"] == 0, message="the writer")  # type: ignore[attr-defined]
    proc.stop()  # type: ignore[attr-defined]
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas[:1])})
    done = run_storyd_cli(*args, "--accept", env=env)
    assert done.returncode == 0, done.stderr
    assert b"no daemon answered" in done.stdout
    again = spawn_daemon([ws])  # type: ignore[operator]
    assert _regressed(again, ws) == [], "accepted while the daemon was away"


def test_a_corrupt_database_is_moved_aside_and_a_new_one_started(
    tmp_path: Path, spawn_daemon: object
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    write_epic(repo.path, EPIC, tasks={STORY: _tasks([])})
    db = tmp_path / "state" / "storyd" / "history.sqlite3"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"not a database, just bytes " * 200)
    proc = spawn_daemon([repo.path])  # type: ignore[operator]
    line = proc.wait_log("history_corrupt")
    assert str(line["moved_to"]).startswith(str(db) + ".corrupt-")
    assert Path(str(line["moved_to"])).read_bytes().startswith(b"not a database")
    assert proc.log_text().count("history_corrupt") == 1
    found = wait_for(lambda: _history(proc.env, repo.path), message="a version in the new db")
    assert found[0]["total"] == 3


def test_two_daemons_never_write_one_database(tmp_path: Path, spawn_daemon: object) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    write_epic(repo.path, EPIC, tasks={STORY: _tasks([])})
    first = spawn_daemon([repo.path])  # type: ignore[operator]
    second = spawn_daemon([repo.path], socket_path=tmp_path / "run2" / "s.sock")  # type: ignore[operator]
    assert "history" in first.stats()
    assert "history" not in second.stats()
    line = second.wait_log("history_off")
    assert "another daemon writes" in str(line["reason"])
    answer = second.request({"op": "history", "workspace": str(repo.path), "stateFile": STATE})
    assert answer["ok"] is False and "does not record history" in str(answer["error"])
    for proc, level, words in ((first, "ok", "recording into"),
                               (second, "warn", "does not record into")):  # fmt: skip
        doctor = run_storyd_cli("doctor", "--socket", str(proc.socket), env=proc.env)
        said = [ln for ln in doctor.stdout.decode().splitlines() if ln.split()[1:2] == ["history:"]]
        assert len(said) == 1 and said[0].startswith(level) and words in said[0], said


def test_a_locked_database_is_waited_for_a_bounded_time(
    tmp_path: Path, spawn_daemon: object
) -> None:
    import sqlite3

    repo = GitWorkspace(tmp_path / "ws").init()
    write_epic(repo.path, EPIC, tasks={STORY: _tasks([])})
    proc = spawn_daemon([repo.path])  # type: ignore[operator]
    wait_for(lambda: _history(proc.env, repo.path), message="a version")
    proc.stop()
    db = tmp_path / "state" / "storyd" / "history.sqlite3"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        done = run_storyd_cli("history", "--workspace", str(repo.path), "--epic-id", EPIC,
                              "--story-id", STORY, "--busy", "0.3", env=proc.env)  # fmt: skip
    finally:
        holder.close()
    assert done.returncode == 75, done
    assert b"is locked: waited 0.3 s" in done.stderr


def _unit(done: int, key: str = STORY) -> object:
    from storyd.core.model import DONE, PENDING, Task, Unit

    tasks = tuple(Task(tid, "DONE" if n < done else "PENDING", DONE if n < done else PENDING)
                  for n, tid in enumerate((T1, T2, T3)))  # fmt: skip
    return Unit("epic", STATE, key, tasks)


def test_a_full_disk_stops_recording_not_the_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite's own SQLITE_FULL (max_page_count: the database may not grow) stops the
    writer with one log line; the marks in memory keep finding lost progress."""
    from storyd.api import history_db
    from storyd.config.history import History
    from storyd.server.recorder import Recorder

    writer = history_db.open_writer(str(tmp_path / "h.sqlite3"))
    pages = writer.conn.execute("PRAGMA page_count").fetchone()[0]
    writer.conn.execute(f"PRAGMA max_page_count={pages}")
    recorder = Recorder(writer, History())
    recorder.start()
    try:
        for n in range(200):
            unit = _unit(n % 3 + 1, key=f"story-0049-{n:04d}")
            assert recorder.regressed(str(tmp_path), unit) == ()  # type: ignore[arg-type]
            event = {"event": "changed", "workspace": str(tmp_path), "stateFile": STATE,
                     "unit": f"story-0049-{n:04d}", "format": "epic", "clock": "x:1"}
            recorder(event, b"")
        wait_for(lambda: not recorder.recording, message="recording to stop")
        wait_for(lambda: recorder.worker.jobs.qsize() == 0, message="the queue to drain")
        assert recorder.counters["failed"] == 1, recorder.counters
        assert recorder.counters["dropped"] > 0
        said = capsys.readouterr()
        assert (said.out + said.err).count("history_stopped") == 1
        lost = recorder.regressed(str(tmp_path), _unit(0, key="story-0049-0002"))  # type: ignore[arg-type]
        assert [f.task for f in lost] == [T1, T2, T3]
    finally:
        recorder.close()


def test_a_history_of_ten_thousand_versions(tmp_path: Path) -> None:
    from storyd.api import history_db, history_rules, history_store

    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    write_epic(ws, EPIC, tasks={STORY: _tasks([])})
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    writer = history_db.open_writer(str(tmp_path / "state" / "storyd" / "history.sqlite3"))
    conn = writer.conn
    conn.execute("BEGIN")
    uid = history_store.unit_id(conn, (os.path.realpath(ws), STATE, STORY), "epic")
    for n in range(10_000):
        rows = history_rules.task_rows(_unit(n % 4).tasks)  # type: ignore[attr-defined]
        history_store.record(conn, uid, 1_700_000_000 + n, f"i:{n}", "daemon", "changed",
                             rows, json.dumps({"n": n % 7}))  # fmt: skip
    conn.execute("COMMIT")
    writer.close()
    args = ("history", "--workspace", str(ws), "--epic-id", EPIC, "--story-id", STORY)
    done = run_storyd_cli(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 10_000
    last = json.loads(lines[-1])  # 9999 % 4 == 3 tasks done, after 2
    assert last["changes"] == [f"{T3} PENDING → DONE"] and last["envelope"] == {"n": 9999 % 7}
    import time

    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000 + 7_500))
    since = run_storyd_cli(*args, "--since", at, "--json", env=env)
    assert len(since.stdout.splitlines()) == 2_500
    picture = run_storyd_cli(*args, env=env).stdout.decode().splitlines()
    assert len(picture) == 10_001 and picture[-1].endswith(f"{T3} PENDING → DONE")


def test_a_committed_state_file_brings_its_git_history(
    tmp_path: Path, spawn_daemon: object
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init(ignore_plans=False)
    ws = repo.path
    shas: list[str] = []
    commits = []
    for n in range(3):  # the producer commits its state file with each task
        if n:
            shas += repo.tasks_commits(STORY, 1, first=n)
        write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})
        commits.append(repo.commit(f"state after {n} tasks", {}))
    proc = spawn_daemon([ws])  # type: ignore[operator]
    wait_for(lambda: proc.stats()["history"]["same"] == 1,
             message="the daemon's first look: the same as the last commit")  # fmt: skip
    found = _history(proc.env, ws)
    assert [v["source"] for v in found] == [f"git:{c}" for c in commits]
    assert [v["done"] for v in found] == [0, 1, 2]
    assert found[1]["changes"] == [f"{T1} PENDING → DONE at {shas[0][:12]}"]
    assert proc.stats()["history"]["fromGit"] == 3
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas[:1])})  # uncommitted: the daemon's own
    found = wait_for(lambda: (v := _history(proc.env, ws)) and len(v) == 4 and v,
                     message="the daemon's version after the git ones")  # fmt: skip
    assert found[-1]["source"] == "daemon" and found[-1]["done"] == 1


def test_bad_input_gets_a_clear_error(tmp_path: Path, run_storyd: object) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    write_epic(repo.path, EPIC, tasks={STORY: _tasks([])})
    ws = str(repo.path)
    cases = [
        (("--workspace", ws), 64, "name a unit"),
        (("--workspace", ws, "--epic-id", EPIC), 64, "name a unit"),
        (("--workspace", ws, "--state-file", STATE, "--epic-id", EPIC), 64, "replaces"),
        (("--workspace", ws, "--epic-id", EPIC, "--story-id", STORY, "--since", "soon"), 64,
         "expected an age"),
        (("--workspace", ws, "--epic-id", EPIC, "--story-id", STORY, "--busy", "x"), 64,
         "--busy expects seconds"),
        (("--workspace", ws, "--epic-id", EPIC, "--story-id", STORY), 78, "no history yet"),
        (("--workspace", ws, "--state-file", "/etc/passwd"), 64, "outside the workspace"),
    ]  # fmt: skip
    for args, code, words in cases:
        done = run_storyd("history", *args)  # type: ignore[operator]
        assert done.returncode == code, (args, done)
        assert words in done.stderr.decode(), (args, done.stderr)
        assert b"Traceback" not in done.stderr and done.stdout == b""


def test_a_unit_gone_with_its_progress_is_told_by_the_units_left(
    tmp_path: Path, spawn_daemon: object
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    other = "story-0049-0002"
    shas = repo.tasks_commits(STORY, 2)
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas), other: {"TASK-0049-0002-001": {
        "status": "PENDING"}}})  # fmt: skip
    proc = spawn_daemon([ws])  # type: ignore[operator]
    env = proc.env
    with EventStream(proc) as events:
        mark = events.mark()
        stale = {"epic": EPIC, "stories": {other: {"tasks": {"TASK-0049-0002-001": {
            "status": "PENDING"}}}}}  # fmt: skip
        _stale_copy(ws, json.dumps(stale).encode())
        _, drift = events.wait(lambda e: e["event"] == "drift"
                               and e["finding"]["code"] == "regressed", start=mark)  # fmt: skip
    assert drift["unit"] == other
    assert drift["finding"]["evidence"]["why"] == "unit-removed"
    assert drift["finding"]["evidence"]["unit"] == STORY
    assert drift["finding"]["evidence"]["tasks"] == "2"
    assert run_storyd_cli("check", "--workspace", str(ws), env=env).returncode == 1
    wait_for(lambda: proc.stats()["history"]["queued"] == 0, message="the writer")
    plan = run_storyd_cli("reconcile", "--workspace", str(ws), "--only", "regressed", "--json",
                          env=env)  # fmt: skip
    left = json.loads(plan.stdout)["leftAlone"]
    assert [x["reason"] for x in left] == [
        f"unit {STORY} is gone from {STATE}: storyd does not add units back; "
        "`storyd history` shows it as it was"]  # fmt: skip
    args = ("history", "--workspace", str(ws), "--epic-id", EPIC, "--story-id", STORY)
    done = run_storyd_cli(*args, "--accept", env=env)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not _regressed(proc, ws), message="the finding to go")
    assert run_storyd_cli("check", "--workspace", str(ws), env=env).returncode == 0
    # again with no daemon: the gone unit's progress is let go in the database itself
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas), other: {}})
    wait_for(lambda: len(proc.units(ws)) == 2, message="the unit back")
    wait_for(lambda: proc.stats()["history"]["queued"] == 0, message="the writer")
    proc.stop()
    _stale_copy(ws, json.dumps(stale).encode())
    assert run_storyd_cli("check", "--direct", "--workspace", str(ws), env=env).returncode == 1
    done = run_storyd_cli(*args, "--accept", env=env)
    assert done.returncode == 0 and b"no daemon answered" in done.stdout, done
    assert run_storyd_cli("check", "--direct", "--workspace", str(ws), env=env).returncode == 0
    other_args = ("history", "--workspace", str(ws), "--epic-id", EPIC, "--story-id",
                  "story-0049-0009", "--accept")  # fmt: skip
    assert run_storyd_cli(*other_args, env=env).returncode == 2, "never in the file or history"
