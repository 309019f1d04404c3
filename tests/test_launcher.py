"""The installed `storyd` is our launcher (bin/storyd), not pip's wrapper that imports `re`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
from conftest import storyd_path
from daemon_harness import write_epic

from daemon import __version__

STORY = "story-0049-0001"


def launch(*args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([storyd_path(), *args], cwd=cwd, input=stdin, capture_output=True,
                          timeout=60, check=False)


def test_installed_script_is_the_launcher() -> None:
    text = Path(storyd_path()).read_text(encoding="utf-8")
    first, _, body = text.partition("\n")
    assert first.startswith("#!") and "python" in first
    assert "from daemon.cli import main" in body
    assert "import re" not in body


def test_exit_codes_and_streams(tmp_path: Path) -> None:
    write_epic(tmp_path, "0049", {STORY: {"tasks": {
        "TASK-0049-0001-001": {"status": "DONE", "completedAt": "2026-01-01T00:00:00Z"},
        "TASK-0049-0001-002": {"status": "PENDING"},
    }}})
    version = launch("--version", cwd=tmp_path)
    assert version.returncode == 0
    assert version.stdout.decode().strip() == f"storyd {__version__}"
    found = launch("resume", "--direct", "--staleness", "mtime", "--epic-id", "0049",
                   "--story-id", STORY, cwd=tmp_path, stdin=b"ignored\n")
    assert found.returncode == 0, found.stderr
    envelope = orjson.loads(found.stdout)
    assert [t["id"] for t in envelope["tasksCompleted"]] == ["TASK-0049-0001-001"]
    assert envelope["resumePoint"]
    missing = launch("resume", "--direct", "--epic-id", "0049", "--story-id",
                     "story-0049-0099", cwd=tmp_path)
    assert missing.returncode != 0
    assert missing.stdout == b""
    assert b"Story not in execution-state.json" in missing.stderr
    usage = launch("no-such-command", cwd=tmp_path)
    assert usage.returncode == 64
    assert usage.stderr


def test_resume_start_up_does_not_import_re(tmp_path: Path) -> None:
    write_epic(tmp_path, "0049", {STORY: {"tasks": {"TASK-0049-0001-001": {"status": "PENDING"}}}})
    done = subprocess.run(
        [sys.executable, "-X", "importtime", storyd_path(), "resume", "--direct",
         "--epic-id", "0049", "--story-id", STORY],
        cwd=tmp_path, capture_output=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    modules = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()
               if line.startswith("import time:")]
    assert "daemon.cli" in modules
    # An editable install's path finder may pull `re` in while `site` runs; after
    # that (the launcher and everything it imports), nothing may.
    after_site = modules[modules.index("site") + 1:]
    assert "re" not in after_site
