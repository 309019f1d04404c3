"""Issue 39's property: random repository trees of links, FIFOs, device links and redo
records where the formats look for state files never make a hook or a read write a file,
and never hold a hook past its time limit.

Each example builds a real git repository whose `plans/`, `.claude/`, `.taskmaster/`,
`specs/`, `.kiro/` and `.beads/` hold what hypothesis draws at the paths the formats read
(state files, companions, the redo records beside them), then runs the installed
`storyd hook session-start` and `storyd status --direct` in it, as an agent's session
and a user would. Every file of the repository, `.git/` included, and a file outside it
that links lead to, must be byte for byte what it was, and each command must end, without
a traceback, well inside the hook's time limit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from agents_harness import AgentsEnv, hook_payload, run_hook
from cli_harness import STORYD
from git_harness import GitWorkspace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LIMIT = 10.0  # seconds: far under every agent's hook timeout (Claude Code's is 60)

PATHS = [  # where the formats look (docs/formats.md), and the records beside them
    "plans/epic-0001/execution-state.json",
    "plans/epic-0001/.execution-state.json.storyd-redo",
    "plans/epic-0001/story-0001-0001.md",
    ".claude/plans/issue-1/execution-state.json",
    ".claude/plans/issue-1/.execution-state.json.storyd-redo",
    ".taskmaster/tasks/tasks.json",
    ".taskmaster/tasks/.tasks.json.storyd-redo",
    ".taskmaster/state.json",
    "specs/001-feature/tasks.md",
    ".kiro/specs/feature/tasks.md",
    ".beads/issues.jsonl",
    ".beads/.issues.jsonl.storyd-redo",
]

KINDS = [
    "link-git-config", "link-git-head", "link-dotgit", "link-outside", "link-dev-zero",
    "link-dev-null", "link-loop", "fifo", "valid", "garbage", "record",
]


def _valid(relpath: str) -> bytes:
    if relpath.endswith("execution-state.json"):
        return (b'{"epic": "0001", "stories": {"story-0001-0001": {"tasks": '
                b'{"TASK-0001-0001-001": {"status": "DONE"}}}}}')
    if relpath.endswith("tasks.json"):
        return b'{"master": {"tasks": [{"id": 1, "title": "t", "status": "done"}]}}'
    if relpath.endswith(".md"):
        return b"# Tasks\n\n- [x] T001 one\n- [ ] T002 two\n"
    if relpath.endswith(".jsonl"):
        return b'{"id": "bd-1", "title": "t", "status": "open"}\n'
    return b"{}"


def _record(current: bytes) -> bytes:
    """A pre-issue-39 record whose torn-write case would rewrite `current` (forged)."""
    before = b"#" * 4 + current[4:]
    after = current[:4] + b"OWNED" * 10
    return b"storyd-redo 1 %d %d\n" % (len(before), len(after)) + before + after


def plant(root: Path, outside: Path, relpath: str, kind: str) -> None:
    """Put a `kind` of thing at `relpath` in the repository `root`."""
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        return
    depth = "../" * (len(Path(relpath).parts) - 1)
    links = {"link-git-config": f"{depth}.git/config", "link-git-head": f"{depth}.git/HEAD",
             "link-dotgit": f"{depth}.git", "link-outside": str(outside),
             "link-dev-zero": "/dev/zero", "link-dev-null": "/dev/null",
             "link-loop": path.name}
    if kind in links:
        os.symlink(links[kind], path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "valid":
        path.write_bytes(_valid(relpath))
    elif kind == "garbage":
        path.write_bytes(b"\x00\xff{not json")
    else:
        path.write_bytes(_record(_valid(relpath.replace(".storyd-redo", "").lstrip("."))))


def snapshot(*roots: Path) -> dict[str, str]:
    """Every regular file and link under `roots` (a file itself too), by content."""
    seen: dict[str, str] = {}
    for root in roots:
        if root.is_file():
            seen[str(root)] = hashlib.sha256(root.read_bytes()).hexdigest()
            continue
        for folder, dirs, files in os.walk(root):
            for name in files + dirs:
                path = Path(folder, name)
                if path.is_symlink():
                    seen[str(path)] = "link:" + os.readlink(path)
                elif path.is_file():
                    seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
                elif not path.is_dir():
                    seen[str(path)] = "special"
    return seen


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A repository with one commit, and a private storyd environment."""
    root = tmp_path_factory.mktemp("hostile")
    repo = GitWorkspace(root / "template").init(ignore_plans=False)
    repo.commit("base", {"README": "hello\n"})
    env = AgentsEnv(root / "env").env
    return repo.path, env


@pytest.mark.slow
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(KINDS)),
                min_size=1, max_size=8))
def test_random_hostile_trees_change_nothing_and_never_hang(
    base: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory,
    tree: list[tuple[str, str]],
) -> None:
    template, env = base
    root = tmp_path_factory.mktemp("tree")
    work = root / "ws"
    shutil.copytree(template, work, symlinks=True)
    outside = root / "outside.json"
    outside.write_bytes(b'{"stories": {}}')
    for relpath, kind in tree:
        plant(work, outside, relpath, kind)
    before = snapshot(work, outside)
    payload = hook_payload("SessionStart", work, source="startup")
    started = time.monotonic()
    hook = run_hook("session-start", payload, env, work)
    took = time.monotonic() - started
    assert hook.returncode == 0, (tree, hook.stderr)
    assert b"Traceback" not in hook.stderr, (tree, hook.stderr)
    assert took < LIMIT, (tree, took)
    started = time.monotonic()
    status = subprocess.run([STORYD, "status", "--direct", "--workspace", str(work)],
                            cwd=work, env=env, capture_output=True, timeout=60, check=False)
    assert time.monotonic() - started < LIMIT, tree
    assert b"Traceback" not in status.stderr, (tree, status.stderr)
    assert snapshot(work, outside) == before, tree
