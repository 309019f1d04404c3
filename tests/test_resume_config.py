"""`storyd resume --direct` follows config.toml's staleness mode (and the flag beats it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from epic_state_harness import write_epic

STORY = "story-0049-0013"
ARGS = ("resume", "--story-id", STORY, "--epic-id", "49", "--direct")
OLD = "2026-01-01T00:00:00Z"


def _fresh_clone_like(ws: Path) -> None:
    """A story file committed before its task was done, with a brand-new mtime."""
    write_epic(
        ws, "0049", tasks={STORY: {"T1": {"status": "DONE", "completedAt": "2026-02-01T00:00:00Z"}}}
    )
    story = ws / "plans" / "epic-0049" / f"{STORY}.md"
    story.write_text("# story\n", encoding="utf-8")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": OLD,
        "GIT_COMMITTER_DATE": OLD,
    }
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "plan"]):
        subprocess.run(["git", *argv], cwd=ws, env=env, check=True, capture_output=True)


class TestConfiguredStaleness:
    """The direct read's default staleness mode comes from the configuration file."""

    def test_git_by_default_mtime_from_config_flag_wins(
        self,
        tmp_path: Path,
        isolated_env: dict[str, str],
        run_storyd: Callable[..., subprocess.CompletedProcess[bytes]],
    ) -> None:
        ws = tmp_path / "ws"
        ws.mkdir()
        _fresh_clone_like(ws)
        default = run_storyd(*ARGS, cwd=ws)
        assert default.returncode == 0 and b'"staleWarnings":[]' in default.stdout

        config = Path(isolated_env["XDG_CONFIG_HOME"]) / "storyd" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text('staleness = "mtime"\n', encoding="utf-8")
        configured = run_storyd(*ARGS, cwd=ws)
        assert configured.returncode == 0
        assert b'"staleWarnings":["Story file modified after task T1 DONE"]' in configured.stdout

        flagged = run_storyd(*ARGS, "--staleness", "git", cwd=ws)
        assert flagged.stdout == default.stdout
