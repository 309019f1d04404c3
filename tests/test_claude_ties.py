"""Claude Code's task lists outside the workspace, tied to it by the session-start hook
(issue 44, item 3): real lists from realworld3 (read at run time) laid out in a fixture
`~/.claude` (CLAUDE_CONFIG_DIR), the real `storyd hook session-start` with Claude Code's
payload on stdin, compaction and /clear (two session ids, one folder), agent teams, the
hostile cases, and `storyd status` through a real daemon."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, hook_payload, run_hook
from cli_harness import STORYD
from daemon_harness import DaemonProcess
from realworld3 import CORPUS, need_corpus

TIME_TRACKER = "FabianSperrle__time-tracker"  # 16 tasks, several in progress
DEX = "Kubudak90__perfect-dex-reports"  # 54 tasks, every one with an owner (team roles)


def _real(repo: str) -> list[Path]:
    found = sorted((CORPUS / "claude-tasks").glob(f"{repo}@*.json"))
    assert found, repo
    return found


def _lay_list(folder: Path, repo: str) -> list[dict[str, object]]:
    """The repository's real task files as a list folder `<id>.json`; their tasks."""
    need_corpus()
    folder.mkdir(parents=True, exist_ok=True)
    tasks = []
    for path in _real(repo):
        data = path.read_bytes()
        (folder / path.name.rsplit("__", 1)[1]).write_bytes(data)
        tasks.append(orjson.loads(data))
    return tasks


def _expected_current(tasks: list[dict[str, object]]) -> str:
    """Claude Code's rule, computed here apart from storyd: the first in progress by id,
    else the first pending whose blockedBy are all completed."""
    ordered = sorted(tasks, key=lambda t: int(str(t["id"])))
    status = {str(t["id"]): t["status"] for t in ordered}
    for task in ordered:
        if task["status"] == "in_progress":
            return str(task["id"])
    for task in ordered:
        blockers = task.get("blockedBy") or []
        assert isinstance(blockers, list)
        if task["status"] == "pending" and all(status.get(str(b)) == "completed" for b in blockers):
            return str(task["id"])
    raise AssertionError("no current task")


class Home:
    """A fixture home: a git workspace, Claude Code's folder and storyd's state in tmp."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = root / "ws"
        self.ws.mkdir()
        subprocess.run(["git", "init", "-q", str(self.ws)], check=True)
        self.claude = root / "claude"
        (self.claude / "tasks").mkdir(parents=True)
        agents = AgentsEnv(root)
        self.socket = agents.socket
        self.env = dict(agents.env, HOME=str(root / "home"), CLAUDE_CONFIG_DIR=str(self.claude))
        self.env.pop("CLAUDE_CODE_TASK_LIST_ID", None)
        self.ties = root / "state" / "storyd" / "claude-lists"

    def start(self, session: str, source: str, **env: str) -> str | None:
        """`storyd hook session-start` as Claude Code runs it; the context it gave."""
        payload = hook_payload("SessionStart", self.ws, session_id=session, source=source,
                               transcript_path=str(self.claude / "projects" / "-ws" /
                                                   f"{session}.jsonl"))  # fmt: skip
        done = run_hook("session-start", payload, dict(self.env, **env))
        assert done.returncode == 0 and not done.stderr, done.stderr
        if not done.stdout.strip():
            return None
        text = orjson.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
        assert isinstance(text, str)
        return text

    def status(self, *args: str) -> list[dict[str, object]]:
        done = subprocess.run([STORYD, "status", "--workspace", str(self.ws), "--json", *args],
                              env=self.env, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
        units = orjson.loads(done.stdout)["units"]
        return [u for u in units if u["format"] == "claude-tasks"]


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def _lines(text: str | None) -> list[str]:
    return [line for line in (text or "").split("\n") if line.startswith("claude-tasks:")]


@pytest.mark.slow
class TestCompaction:
    """/compact and /clear start a new session id: the old list is found and told."""

    def test_compact_tells_the_new_session_of_the_old_list(self, home: Home) -> None:
        assert home.start("s1", "startup") is None  # nothing in flight, no list yet
        tasks = _lay_list(home.claude / "tasks" / "s1", TIME_TRACKER)
        open_count = sum(t["status"] != "completed" for t in tasks)
        [line] = _lines(home.start("s2", "compact"))
        assert "before /compact, s1 " in line
        assert f"has {open_count} open task(s) of {len(tasks)}" in line
        assert f"current task {_expected_current(tasks)} " in line
        assert str(home.claude / "tasks" / "s1") in line
        # the new session made its own list: resumed, it is not told again
        _lay_list(home.claude / "tasks" / "s2", DEX)
        assert _lines(home.start("s2", "resume")) == []

    def test_clear_says_clear_and_a_finished_list_is_not_told(self, home: Home) -> None:
        home.start("s1", "startup")
        _lay_list(home.claude / "tasks" / "s1", TIME_TRACKER)
        [line] = _lines(home.start("s2", "clear"))
        assert "before /clear, s1 " in line
        # s2 made no list: compacted, s3 is told of s1, which is not the list just before
        [line] = _lines(home.start("s3", "compact"))
        assert "the list of an earlier session, s1 " in line
        for path in (home.claude / "tasks" / "s1").iterdir():  # every task completed
            node = orjson.loads(path.read_bytes())
            path.write_bytes(orjson.dumps(dict(node, status="completed")))
        assert _lines(home.start("s4", "clear")) == []

    def test_a_shared_list_id_is_not_orphaned(self, home: Home) -> None:
        home.start("s1", "startup", CLAUDE_CODE_TASK_LIST_ID="shared")
        _lay_list(home.claude / "tasks" / "shared", TIME_TRACKER)
        assert _lines(home.start("s2", "compact", CLAUDE_CODE_TASK_LIST_ID="shared")) == []
        [unit] = home.status("--direct")
        assert unit["unit"] == "shared" and unit["session"] == "s2"

    def test_an_unseen_session_is_found_by_its_transcript_only(self, home: Home) -> None:
        tasks = _lay_list(home.claude / "tasks" / "s0", TIME_TRACKER)  # before the hooks
        _lay_list(home.claude / "tasks" / "elsewhere", DEX)  # another project's list
        assert _lines(home.start("s3", "startup")) == []  # no transcript: not provable
        projects = home.claude / "projects" / "-ws"
        projects.mkdir(parents=True)
        (projects / "s0.jsonl").write_text("{}\n")
        [line] = _lines(home.start("s4", "startup"))
        assert "s0 (found by its transcript in this project)" in line
        assert f"current task {_expected_current(tasks)} " in line


@pytest.mark.slow
class TestStatus:
    """`storyd status` answers the tied lists as units of the workspace."""

    def test_status_shows_the_current_task_owners_and_what_waits(self, home: Home) -> None:
        home.start("s1", "startup")
        tasks = _lay_list(home.claude / "tasks" / "s1", DEX)
        home.start("s2", "compact")
        [unit] = home.status("--direct")
        assert unit["unit"] == "s1" and unit["list"] == "s1" and unit["began"] == "startup"
        assert unit["stateFile"] == str(home.claude / "tasks" / "s1")
        assert unit["total"] == len(tasks)
        assert str(unit["current"]).startswith(f"{_expected_current(tasks)} ")
        assert "Backend Senior: 13" in str(unit["owners"])
        blocked = [t for t in tasks if t["status"] != "completed" and t.get("blockedBy")]
        assert bool(blocked) == ("waiting" in unit)

    def test_a_team_working_here_is_shown_with_its_members(self, home: Home) -> None:
        home.start("lead", "startup")
        _lay_list(home.claude / "tasks" / "red", DEX)
        team = home.claude / "teams" / "red"
        team.mkdir(parents=True)
        config = {"name": "red", "leadAgentId": "team-lead@red", "leadSessionId": "lead",
                  "members": [{"agentId": "team-lead@red", "name": "team-lead",
                               "agentType": "team-lead", "cwd": str(home.ws)},
                              {"agentId": "qa@red", "name": "qa", "agentType": "general-purpose",
                               "cwd": str(home.ws)}]}  # fmt: skip
        (team / "config.json").write_bytes(orjson.dumps(config))
        _lay_list(home.claude / "tasks" / "blue", TIME_TRACKER)  # a team elsewhere
        (home.claude / "teams" / "blue").mkdir()
        (home.claude / "teams" / "blue" / "config.json").write_bytes(orjson.dumps(
            {"name": "blue", "leadSessionId": "other", "members": [{"name": "x", "cwd": "/x"}]}))
        [unit] = home.status("--direct")
        assert unit["unit"] == "red" and unit["team"] == "red"
        assert unit["members"] == "team-lead (team-lead), qa (general-purpose)"
        assert "Backend Senior" in str(unit["owners"])

    def test_the_daemon_answers_and_the_lists_are_read_per_answer(
        self, home: Home, spawn_daemon: Callable[..., DaemonProcess]
    ) -> None:
        home.start("s1", "startup")
        _lay_list(home.claude / "tasks" / "s1", TIME_TRACKER)
        daemon = spawn_daemon([home.ws], socket_path=home.socket)
        done = subprocess.run([STORYD, "status", "--workspace", str(home.ws), "--json"],
                              env=home.env, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        answer = orjson.loads(done.stdout)
        assert answer["source"] == "daemon"
        [unit] = [u for u in answer["units"] if u["format"] == "claude-tasks"]
        before = unit["done"]
        first = sorted((home.claude / "tasks" / "s1").iterdir(), key=lambda p: int(p.stem))
        pending = next(p for p in first if orjson.loads(p.read_bytes())["status"] != "completed")
        pending.write_bytes(orjson.dumps(dict(orjson.loads(pending.read_bytes()),
                                              status="completed")))
        [again] = home.status()  # no watch of ~/.claude: read again by this answer
        assert again["done"] == before + 1
        # resume of the tied list, with the daemon up: both doors read it here
        folder = str(home.claude / "tasks" / "s1")
        for argv in ([STORYD, "resume", "--workspace", str(home.ws), "--state-file", folder,
                      "--detail"],
                     [str(Path(STORYD).parent / "storyd-resume"), f"--workspace={home.ws}",
                      f"--state-file={folder}", "--detail"]):  # fmt: skip
            done = subprocess.run(argv, env=home.env, capture_output=True, timeout=60,
                                  check=False)  # fmt: skip
            assert done.returncode == 0, (argv[0], done.stderr)
            body = orjson.loads(done.stdout)
            assert body["envelope"]["resumePoint"] == again["resumePoint"]
            assert body["next"]["task"] == str(again["current"]).split()[0]
        other = home.claude / "tasks" / "untied"
        _lay_list(other, DEX)
        done = subprocess.run([STORYD, "resume", "--workspace", str(home.ws), "--state-file",
                               str(other)], env=home.env, capture_output=True, timeout=60,
                              check=False)  # fmt: skip
        assert done.returncode == 64 and b"not a Claude Code task list tied" in done.stderr
        assert daemon.running()


class TestHostile:
    """The list folder is Claude Code's, yet read as hostile input."""

    def test_a_list_folder_or_task_file_that_is_a_link_is_not_followed(self, home: Home,
                                                                       tmp_path: Path) -> None:
        from storyd.core.formats.claude_lists import read_list

        outside = tmp_path / "outside"
        _lay_list(outside, TIME_TRACKER)
        os.symlink(outside, home.claude / "tasks" / "s1")
        assert read_list(str(home.claude / "tasks" / "s1")) is None
        own = home.claude / "tasks" / "s2"
        own.mkdir()
        os.symlink(outside / "1.json", own / "1.json")
        os.mkfifo(own / "2.json")  # a FIFO: refused at once, never waited on
        (own / "3.json").write_bytes(orjson.dumps({"id": "3", "status": "pending"}))
        unit = read_list(str(own))
        assert unit is not None and [t.id for t in unit.tasks] == ["3"]

    def test_a_tie_naming_a_path_is_ignored(self, home: Home,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
        from storyd.api import claude_ties

        monkeypatch.setenv("XDG_STATE_HOME", str(home.root / "state"))
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home.claude))
        _lay_list(home.claude / "secret", TIME_TRACKER)
        path = Path(claude_ties.record_path(str(home.ws)))
        path.parent.mkdir(parents=True)
        ties = [{"list": "../secret", "session": "x"}, {"list": ".", "session": "y"},
                {"list": 7}, "junk"]
        path.write_bytes(orjson.dumps({"workspace": str(home.ws), "ties": ties}))
        assert claude_ties.load(str(home.ws)) == [] and claude_ties.tied_units(str(home.ws)) == []

    @pytest.mark.slow
    def test_a_fifo_for_the_record_never_holds_the_hook(self, home: Home,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
        from storyd.api import claude_ties

        monkeypatch.setenv("XDG_STATE_HOME", str(home.root / "state"))
        path = claude_ties.record_path(str(home.ws))
        assert path.startswith(str(home.ties))
        home.ties.mkdir(parents=True)
        os.mkfifo(path)
        done = threading.Event()

        def run() -> None:
            home.start("s1", "startup")
            done.set()

        threading.Thread(target=run, daemon=True).start()
        assert done.wait(30), "the hook waited on a FIFO"
        assert [t["list"] for t in claude_ties.load(str(home.ws))] == ["s1"]  # replaced

    @pytest.mark.slow
    def test_the_ties_folder_as_a_link_is_never_written_through(self, home: Home,
                                                                tmp_path: Path) -> None:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        home.ties.parent.mkdir(parents=True)
        os.symlink(elsewhere, home.ties)
        home.start("s1", "startup")
        assert list(elsewhere.iterdir()) == []
