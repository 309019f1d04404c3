"""Issue 39: what a cloned repository ships can never make storyd write into a file.

A repository committed as an attacker would: `plans/epic-0001/execution-state.json` a
link to `../../.git/config`, and a redo record of the pre-issue-39 kind beside it whose
"torn write" case, computed from the clone's own `.git/config`, would have made any
storyd read (a hook, the daemon, `resume`) write a `core.fsmonitor` command there, run
by the next `git status`. Also: a record beside a plain state file, forging a finished
write that marks every task DONE. Every door is tried in a real clone (the hook, resume,
status, check, the daemon and its socket ops, the MCP server's read-only `status` tool
through the SDK's own client, reconcile); after each, every file of the clone,
`.git/` included, is byte for byte what it was.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from agents_harness import AgentsEnv, hook_payload, run_hook
from cli_harness import STORYD
from daemon_harness import DaemonProcess
from git_harness import GitWorkspace

EPIC, STORY = "0001", "story-0001-0001"
LINKED = "plans/epic-0001/execution-state.json"
PLAIN = "plans/epic-0002/execution-state.json"
EVIL = b'\n[core]\n\tfsmonitor = "touch PWNED"\n'
Spawn = Callable[..., DaemonProcess]


def v1_record(before: bytes, after: bytes) -> bytes:
    """A redo record as storyd before issue 39 wrote, and obeyed, beside a state file."""
    return b"storyd-redo 1 %d %d\n" % (len(before), len(after)) + before + after


def torn_case(current: bytes, wanted: bytes, k: int = 8) -> tuple[bytes, bytes]:
    """(old, new) bytes for a record whose "torn mid-write" case matches `current` and
    whose finishing writes `current[:k] + wanted`: the forgery issue 39 found."""
    before = b"#" * k + current[k:]
    after = current[:k] + wanted
    return before, after


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` (links as their target text), by content hash."""
    seen: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                seen[os.path.relpath(path, root)] = "link:" + os.readlink(path)
            else:
                with open(path, "rb") as handle:
                    seen[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return seen


def epic_state(epic: str, status: str) -> bytes:
    story = f"story-{epic}-0001"
    tasks = {f"TASK-{epic}-0001-00{n}": {"status": status} for n in (1, 2)}
    return json.dumps({"epic": epic, "stories": {story: {"tasks": tasks}}}, indent=2).encode()


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A real clone of a repository that ships the link, the records and a state file."""
    origin = GitWorkspace(tmp_path / "origin").init(ignore_plans=False)
    plain = epic_state("0002", "PENDING")
    origin.commit("plans", {PLAIN: plain.decode(), "README": "hello\n"})
    (origin.path / "plans" / "epic-0001").mkdir(parents=True)
    os.symlink("../../.git/config", origin.path / LINKED)
    done = epic_state("0002", "DONE")
    before, after = torn_case(plain, done[8:])  # forged: "finish" a write marking all DONE
    (origin.path / "plans" / "epic-0002" / ".execution-state.json.storyd-redo").write_bytes(
        v1_record(before, after))
    origin.git("add", "-A")
    origin.git("commit", "-q", "-m", "ship the link and a record")
    work = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin.path), str(work)], check=True, timeout=60)
    config = (work / ".git" / "config").read_bytes()
    before, after = torn_case(config, EVIL)  # as an attacker who predicted the clone's config
    (work / "plans" / "epic-0001" / ".execution-state.json.storyd-redo").write_bytes(
        v1_record(before, after))
    return work


def assert_untouched(work: Path, before: dict[str, str]) -> None:
    after = snapshot(work)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [], f"storyd changed files of the clone: {changed}"
    assert b"fsmonitor" not in (work / ".git" / "config").read_bytes()


def cli(env: dict[str, str], work: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run([STORYD, *args], cwd=work, env=env, capture_output=True,
                          timeout=60, check=False)
    assert b"Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.slow
def test_no_read_door_writes_and_the_link_into_git_is_refused(clone: Path,
                                                            tmp_path: Path) -> None:
    env = AgentsEnv(tmp_path).env
    before = snapshot(clone)
    hook = run_hook("session-start", hook_payload("SessionStart", clone, source="startup"),
                    env, clone)
    assert hook.returncode == 0 and b"Traceback" not in hook.stderr, hook.stderr
    assert_untouched(clone, before)
    linked = cli(env, clone, "resume", "--direct", "--state-file", LINKED)
    assert linked.returncode == 64, linked.stderr
    assert b"leads into git's own directory" in linked.stderr
    assert linked.stderr.decode().count("\n") == 1
    plain = cli(env, clone, "resume", "--direct", "--detail", "--state-file", PLAIN)
    assert plain.returncode == 0, plain.stderr
    detail = json.loads(plain.stdout)
    assert detail["envelope"]["tasksCompleted"] == []  # the forged "finished write" unseen
    assert "redo-ignored" in {f["code"] for f in detail["findings"]}
    for args in (("status", "--direct"), ("check", "--direct")):
        done = cli(env, clone, *args, "--workspace", str(clone))
        assert done.returncode in (0, 1), (args, done.stderr)
    assert_untouched(clone, before)


@pytest.mark.slow
def test_the_daemon_and_its_socket_ops_write_nothing(clone: Path, tmp_path: Path,
                                                     spawn_daemon: Spawn) -> None:
    before = snapshot(clone)
    daemon = spawn_daemon([clone])
    answer = daemon.request({"op": "resume", "workspace": str(clone), "stateFile": PLAIN})
    assert answer["ok"] is True, answer
    refused = daemon.request({"op": "resume", "workspace": str(clone), "stateFile": LINKED})
    assert refused["ok"] is False, refused
    payload = json.dumps(hook_payload("SessionStart", clone, source="startup")).encode()
    hooked = daemon.request({"op": "hook", "event": "session-start", "storyd": STORYD,
                             "env": {}, "payload": base64.b64encode(payload).decode()})
    assert "ok" in hooked or "code" in hooked, hooked
    assert_untouched(clone, before)


@pytest.mark.slow
def test_the_mcp_status_tool_writes_nothing(clone: Path, tmp_path: Path) -> None:
    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp")
    env = AgentsEnv(tmp_path).env
    before = snapshot(clone)

    async def main() -> str:
        params = mcp.StdioServerParameters(command=STORYD, args=["mcp"], env=env,
                                           cwd=str(clone))
        with (tmp_path / "mcp.err").open("a") as err:
            async with (mcp.stdio_client(params, errlog=err) as (read, write),
                        mcp.ClientSession(read, write) as client):
                await client.initialize()
                got = await client.call_tool("status", {"workspace": str(clone)})
                return str(got.content[0].text)

    text = anyio.run(main)
    assert "Traceback" not in (tmp_path / "mcp.err").read_text()
    assert text
    assert_untouched(clone, before)


@pytest.mark.slow
def test_reconcile_neither_obeys_the_records_nor_writes_into_git(clone: Path,
                                                                 tmp_path: Path) -> None:
    env = AgentsEnv(tmp_path).env
    config = (clone / ".git" / "config").read_bytes()
    recovered = cli(env, clone, "reconcile", "--recover", "--workspace", str(clone))
    assert recovered.returncode == 1, recovered.stderr  # records listed, none obeyed
    assert b"is not storyd's" in recovered.stdout, recovered.stdout
    applied = cli(env, clone, "reconcile", "--apply", "--workspace", str(clone))
    assert applied.returncode in (0, 64), applied.stderr
    assert (clone / ".git" / "config").read_bytes() == config
    assert (clone / PLAIN).read_bytes() == epic_state("0002", "PENDING")


def test_tab_completion_neither_hangs_on_a_fifo_nor_reads_through_a_link(
        tmp_path: Path) -> None:
    """`storyd completion --ids story` (what a shell runs at a Tab) reads the epic state
    files of the folder it is in: a FIFO there, a link to /dev/zero or into .git is
    skipped at once; the readable epic's ids are still offered."""
    env = AgentsEnv(tmp_path).env
    work = tmp_path / "ws"
    (work / ".git").mkdir(parents=True)
    (work / ".git" / "config").write_text('{"stories": {"story-9999-0001": {}}}')
    for epic, kind in (("0001", "fifo"), ("0002", "zero"), ("0003", "git"), ("0004", "ok")):
        folder = work / "plans" / f"epic-{epic}"
        folder.mkdir(parents=True)
        path = folder / "execution-state.json"
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "zero":
            os.symlink("/dev/zero", path)
        elif kind == "git":
            os.symlink("../../.git/config", path)
        else:
            path.write_bytes(epic_state(epic, "PENDING"))
    done = subprocess.run([STORYD, "completion", "--ids", "story"], cwd=work, env=env,
                          capture_output=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split() == ["story-0004-0001"]
