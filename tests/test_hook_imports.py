"""Each hook's direct path (no daemon) imports only what its answer needs (issue 31):
no git library or watchdog (git's plumbing answers), no importlib.metadata (the plugins'
entry points are read from their files), no orjson before a daemon answers, no hashlib
(OpenSSL) for a session record's name, no sqlite3 without a history database, no
tomllib once the configuration's parse is kept, no shutil, difflib or dataclasses;
session-start and stop no typing, re, shlex, subprocess or contextlib either; and
post-tool-use, which reads only the file the tool named, no detectors, subprocess or
typing at all, no format but that file's (the others' paths are declared apart from
them: storyd.core.formats.declared), and after a post-tool-use (its record then only
touched) no json or re either (storyd.core.jsonio reads the payload and the session
record with the C scanner json uses).

Each run is `python -S -X importtime -m storyd hook EVENT` with Claude Code's payload on
a real workspace (storyd demo's, git history and all) and a configuration file: `-S`
keeps site's own imports out of the measure (tests/test_resume_imports.py says why).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload
from cli_harness import lean_pythonpath

from storyd.core import registry

FORBIDDEN = frozenset((
    "git", "watchdog", "importlib.metadata", "orjson", "hashlib", "_hashlib", "sqlite3",
    "shutil", "difflib", "dataclasses", "email", "zipfile", "uuid", "platform", "tomllib",
    "mcp", "anyio", "pydantic", "nats", "textual", "rich",
    "storyd.server", "storyd.agents", "storyd.fleet", "storyd.tui", "storyd.api.reconcile",
    "storyd.api.history", "storyd.api.history_db",
))
# session-start and stop scan the workspace and ask git through posix_spawn: no typing
# (annotations only), no re or shlex (storyd.core.words), no subprocess (with locale,
# signal, selectors), and no socket module when no daemon's socket file exists
NOT_IN_A_SCAN = frozenset(("typing", "re", "shlex", "subprocess", "contextlib", "queue",
                           "socket", "_socket", "selectors", "signal", "enum"))
# post-tool-use reads the named file (and the session's record), no workspace scan
NOT_AFTER_A_TOOL = frozenset(("storyd.detectors", "storyd.api.scan", "subprocess", "typing",
                              "threading", "socket", "_socket", "json", "re", "contextlib",
                              "collections", "functools"))
STATE = "plans/epic-0049/execution-state.json"
# each built-in format's module, by its format's name
FORMAT_MODULES = {e.value.partition(":")[0]: e.name
                  for e in registry.get().entries(registry.FORMATS, plugins=False)}
# bin/storyd, as installed (`-m storyd` would add runpy's importlib.util and contextlib)
LAUNCHER = str(Path(__file__).resolve().parents[1] / "bin" / "storyd")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("hook-imports")
    ws = demo_workspace(root)
    agents = AgentsEnv(root)
    env = dict(agents.env, PYTHONPATH=lean_pythonpath(), XDG_CACHE_HOME=str(root / "cache"))
    env.pop("STORYD_LOG_LEVEL", None)
    return ws, env


def _payload(event: str, ws: Path) -> dict[str, object]:
    if event == "session-start":
        return hook_payload("SessionStart", ws, source="startup")
    if event == "stop":
        return hook_payload("Stop", ws, stop_hook_active=False)
    return hook_payload("PostToolUse", ws, tool_name="Edit",
                        tool_input={"file_path": str(ws / STATE)})


def imported(event: str, ws: Path, env: dict[str, str]) -> tuple[list[str], bytes]:
    """Every module `storyd hook EVENT` imported (no daemon), and its stdout."""
    done = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", LAUNCHER, "hook", event],
        input=orjson.dumps(_payload(event, ws)), cwd="/", env=env, capture_output=True,
        timeout=60, check=False,
    )  # fmt: skip
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    names = [line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
             if line.startswith("import time:") and "imported package" not in line]
    assert "storyd.cli.commands.hook" in names, "the run did not take the hook's path"
    return names, done.stdout


def _heavy(names: list[str], forbidden: frozenset[str]) -> list[str]:
    return sorted({n for n in names if n in forbidden or n.split(".")[0] in forbidden
                   or any(n.startswith(f + ".") for f in forbidden)})


@pytest.mark.slow
def test_each_hook_without_a_daemon_imports_only_what_it_needs(
        setup: tuple[Path, dict[str, str]]) -> None:
    ws, env = setup
    assert not os.path.exists(env["STORYD_SOCKET"])  # no daemon
    cold, _ = imported("post-tool-use", ws, env)
    assert "tomllib" in cold, "the premise: the first run parses config.toml"
    # the first post-tool-use after another event rewrites the session's record (with
    # storyd.core.jsonio, not json); the second in a row only touches it
    for event in ("session-start", "stop", "post-tool-use", "post-tool-use"):
        names, out = imported(event, ws, env)
        assert _heavy(names, FORBIDDEN) == [], f"{event} imported {_heavy(names, FORBIDDEN)}"
        if event in ("session-start", "stop"):
            heavy = _heavy(names, NOT_IN_A_SCAN)
            assert heavy == [], f"{event} imported {heavy}"
        if event == "session-start":
            assert b"unit(s) in flight" in out  # the context was made: the scan ran
            assert "storyd.detectors.gitview" in names  # ... with its detectors
        elif event == "stop":
            assert "storyd.api.scan" in names
        else:
            assert "storyd.api.hooks.post_tool_use" in names
            heavy = _heavy(names, NOT_AFTER_A_TOOL)
            assert heavy == [], f"post-tool-use imported {heavy}"
            formats = [FORMAT_MODULES[n] for n in names if n in FORMAT_MODULES]
            assert formats == ["epic"], f"post-tool-use imported the formats {formats}"


@pytest.mark.slow
def test_the_measure_sees_a_forbidden_import(setup: tuple[Path, dict[str, str]]) -> None:
    """A plugin scan through importlib.metadata, if it came back, would be seen (the
    check can fail)."""
    _ws, env = setup
    done = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c",
         "import storyd.core.registry as r; list(r._scan_metadata())"],
        cwd="/", env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    names = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")]
    assert "importlib.metadata" in _heavy(names, FORBIDDEN)


def test_a_hook_runs_without_the_cyclic_collector(setup: tuple[Path, dict[str, str]]) -> None:
    """`storyd hook` pauses the collector (its passes over the modules it imports cost
    post-tool-use 0.8 ms) and gives it back to an in-process caller; another command
    keeps it."""
    ws, env = setup
    code = (
        "import gc, sys\n"
        "from storyd.cli import main\n"
        "passes = []\n"
        "gc.callbacks.append(lambda phase, info: passes.append(phase))\n"
        "main(sys.argv[1:])\n"
        "print(len(passes), gc.isenabled())\n"
    )
    runs = {}
    for argv in (["hook", "post-tool-use"], ["status", "--workspace", str(ws), "--direct"]):
        done = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd="/",
                              input=orjson.dumps(_payload("post-tool-use", ws)),
                              capture_output=True, text=False, timeout=60, check=False)  # fmt: skip
        runs[argv[0]] = done.stdout.decode().split()[-2:]
    assert runs["hook"] == ["0", "True"]
    assert int(runs["status"][0]) > 0 and runs["status"][1] == "True"
