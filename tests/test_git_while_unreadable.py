"""Git moves while a state file does not parse; the file is then mended to the very bytes
of its last good read. The detectors did not run on the last good units at the git
recheck (nothing is built on a broken file), so the mended read must run them: keeping
the findings from before git moved answered a stop hook with no held commit (seen under
the macOS stand-in, where the commit's event comes late, issue 41)."""

from __future__ import annotations

from pathlib import Path

from epic_state_harness import write_epic

from storyd.api.answers import Answer, Options
from storyd.core.model import Finding, Unit
from storyd.server.engine import Engine

REL = "plans/epic-0049/execution-state.json"
S1 = "story-0049-0001"


def test_a_mend_to_the_same_bytes_after_git_moved_runs_the_detectors(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    good = write_epic(root, "0049", tasks={S1: {"T1": {"status": "done"}}}).read_bytes()
    git = {"moved": False}  # stands for git: a commit no task records yet

    def detect(workspace: str, unit: Unit, answer: Answer) -> tuple[Finding, ...]:
        if not git["moved"]:
            return ()
        return (Finding("probe", "unrecorded", "warning", "a commit", "T1", {}),)

    engine = Engine(Options(staleness="mtime"), detect=detect)
    ws = engine.add_workspace(str(root))
    engine.scan(ws)
    (root / REL).write_bytes(b'{"epic": "0049", "stories": {')  # the agent breaks it
    engine.touch(ws, REL)
    git["moved"] = True
    engine.recheck(ws)  # the commit's event: the file does not parse
    (root / REL).write_bytes(good)  # mended to the last good bytes
    engine.touch(ws, REL)
    entry = engine.lookup(str(root), REL, S1)
    assert entry is not None
    assert [f.code for f in entry.findings] == ["unrecorded"]
