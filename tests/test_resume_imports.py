"""The `storyd resume` path imports no heavy module (docs/design.md), whichever way it
goes: a direct read in either staleness mode, git actually consulted, a daemon that does
not answer, a `--state-file` unit, a usage error, `--help`.

Each run is `python -S -X importtime -m storyd resume …` on a real workspace: `-S`
keeps site's own imports (an editable install's finder imports `re`) out of the
measure, so every module listed was imported by storyd's resume path. The forbidden
list is bench/bench_resume.py's plus what the developers' guide names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import lean_pythonpath

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = frozenset((
    "argparse", "dataclasses", "git", "json", "orjson", "re", "socket", "structlog",
    "subprocess", "typing", "watchdog",
    # optional extras and what they bring: never on the resume path (issue 19)
    "mcp", "mcp_types", "anyio", "pydantic",
    # storyd's own heavier modules: the configuration loader, help machinery, the whole
    # long-running daemon (storyd.server and everything under it), the detectors
    "storyd.cli.commands.completion", "storyd.cli.common", "storyd.config",
    "storyd.server", "storyd.detectors", "storyd.agents",
    # optional extras (issue 22: the fleet's NATS client)
    "nats", "storyd.fleet",
    # optional extras (issue 34: the live view, Textual, and rich under it)
    "textual", "rich", "storyd.tui",
))
# forbidden with every module under them
PACKAGES = ("storyd.server", "storyd.detectors", "storyd.agents", "mcp", "nats", "storyd.fleet",
            "textual", "rich", "storyd.tui")
EPIC = "0049"
STORY = "story-0049-0001"
STATE = f"plans/epic-{EPIC}/execution-state.json"
OLD = "2025-03-03T09:00:00Z"  # the commit holding the story file
DONE_AT = "2025-03-04T09:00:00Z"  # after the commit, before the file's mtime (now)


def _git(cwd: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@storyd.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@storyd.invalid",
               GIT_AUTHOR_DATE=OLD, GIT_COMMITTER_DATE=OLD)
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone's look: the story file committed long ago, its mtime now, so the
    seed's mtime rule would warn and git mode asks git for the commit date."""
    ws = tmp_path_factory.mktemp("resume-imports")
    (ws / STATE).parent.mkdir(parents=True)
    tasks = (
        f'{{"TASK-1":{{"status":"done","commitSha":"{"a" * 40}","completedAt":"{DONE_AT}"}},'
        '"TASK-2":{"status":"pending"}}'
    )
    (ws / STATE).write_text(f'{{"epic":"{EPIC}","stories":{{"{STORY}":{{"tasks":{tasks}}}}}}}',
                            encoding="utf-8")
    (ws / f"plans/epic-{EPIC}/{STORY}.md").write_text("# a story\n", encoding="utf-8")
    _git(ws, "init", "-q")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-qm", "plan")
    return ws


def imported(workspace: Path, *args: str, state: Path | None = None,
             history: Path | None = None) -> tuple[int, list[str], str]:
    """Exit code, every module the run imported (in -X importtime's order), stdout;
    `state`: the XDG_STATE_HOME, `history`: the STORYD_HISTORY (where the history
    database is looked for)."""
    env = dict(os.environ, PYTHONPATH=lean_pythonpath(),
               XDG_CONFIG_HOME=str(workspace / "no-config"),
               STORYD_SOCKET=str(workspace / "nobody-listens.sock"))
    if state is not None:
        env.pop("STORYD_HISTORY", None)
        env["XDG_STATE_HOME"] = str(state)
    if history is not None:
        env["STORYD_HISTORY"] = str(history)
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", "-m", "storyd",
                           "resume", *args], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    names = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and "imported package" not in line]
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, names, done.stdout


RUNS = {
    "direct, mtime": ("--direct", "--staleness", "mtime"),
    "direct, git consulted": ("--direct",),
    "no daemon answers": ("--timeout", "20"),
    "state file and unit": ("--state-file", STATE, "--unit", STORY, "--direct"),
    "usage error": ("--story-id", "nope", "--epic-id", EPIC),
    "help": ("--help",),
}


@pytest.mark.parametrize("label", list(RUNS))
def test_resume_path_imports_nothing_heavy(workspace: Path, label: str) -> None:
    args = RUNS[label]
    if "--state-file" not in args and args[0] != "--story-id":
        args = ("--story-id", STORY, "--epic-id", EPIC, *args)
    code, names, out = imported(workspace, *args)
    assert code == {"usage error": 64}.get(label, 0), out
    assert "storyd.cli.commands.resume" in names, "the run did not take the resume path"
    heavy = sorted({
        n for n in names
        if n in FORBIDDEN or n.split(".")[0] in FORBIDDEN
        or any(n.startswith(p + ".") for p in PACKAGES)
    })
    assert heavy == [], f"{label}: the resume path imported {heavy}"


@pytest.mark.parametrize("database", ["none", "XDG_STATE_HOME", "STORYD_HISTORY"])
def test_detail_looks_for_lost_progress_only_with_a_history_database(
        workspace: Path, tmp_path: Path, database: str) -> None:
    """`--detail` reads `regressed` findings from the recording daemon's database, where
    the daemon keeps it (STORYD_HISTORY, else under XDG_STATE_HOME): on a machine
    without one, nothing of it (sqlite3) is imported; with one, neither json nor hashlib
    (history_marks.py reads the marks with storyd's scanner)."""
    kept = {"XDG_STATE_HOME": tmp_path / "state" / "storyd" / "history.sqlite3",
            "STORYD_HISTORY": tmp_path / "elsewhere" / "h.sqlite3"}.get(database)
    if kept is not None:  # not a database at all: read as none, after the import
        kept.parent.mkdir(parents=True)
        kept.write_bytes(b"")
    code, names, out = imported(workspace, "--story-id", STORY, "--epic-id", EPIC,
                                "--direct", "--detail", state=tmp_path / "state",
                                history=kept if database == "STORYD_HISTORY" else None)
    assert code == 0, out
    assert '"findings":' in out
    history = {"sqlite3", "storyd.api.history", "storyd.api.history_marks"} & set(names)
    assert history == (
        {"sqlite3", "storyd.api.history", "storyd.api.history_marks"} if kept else set())
    # the marks are read by storyd's own scanner: the writer's side stays out
    writers = {"hashlib", "json", "subprocess", "storyd.api.history_store"} & set(names)
    assert writers == set(), "the marks' read imported the writer's modules"


def test_git_mode_really_asked_git(workspace: Path) -> None:
    """The premise of the "git consulted" run: mtime mode warns, git mode does not."""
    _, _, mtime = imported(workspace, "--story-id", STORY, "--epic-id", EPIC, "--direct",
                           "--staleness", "mtime")
    _, _, git = imported(workspace, "--story-id", STORY, "--epic-id", EPIC, "--direct")
    assert '"staleWarnings":[]' not in mtime
    assert '"staleWarnings":[]' in git


def test_the_check_can_fail(workspace: Path) -> None:
    """The measure sees a heavy import when one happens (so a pass means something)."""
    env = dict(os.environ, PYTHONPATH=lean_pythonpath())
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c", "import json"],
                          cwd=workspace, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert any(line.rsplit("|", 1)[1].strip() == "json" for line in done.stderr.splitlines()
               if line.startswith("import time:"))


@pytest.mark.slow
def test_the_guard_sees_the_mcp_server_modules(workspace: Path) -> None:
    """The MCP server's own import does load what the guard forbids (so a pass above means
    the resume path stays clear of it)."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")
    env = dict(os.environ, PYTHONPATH=lean_pythonpath())
    done = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "import storyd.agents.mcp_server"], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    assert {"mcp", "storyd.agents.mcp_server", "anyio"} <= names
    assert names & FORBIDDEN
