"""Git drift end to end: real repositories, a real `storyd serve`, real sockets and sinks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cli_harness import BIN, STORYD, PipeLines, path_without, run_in_pty, run_storyd_cli
from daemon_harness import DaemonProcess, EventStream, wait_for, write_config
from epic_state_harness import EPIC, STATE, STORY, story_id, task_id
from git_harness import GitWorkspace
from notify_harness import append_stdin_hook, fake_notify_send, hook_calls

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
Done = subprocess.CompletedProcess[bytes]
Predicate = Callable[[dict[str, object]], bool]

LATENCY = 2.0  # seconds from a git operation to its event (the target is 0.2; see the bench)
QUIET = 0.5  # a window with no event: longer than the git settle and busy-poll periods
HISTORY = "commit-in-history"
RESUME = ("--story-id", STORY, "--epic-id", EPIC)
T1, T2, T3 = (task_id(STORY, n) for n in (1, 2, 3))


def kind(event: str, unit: str = STORY, code: str | None = None,
         task: str | None = None) -> Predicate:
    """Matches `event` events of `unit` (with this finding code and task, when given)."""

    def match(e: dict[str, object]) -> bool:
        finding = e.get("finding")
        found = finding if isinstance(finding, dict) else {}
        return (e["event"] == event and e["unit"] == unit
                and (code is None or found.get("code") == code)
                and (task is None or found.get("task") == task))

    return match


def lost(sha: str, task: str, tip: str = "main", now: str | None = None) -> str:
    """commit-in-history's message for a recorded commit the tip no longer reaches."""
    text = (f"commit {sha} of {task} is not in the history of {tip} "
            "(amended, rebased, reset or force-pushed)")
    return text + (f"; rewritten: now {now}" if now else "")


def rechecks(proc: DaemonProcess, workspace: Path) -> int:
    """How many git rechecks of `workspace` the daemon has logged."""
    return sum(1 for e in proc.log_events()
               if e.get("event") == "git_recheck" and e.get("workspace") == str(workspace))


def operation(e: dict[str, object]) -> bool:
    """An event about the git-operation/operation-in-progress info finding (issue 29:
    the daemon's answers say a rebase is under way, then stop saying it)."""
    finding = e.get("finding")
    return isinstance(finding, dict) and finding.get("code") == "operation-in-progress"


def split_operation(
    events: list[dict[str, object]],
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(the operation finding's events and the `changed` each came with, the others)."""
    marks = {e["generation"] for e in events if operation(e)}
    theirs = [e for e in events if operation(e) or
              (e["event"] == "changed" and e["generation"] in marks)]
    return theirs, [e for e in events if e not in theirs]


def per_unit(events: list[dict[str, object]]) -> Counter[tuple[str, str]]:
    """(unit, event kind) -> how many."""
    return Counter((str(e["unit"]), str(e["event"])) for e in events)


def calls_of(record: Path, count: int) -> list[list[dict[str, object]]]:
    """The hook's calls once there are `count` of them (exactly: a later one fails)."""
    wait_for(lambda: len(hook_calls(record)) >= count, message=f"{count} hook calls")
    calls = hook_calls(record)
    assert len(calls) == count, calls
    return calls


def lines_of(path: Path, count: int) -> list[str]:
    """A record file's lines once there are `count` of them (exactly)."""
    wait_for(lambda: path.exists() and len(path.read_text().splitlines()) >= count,
             message=f"{count} lines in {path.name}")
    lines = path.read_text().splitlines()
    assert len(lines) == count, lines
    return lines


def toml_list(items: list[str]) -> str:
    """A TOML array of basic strings (JSON's escaping is TOML's for these)."""
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def with_hook_and_desktop(spawn_daemon: Spawn, repo: GitWorkspace, tmp_path: Path, *,
                          watched: bool = True) -> tuple[DaemonProcess, Path, Path]:
    """A daemon (on `repo` when `watched`) with a recording hook and a capturing
    `notify-send` on its PATH; returns it with the hook's and notify-send's records."""
    record, argv_record = tmp_path / "hook.out", tmp_path / "notify-send.out"
    hook = append_stdin_hook(tmp_path / "hook.py", record)
    fake_notify_send(tmp_path / "fakebin", argv_record)
    write_config(tmp_path, "[notify]\ndesktop = true\n"
                           f"hook = {toml_list(hook)}\nhook_timeout = 10\n")
    proc = spawn_daemon([repo.path] if watched else [], start=False)
    proc.env["PATH"] = f"{tmp_path / 'fakebin'}{os.pathsep}{proc.env['PATH']}"
    proc.start()
    return proc, record, argv_record


def via_daemon(proc: DaemonProcess, workspace: Path, *args: str) -> Done:
    """`storyd resume` in the workspace, asserting the daemon answered it from its cache."""
    before = proc.stats()
    done = run_storyd_cli("resume", "--timeout", "5000", *args, env=proc.env, cwd=workspace)
    after = proc.stats()
    assert after["queries"] == before["queries"] + 1, "the daemon did not answer this query"  # type: ignore[operator]
    assert after["hits"] == before["hits"] + 1, "the daemon did not answer from its cache"  # type: ignore[operator]
    return done


@pytest.fixture
def repo(tmp_path: Path) -> GitWorkspace:
    """An empty repository on `main` whose plans/ folder git ignores."""
    return GitWorkspace(tmp_path / "ws").init()


@pytest.fixture
def two_tasks(repo: GitWorkspace) -> tuple[str, str]:
    """A base commit and two task commits on main, both recorded DONE (a third is pending)."""
    repo.commit("base", {"README": "hello\n"})
    t1, t2 = repo.tasks_commits(STORY, 2)
    repo.record({STORY: [t1, t2]})
    return t1, t2


class TestDriftEvents:
    """Rewriting recorded history reaches a subscriber as drift, restoring it as resolved."""

    def test_amend_drifts_and_reset_restores(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                             two_tasks: tuple[str, str]) -> None:
        _, t2 = two_tasks
        proc = spawn_daemon([repo.path])
        workspace = str(repo.path.resolve())
        with EventStream(proc) as events:
            started = time.monotonic()
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            new = repo.head()
            stamp, drift = events.wait(kind("drift"), message="the amend's drift")
            assert stamp - started < LATENCY, f"drift took {stamp - started:.3f} s"
            assert drift["finding"] == {
                "detector": HISTORY, "code": "unreachable", "severity": "warning", "task": T2,
                "message": lost(t2, T2, now=new),
                "evidence": {"commit": t2, "replacement": new, "tip": "main"}}
            assert (drift["workspace"], drift["stateFile"], drift["unit"], drift["format"]) == (
                workspace, STATE, STORY, "epic")
            generation = drift["generation"]
            assert isinstance(generation, int) and generation > 0
            assert str(drift["clock"]).endswith(f":{generation}")
            changed = [e for e in events.since() if e["event"] == "changed"]
            assert [(c["generation"], c["findings"], c["worst"]) for c in changed] == [
                (generation, 1, "warning")]

            mark = events.mark()
            started = time.monotonic()
            repo.git("reset", "-q", "--hard", t2)
            stamp, resolved = events.wait(kind("resolved"), start=mark,
                                          message="the reset's resolved")
            assert stamp - started < LATENCY, f"resolved took {stamp - started:.3f} s"
            assert resolved["finding"] == drift["finding"]
            assert resolved["generation"] > generation  # type: ignore[operator]
            assert not [e for e in events.settle(QUIET)[mark:] if e["event"] == "drift"]

    def test_rebase_onto_a_moved_base(self, spawn_daemon: Spawn, repo: GitWorkspace) -> None:
        repo.commit("base", {"README": "hello\n"})
        repo.git("checkout", "-q", "-b", "topic")
        olds = repo.tasks_commits(STORY, 2)
        repo.git("checkout", "-q", "main")
        repo.commit("upstream work", {"upstream.txt": "u\n"})
        repo.git("checkout", "-q", "topic")
        repo.record({STORY: olds})
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            started = time.monotonic()
            repo.git("rebase", "-q", "main")
            news = repo.git("rev-list", "--reverse", "main..topic").split()
            drifts = events.wait_count(kind("drift"), 2, message="two drift events")
            latency = max(stamp for stamp, _ in drifts) - started
            assert latency < LATENCY, f"drift took {latency:.3f} s"
            assert sorted((e["finding"]["task"], e["finding"]["message"])  # type: ignore[index]
                          for _, e in drifts) == [
                (T1, lost(olds[0], T1, "topic", news[0])),
                (T2, lost(olds[1], T2, "topic", news[1]))]

            mark = events.mark()
            repo.git("reset", "-q", "--hard", olds[1])
            resolved = events.wait_count(kind("resolved"), 2, start=mark, message="resolved")
            assert {e["finding"]["task"] for _, e in resolved} == {T1, T2}  # type: ignore[index]

    @pytest.fixture
    def dropped(self, spawn_daemon: Spawn, repo: GitWorkspace) -> tuple[DaemonProcess, int]:
        """T2's commit recorded, then dropped from main by `git reset --hard HEAD~1`;
        the daemon and the repository clock from just before T2 was committed."""
        repo.commit("base", {"README": "hello\n"})
        (t1,) = repo.tasks_commits(STORY, 1)
        clock = repo.clock
        (t2,) = repo.tasks_commits(STORY, 1, first=2)
        repo.record({STORY: [t1, t2]})
        return spawn_daemon([repo.path]), clock

    def test_reset_that_drops_a_commit(self, repo: GitWorkspace,
                                       dropped: tuple[DaemonProcess, int]) -> None:
        proc, _ = dropped
        t2 = repo.head()
        with EventStream(proc) as events:
            started = time.monotonic()
            repo.git("reset", "-q", "--hard", "HEAD~1")
            stamp, drift = events.wait(kind("drift"), message="the reset's drift")
            assert stamp - started < LATENCY, f"drift took {stamp - started:.3f} s"
            assert drift["finding"] == {"detector": HISTORY, "code": "unreachable",
                                        "severity": "error", "task": T2,
                                        "message": lost(t2, T2),
                                        "evidence": {"commit": t2, "tip": "main"}}
            mark = events.mark()
            repo.git("reset", "-q", "--hard", t2)
            events.wait(kind("resolved", code="unreachable"), start=mark)

    def test_gc_after_the_reset_makes_it_missing(self, repo: GitWorkspace,
                                                 dropped: tuple[DaemonProcess, int]) -> None:
        proc, clock = dropped
        t2 = repo.head()
        with EventStream(proc) as events:
            repo.git("reset", "-q", "--hard", "HEAD~1")
            events.wait(kind("drift", code="unreachable"), message="the reset's drift")
            mark = events.mark()
            repo.git("update-ref", "-d", "ORIG_HEAD")
            repo.git("reflog", "expire", "--expire=now", "--all")
            repo.git("gc", "-q", "--prune=now")
            assert repo.run("cat-file", "-e", t2).returncode != 0, "gc kept the dropped commit"
            direct = run_storyd_cli("check", "--direct", "--workspace", str(repo.path),
                                    env=proc.env)
            assert b"commit-in-history/missing" in direct.stdout, direct.stdout
            _, missing = events.wait(kind("drift", code="missing"), start=mark,
                                     message="a `missing` drift once gc pruned the commit "
                                             "(storyd check --direct already says missing)")
            assert missing["finding"] == {
                "detector": HISTORY, "code": "missing", "severity": "error", "task": T2,
                "message": f"commit {t2} of {T2} does not exist in the repository",
                "evidence": {"commit": t2}}
            events.wait(kind("resolved", code="unreachable"), start=mark,
                        message="the unreachable finding resolved")

            mark = events.mark()
            repo.clock = clock  # the same tree, parent, message and dates: the same sha
            assert repo.tasks_commits(STORY, 1, first=2) == [t2]
            events.wait(kind("resolved", code="missing"), start=mark,
                        message="the missing finding resolved")
            assert not [e for e in events.settle(QUIET)[mark:] if e["event"] == "drift"]


class TestCoalescing:
    """A git operation is one recheck, however many refs and commits it touches."""

    def test_rebase_of_50_commits_is_one_change_per_story(
            self, spawn_daemon: Spawn, repo: GitWorkspace, tmp_path: Path) -> None:
        stories = [story_id(n) for n in range(1, 6)]
        repo.commit("base", {"README": "hello\n"})
        repo.git("checkout", "-q", "-b", "topic")
        recorded = {s: repo.tasks_commits(s, 10) for s in stories}  # 50 commits
        repo.git("checkout", "-q", "main")
        repo.commit("upstream work", {"upstream.txt": "u\n"})
        repo.git("checkout", "-q", "topic")
        repo.record(recorded)
        record = tmp_path / "hook.out"
        hook = append_stdin_hook(tmp_path / "hook.py", record)
        write_config(tmp_path, f"[notify]\ndesktop = false\nhook = {toml_list(hook)}\n")
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            repo.git("rebase", "-q", "main")
            exited = time.monotonic()
            assert len(repo.git("rev-list", "main..topic").split()) == 50
            drifts = events.wait_count(lambda e: e["event"] == "drift", 50, timeout=10,
                                       message="a drift per rebased task")
            latency = max(stamp for stamp, _ in drifts) - exited
            assert latency < LATENCY, f"the last drift came {latency:.3f} s after git exited"
            seen = events.settle(QUIET)
        counts = per_unit(seen)
        assert counts == Counter({**{(s, "changed"): 1 for s in stories},
                                  **{(s, "drift"): 10 for s in stories}}), counts
        for story in stories:
            generations = {e["generation"] for e in seen if e["unit"] == story}
            assert len(generations) == 1, (story, generations)
        assert all("rewritten: now" in e["finding"]["message"]  # type: ignore[index]
                   for e in seen if e["event"] == "drift")
        (call,) = calls_of(record, 1)  # one per burst in the workspace, not one per story
        assert Counter(str(e["unit"]) for e in call) == Counter({s: 10 for s in stories})

    def test_no_drift_while_rebase_merge_exists(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                                two_tasks: tuple[str, str]) -> None:
        t1, t2 = two_tasks
        proc = spawn_daemon([repo.path])
        workspace = repo.path.resolve()
        with EventStream(proc) as events:
            events.settle(QUIET)
            before = rechecks(proc, workspace)
            generation = proc.stats()["generation"]
            marker = repo.path / ".git" / "rebase-merge"
            marker.mkdir()
            repo.git("update-ref", "refs/heads/main", t1)  # drops T2's commit mid-"rebase"
            # one recheck as the operation is seen: its info finding, no detector's drift
            events.wait(kind("drift", code="operation-in-progress"), timeout=15,
                        message="the answers to say a rebase is in progress")
            during = events.settle(1.0)
            assert per_unit(during) == Counter({(STORY, "changed"): 1, (STORY, "drift"): 1})
            assert [e for e in during if e["event"] == "drift" and not operation(e)] == []
            assert rechecks(proc, workspace) == before + 1, "more than one recheck mid-rebase"
            assert proc.stats()["generation"] == generation + 1

            mark = events.mark()
            started = time.monotonic()
            marker.rmdir()
            stamp, drift = events.wait(kind("drift", code="unreachable"), start=mark,
                                       message="the drift once the rebase ended")
            assert stamp - started < LATENCY, f"drift took {stamp - started:.3f} s"
            assert drift["finding"]["message"] == lost(t2, T2)  # type: ignore[index]
            events.settle(QUIET)
            seen = events.since(mark)
        assert per_unit(seen) == Counter({(STORY, "changed"): 1, (STORY, "drift"): 1,
                                          (STORY, "resolved"): 1}), seen
        assert [operation(e) for e in seen if e["event"] == "resolved"] == [True]
        assert rechecks(proc, workspace) == before + 2

    def test_a_state_write_mid_rebase_keeps_the_detectors_last_findings(
            self, spawn_daemon: Spawn, repo: GitWorkspace, two_tasks: tuple[str, str]) -> None:
        t1, t2 = two_tasks
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            events.settle(QUIET)
            marker = repo.path / ".git" / "rebase-merge"
            marker.mkdir()
            repo.git("update-ref", "refs/heads/main", t1)  # drops T2's commit mid-"rebase"
            repo.record({STORY: [t1, t2]}, pending=2)  # the orchestrator writes meanwhile
            events.wait(kind("changed"), message="the state write is still served")
            seen = events.settle(1.0)
            _, others = split_operation(seen)
            assert not [e for e in others if e["event"] in ("drift", "resolved")], seen

            marker.rmdir()
            _, drift = events.wait(kind("drift", code="unreachable"),
                                   message="the drift once the rebase ended")
            assert drift["finding"]["message"] == lost(t2, T2)  # type: ignore[index]

    def test_a_rebase_stopped_on_a_conflict_waits_for_continue(
            self, spawn_daemon: Spawn, repo: GitWorkspace) -> None:
        repo.commit("base", {"shared.txt": "base\n"})
        repo.git("checkout", "-q", "-b", "topic")
        (t1,) = repo.tasks_commits(STORY, 1)
        t2 = repo.commit(f"{T2} edit shared", {"shared.txt": "topic\n"})
        (t3,) = repo.tasks_commits(STORY, 1, first=3)
        repo.git("checkout", "-q", "main")
        repo.commit("upstream edit", {"shared.txt": "upstream\n"})
        repo.git("checkout", "-q", "topic")
        repo.record({STORY: [t1, t2, t3]})
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            stopped = repo.run("rebase", "main")
            assert stopped.returncode != 0, stopped.stdout
            assert (repo.path / ".git" / "rebase-merge").is_dir()
            events.wait(kind("drift", code="operation-in-progress"), timeout=15,
                        message="the answers to say a rebase is in progress")
            stopped_events = events.settle(1.0)  # only: a rebase is in progress (info)
            theirs, others = split_operation(stopped_events)
            assert others == [], "an event while the rebase is stopped"
            assert [e["event"] for e in theirs if operation(e)] == ["drift"], stopped_events

            mark = events.mark()
            (repo.path / "shared.txt").write_text("merged\n", encoding="utf-8")
            repo.git("add", "shared.txt")
            done = repo.run("rebase", "--continue", env={"GIT_EDITOR": "true"})
            assert done.returncode == 0, done.stderr
            events.wait_count(lambda e: kind("drift")(e) and not operation(e), 3, start=mark,
                              message="three drift events")
            events.settle(QUIET)
            seen = events.since(mark)
        assert [e["event"] for e in seen if operation(e)] == ["resolved"], seen
        seen = [e for e in seen if not operation(e)]
        assert per_unit(seen) == Counter({(STORY, "changed"): 1, (STORY, "drift"): 3}), seen
        rewritten = {e["finding"]["task"]: "rewritten: now" in e["finding"]["message"]  # type: ignore[index]
                     for e in seen if e["event"] == "drift"}
        assert rewritten == {T1: True, T2: False, T3: True}


class TestNotifySinks:
    """The hook and the desktop get drift too; their failures are logged, never fatal."""

    def test_hook_and_desktop_receive_the_drift(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                                two_tasks: tuple[str, str],
                                                tmp_path: Path) -> None:
        _, t2 = two_tasks
        proc, record, argv_record = with_hook_and_desktop(spawn_daemon, repo, tmp_path)
        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            _, drift = events.wait(kind("drift"))
            (call,) = calls_of(record, 1)
            assert call == [drift]
            (argv,) = lines_of(argv_record, 1)
            app, title, body = json.loads(argv)
            assert app == "--app-name=storyd"
            assert title == f"storyd: {STORY} drifted from git"
            assert body == f"drift: {drift['finding']['message']}"  # type: ignore[index]

            repo.git("reset", "-q", "--hard", t2)
            _, resolved = events.wait(kind("resolved"))
            calls = calls_of(record, 2)
            assert calls[1] == [resolved]
            lines = lines_of(argv_record, 2)
            assert json.loads(lines[1])[1] == f"storyd: {STORY} back in sync"
        delivered = proc.wait_log("hook_delivered", workspace=str(repo.path.resolve()))
        assert delivered["duration_ms"] >= 0  # type: ignore[operator]
        assert not [e for e in proc.log_events() if e["event"] in ("hook_failed", "desktop_failed")]

    def test_a_start_sums_up_the_drift_already_there(self, spawn_daemon: Spawn,
                                                     repo: GitWorkspace,
                                                     two_tasks: tuple[str, str],
                                                     tmp_path: Path) -> None:
        _, t2 = two_tasks
        repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")  # while stopped
        proc, record, argv_record = with_hook_and_desktop(spawn_daemon, repo, tmp_path)
        workspace = str(repo.path.resolve())
        found = proc.wait_log("first_look", workspace=workspace)
        assert (found["units"], found["units_out_of_step"], found["at_start"]) == (1, 1, True)
        assert (found["errors"], found["warnings"]) == (0, 1), found  # rewritten: a warning
        (summary,) = lines_of(argv_record, 1)
        assert json.loads(summary)[1:] == [
            f"storyd: 1 unit out of step in {workspace}",
            "1 warning in 1 of 1 units, found when storyd began watching. "
            "`storyd status` lists them.",
        ]
        with EventStream(proc) as events:
            repo.git("reset", "-q", "--hard", t2)  # a change as it happens: delivered as ever
            _, resolved = events.wait(kind("resolved"))
        assert calls_of(record, 1) == [[resolved]], "the hook ran for the start's findings"
        assert json.loads(lines_of(argv_record, 2)[1])[1] == f"storyd: {STORY} back in sync"
        logged = [e["event"] for e in proc.log_events() if e.get("unit") == STORY]
        assert logged.count("drift") == 0 and logged.count("resolved") == 1, logged

    def test_a_workspace_watched_later_is_summed_up_too(self, spawn_daemon: Spawn,
                                                        repo: GitWorkspace,
                                                        two_tasks: tuple[str, str],
                                                        tmp_path: Path) -> None:
        repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
        proc, record, argv_record = with_hook_and_desktop(spawn_daemon, repo, tmp_path,
                                                          watched=False)
        workspace = str(repo.path.resolve())
        with EventStream(proc) as events:
            answer = proc.request({"op": "watch", "workspace": workspace})
            assert (answer["watching"], answer["units"]) == (True, 1), answer
            events.wait(kind("drift"), message="subscribers still get the unit's findings")
        found = proc.wait_log("first_look", workspace=workspace)
        assert (found["units_out_of_step"], found["warnings"], found["at_start"]) == (
            1, 1, False), found
        repo.write(f"src/{STORY}/later.txt", "x\n")
        repo.git("add", "-A")
        with EventStream(proc) as events:
            repo.git("commit", "-q", "-m", f"{task_id(STORY, 3)} step 3")  # unrecorded
            _, drift = events.wait(kind("drift", task=task_id(STORY, 3)))
        assert calls_of(record, 1) == [[drift]], "the hook ran for the first look's findings"
        (notification,) = lines_of(argv_record, 1)  # the drift's; none for the watch
        assert json.loads(notification)[1] == f"storyd: {STORY} drifted from git"

    def test_a_failing_hook_is_logged(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                      two_tasks: tuple[str, str], tmp_path: Path) -> None:
        _, t2 = two_tasks
        hook = [sys.executable, "-c",
                "import sys; sys.stdin.buffer.read(); sys.stderr.write('hook broke'); sys.exit(3)"]
        write_config(tmp_path, f"[notify]\ndesktop = false\nhook = {toml_list(hook)}\n")
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            events.wait(kind("drift"))
            failed = proc.wait_log("hook_failed", workspace=str(repo.path.resolve()))
            assert (failed["code"], failed["stderr"], failed["level"]) == (3, "hook broke",
                                                                           "warning")
            assert proc.request({"op": "ping"})["ok"] is True
            repo.git("reset", "-q", "--hard", t2)
            events.wait(kind("resolved"))
        wait_for(lambda: sum(e["event"] == "hook_failed" for e in proc.log_events()) == 2,
                 message="the second hook_failed")
        assert proc.running()
        proc.stop()

    def test_a_hanging_hook_times_out(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                      two_tasks: tuple[str, str], tmp_path: Path) -> None:
        _, t2 = two_tasks
        pids = tmp_path / "hook.pids"
        hook = [sys.executable, "-c",
                "import os, sys, time\n"
                f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
                "sys.stdin.buffer.read(); time.sleep(60)"]
        write_config(tmp_path, f"[notify]\ndesktop = false\nhook = {toml_list(hook)}\n"
                               "hook_timeout = 0.5\n")
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            events.wait(kind("drift"))
            lines_of(pids, 1)  # the hook has started
            started = time.monotonic()
            answer = proc.request({"op": "resume", "workspace": str(repo.path), "epic": EPIC,
                                   "story": STORY})
            assert answer["ok"] is True and time.monotonic() - started < 0.4, "blocked by hook"
            timeout = proc.wait_log("hook_timeout", workspace=str(repo.path.resolve()))
            assert (timeout["timeout"], timeout["level"]) == (0.5, "warning")
            (pid,) = map(int, pids.read_text().split())
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)  # killed and reaped, not left sleeping

            repo.git("reset", "-q", "--hard", t2)
            events.wait(kind("resolved"))
        wait_for(lambda: sum(e["event"] == "hook_timeout" for e in proc.log_events()) == 2,
                 message="the second hook_timeout")
        assert proc.request({"op": "ping"})["ok"] is True
        proc.stop()

    def test_without_notify_send_one_debug_line(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                                two_tasks: tuple[str, str],
                                                tmp_path: Path) -> None:
        _, t2 = two_tasks
        record = tmp_path / "hook.out"
        hook = append_stdin_hook(tmp_path / "hook.py", record)
        write_config(tmp_path, f"[notify]\ndesktop = true\nhook = {toml_list(hook)}\n")
        proc = spawn_daemon([repo.path], args=["--log-level", "debug"], start=False)
        proc.env["PATH"] = path_without("notify-send", extra=[BIN])
        proc.start()
        repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
        calls_of(record, 1)  # the drift delivered
        repo.git("reset", "-q", "--hard", t2)
        calls_of(record, 2)  # the resolved delivered
        skipped = [e for e in proc.log_events() if e["event"] == "desktop_skipped"]
        assert len(skipped) == 1, skipped
        assert skipped[0]["level"] == "debug" and "notify-send" in str(skipped[0]["reason"])


class TestWorktrees:
    """A linked worktree (its .git is a file) is watched through its own gitdir."""

    def test_amend_in_a_linked_worktree(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                        tmp_path: Path) -> None:
        repo.commit("base", {"README": "hello\n"})
        repo.git("worktree", "add", "-q", "-b", "feature", str(tmp_path / "wt"))
        tree = GitWorkspace(tmp_path / "wt")
        tree.clock = repo.clock
        assert (tree.path / ".git").is_file()
        (t1,) = tree.tasks_commits(STORY, 1)
        tree.record({STORY: [t1]})
        proc = spawn_daemon([tree.path])
        with EventStream(proc) as events:
            started = time.monotonic()
            tree.git("commit", "-q", "--amend", "-m", f"{T1} step 1, reworded")
            stamp, drift = events.wait(kind("drift"), message="the worktree's drift")
            assert stamp - started < LATENCY, f"drift took {stamp - started:.3f} s"
            assert drift["workspace"] == str(tree.path.resolve())
            assert drift["finding"]["message"] == lost(t1, T1, "feature", tree.head())  # type: ignore[index]
            mark = events.mark()
            repo.commit("unrelated work on main", {"main.txt": "m\n"})  # the common refs move
            tree.git("reset", "-q", "--hard", t1)
            events.wait(kind("resolved"), start=mark, message="the worktree's resolved")


class TestStalenessModes:
    """A fresh clone: mtime mode calls every DONE task stale, git mode none; both paths agree."""

    @pytest.mark.parametrize("mode", ["git", "mtime"])
    def test_fresh_clone(self, spawn_daemon: Spawn, tmp_path: Path, mode: str) -> None:
        origin = GitWorkspace(tmp_path / "origin").init(ignore_plans=False)
        t1, t2 = origin.tasks_commits(STORY, 2)
        origin.record({STORY: [t1, t2]})  # completedAt is after every commit's date
        origin.commit("story and state", {f"plans/epic-{EPIC}/{STORY}.md": "# story\n"})
        clone = origin.clone(tmp_path / "clone")
        proc = spawn_daemon([clone.path], args=["--staleness", mode] if mode == "mtime" else [])
        (unit,) = proc.units(clone.path, detail=True)
        found = [(f["detector"], f["code"], f["task"]) for f in unit["findingList"]]  # type: ignore[attr-defined]
        # one cause (the story file), one line: the stale tasks in its evidence
        expected = [("staleness", "stale", None)] if mode == "mtime" else []
        assert found == expected
        if mode == "mtime":
            assert unit["findingList"][0]["evidence"] == {"count": "2", "tasks": f"{T1},{T2}"}  # type: ignore[index]
        same_flags: list[tuple[str, ...]] = [("--staleness", mode)]
        if mode == "git":
            same_flags.append(())  # git is also the default of both paths
        for flags in same_flags:
            cached = via_daemon(proc, clone.path, *RESUME, *flags)
            fresh = run_storyd_cli("resume", "--direct", *RESUME, *flags, env=proc.env,
                                   cwd=clone.path)
            assert (cached.returncode, cached.stdout, cached.stderr) == (
                fresh.returncode, fresh.stdout, fresh.stderr)
            assert cached.returncode == 0
            warnings = orjson.loads(cached.stdout)["staleWarnings"]
            assert warnings == [f"Story file modified after task {t} DONE"
                                for t in ((T1, T2) if mode == "mtime" else ())]


class TestCommands:
    """check, status, events and resume --detail show the drift the daemon found."""

    def test_check_exit_codes(self, spawn_daemon: Spawn, repo: GitWorkspace,
                              two_tasks: tuple[str, str]) -> None:
        _, t2 = two_tasks
        proc = spawn_daemon([repo.path])
        where = f"{repo.path.resolve()}/{STATE} {STORY}"

        def check(*flags: str) -> Done:
            return run_storyd_cli("check", "--workspace", str(repo.path), *flags, env=proc.env)

        requests = proc.stats()["requests"]
        clean = check()
        assert proc.stats()["requests"] > requests + 1, "check did not ask the daemon"  # type: ignore[operator]
        assert (clean.returncode, clean.stdout) == (0, b"1 units, 0 problems\n"), clean.stderr
        assert check("--direct").stdout == clean.stdout and check("--direct").returncode == 0

        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            events.wait(kind("drift"))
        expected = (f"{where}: warning: {HISTORY}/unreachable: "
                    f"{lost(t2, T2, now=repo.head())}\n"
                    f"  evidence: commit {t2} rewritten as {repo.head()} on main\n"
                    "1 units, 1 problems\n").encode()
        for flags in ((), ("--direct",)):
            dirty = check(*flags)
            assert (dirty.returncode, dirty.stdout) == (1, expected), (flags, dirty.stderr)

    def test_status_plain_tty_and_no_color(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                           two_tasks: tuple[str, str]) -> None:
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            events.wait(kind("drift"))
        argv = [STORYD, "status", "--workspace", str(repo.path)]
        plain = run_storyd_cli(*argv[1:], env=proc.env)
        assert plain.returncode == 0, plain.stderr
        text = plain.stdout.decode()
        assert "[####" in text and "2/3" in text and "phase-2-task-3" in text
        assert f"{HISTORY}/unreachable {T2}" in text
        assert "\x1b" not in text

        env = {**proc.env, "TERM": "xterm"}
        env.pop("NO_COLOR", None)
        code, screen = run_in_pty(argv, env=env)
        assert code == 0
        assert b"\x1b[" in screen and b"[####" in screen and b"phase-2-task-3" in screen
        code, screen = run_in_pty(argv, env={**env, "NO_COLOR": "1"})
        assert code == 0 and b"[####" in screen and b"\x1b" not in screen

    def test_events_json_streams_drift(self, spawn_daemon: Spawn, repo: GitWorkspace,
                                       two_tasks: tuple[str, str]) -> None:
        _, t2 = two_tasks
        proc = spawn_daemon([repo.path])
        child = subprocess.Popen([STORYD, "events", "--json", "--workspace", str(repo.path)],
                                 env=proc.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        lines = PipeLines(child)
        try:
            first = orjson.loads(lines.readline())
            assert (first["ok"], first["subscribed"], first["freshInstance"]) == (True, True,
                                                                                  False)
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            streamed = [orjson.loads(lines.readline())]
            while streamed[-1]["event"] != "drift":
                streamed.append(orjson.loads(lines.readline()))
        finally:
            lines.close()
            child.send_signal(signal.SIGTERM)
            child.communicate(timeout=10)
        assert [e["event"] for e in streamed] == ["changed", "drift"]
        assert streamed[1]["finding"]["message"] == lost(t2, T2, now=repo.head())
        assert streamed[0]["generation"] == streamed[1]["generation"]

    def test_resume_detail_carries_findings_from_the_cache(
            self, spawn_daemon: Spawn, repo: GitWorkspace, two_tasks: tuple[str, str]) -> None:
        _, t2 = two_tasks
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            _, drift = events.wait(kind("drift"))
        detail = via_daemon(proc, repo.path, *RESUME, "--detail")
        assert detail.returncode == 0, detail.stderr
        body = orjson.loads(detail.stdout)
        assert body["source"] == "cache"
        assert body["findings"] == [drift["finding"]]
        assert t2 in drift["finding"]["message"]  # type: ignore[index]
        evidence = {"commit": t2, "replacement": repo.head(), "tip": "main"}
        assert drift["finding"]["evidence"] == evidence  # type: ignore[index]
        plain = via_daemon(proc, repo.path, *RESUME)
        assert body["envelope"] == orjson.loads(plain.stdout)

    def test_direct_detail_has_the_detector_findings_too(
            self, spawn_daemon: Spawn, repo: GitWorkspace, two_tasks: tuple[str, str]) -> None:
        """README: `--detail` prints the format's and the detectors' findings, the output
        the same whichever path answers."""
        proc = spawn_daemon([repo.path])
        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
            events.wait(kind("drift"))
        cached = orjson.loads(via_daemon(proc, repo.path, *RESUME, "--detail").stdout)
        direct = run_storyd_cli("resume", "--direct", "--detail", *RESUME, env=proc.env,
                                cwd=repo.path)
        assert direct.returncode == 0, direct.stderr
        assert orjson.loads(direct.stdout) == {**cached, "source": "direct"}
