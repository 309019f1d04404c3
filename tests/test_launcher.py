"""The installed `storyd` launcher (bin/storyd): same bytes and exit codes as the module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import STORYD
from epic_state_harness import write_epic

S = "story-0049-0013"
IDS = ("--story-id", S, "--epic-id", "0049", "--direct")
STATE = Path("plans/epic-0049/execution-state.json")


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=60, check=False)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    write_epic(ws, "0049", tasks={S: {"T1": {"status": "DONE"}, "T2": {"status": "PENDING"}}})
    return ws


def torn(ws: Path) -> None:
    (ws / STATE).write_bytes(b'{"stories": {')


def missing(ws: Path) -> None:
    (ws / STATE).unlink()


CASES = [
    pytest.param((), None, 0, id="answer-0"),
    pytest.param((), missing, 1, id="missing-state-1"),
    pytest.param(("--story-id", "story-0049-9999", "--epic-id", "0049", "--direct"), None, 2,
                 id="unknown-story-2"),
    pytest.param(("--no-such-flag",), None, 64, id="usage-64"),
    pytest.param((), torn, 65, id="torn-json-65"),
]


class TestLauncher:
    """`storyd resume` through the launcher equals `python -m storyd resume`."""

    def test_is_our_launcher(self) -> None:
        """The installed file is bin/storyd (no `re`), not pip's generated wrapper."""
        text = Path(STORYD).read_text(encoding="utf-8")
        assert "from storyd.cli import main" in text
        assert "import re" not in text

    @pytest.mark.parametrize(("args", "damage", "code"), CASES)
    def test_same_as_module(self, workspace: Path, isolated_env: dict[str, str],
                            args: tuple[str, ...], damage: object, code: int) -> None:
        if callable(damage):
            damage(workspace)
        argv = list(args or IDS)
        launched = run([STORYD, "resume", *argv], workspace, isolated_env)
        module = run([sys.executable, "-m", "storyd", "resume", *argv], workspace,
                     isolated_env)
        assert b"Traceback" not in launched.stderr, launched.stderr
        assert launched.returncode == module.returncode == code
        assert launched.stdout == module.stdout
        assert launched.stderr == module.stderr
        if code == 0:
            assert launched.stdout.startswith(b'{"resumePoint":')

    def test_runs_through_a_symlink(self, workspace: Path, isolated_env: dict[str, str],
                                    tmp_path: Path) -> None:
        """A symlink elsewhere (e.g. ~/.local/bin/storyd, as pipx makes) still runs it."""
        link = tmp_path / "elsewhere" / "storyd"
        link.parent.mkdir()
        link.symlink_to(STORYD)
        linked = run([str(link), "resume", *IDS], workspace, isolated_env)
        direct = run([STORYD, "resume", *IDS], workspace, isolated_env)
        assert linked.returncode == 0, linked.stderr
        assert linked.stdout == direct.stdout
        assert linked.stdout.startswith(b'{"resumePoint":')


def test_resume_start_up_does_not_import_re(workspace: Path) -> None:
    """Nothing the launcher imports after `site` pulls in `re` (pip's wrapper did)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", STORYD, "resume", *IDS],
        cwd=workspace, capture_output=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    modules = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()
               if line.startswith("import time:")]
    assert "storyd.cli" in modules
    # An editable install's path finder may pull `re` in while `site` runs; after
    # that (the launcher and everything it imports), nothing may.
    after_site = modules[modules.index("site") + 1:]
    assert "re" not in after_site
