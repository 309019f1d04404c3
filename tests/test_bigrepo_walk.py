"""A one-shot scan on a deep history (issue 31 follow-up): the commit-in-history check
asks git about the commits the units name, not for the whole branch.

Without a daemon, nothing reuses a walk: `rev-list --max-count=200000 TIP` listed every
commit of a 200,000-commit branch (1.4 s of a session-start) to answer for a few. A
one-shot view walks ONE_SHOT_WALK commits, asks `merge-base --is-ancestor` about each
older commit, and walks in full only when more than a few are older; the findings are
the daemon's (a full walk) byte for byte.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import orjson
import pytest
from agents_harness import LoggingGit, demo_workspace, hook_payload, run_hook
from git_harness import GitRepo

from storyd.config import Config
from storyd.detectors.gitview import open_view
from storyd.detectors.gitview.view import DEFAULT_WALK_LIMIT, ONE_SHOT_PROBES, ONE_SHOT_WALK

# pytest-timeout's own SIGALRM would make the scan keep its owner thread (not inline)
pytestmark = pytest.mark.timeout(0)

DEPTH = ONE_SHOT_WALK + 1000  # commits below the demo's own
STATE = "plans/epic-0049/execution-state.json"


def _deep_workspace(folder: Path, deep_tasks: int) -> tuple[Path, list[str]]:
    """storyd demo's workspace on top of DEPTH commits (git fast-import), and a story in
    flight whose `deep_tasks` DONE tasks name commits older than ONE_SHOT_WALK."""
    ws = folder / "ws"
    ws.mkdir(parents=True)
    stream = [b"commit refs/heads/main\nmark :1\ncommitter t <t@t> 1500000000 +0000\n"
              b"data 1\nr\nM 100644 inline src/f.txt\ndata 2\n0\n\n"]  # fmt: skip
    for i in range(2, DEPTH + 1):
        body = b"%d\n" % i
        stream.append(b"commit refs/heads/main\nmark :%d\ncommitter t <t@t> %d +0000\n"
                      b"data 1\nc\nM 100644 inline src/f%d.txt\ndata %d\n%s\n"
                      % (i, 1500000000 + i * 60, i % 50, len(body), body))  # fmt: skip
    marks = folder / "marks"
    for argv, data in ((["git", "init", "-q", "-b", "main"], None),
                       (["git", "fast-import", "--quiet", f"--export-marks={marks}"],
                        b"".join(stream)),
                       (["git", "checkout", "-q", "-f", "main"], None)):  # fmt: skip
        subprocess.run(argv, cwd=ws, input=data, check=True, capture_output=True, timeout=120)
    shas = dict(line.split() for line in marks.read_text().splitlines())
    demo_workspace(folder)  # prepare(): `git init` keeps the history, the demo on top
    deep = [shas[f":{1 + n * 97}"] for n in range(deep_tasks)]
    state = orjson.loads((ws / STATE).read_bytes())
    tasks: dict[str, object] = {
        f"TASK-0049-0011-{n:03d}": {"status": "DONE", "commitSha": sha}
        for n, sha in enumerate(deep, 1)
    }
    tasks["TASK-0049-0011-999"] = {"status": "PENDING"}
    state["stories"] = {"story-0049-0011": {"title": "deep", "tasks": tasks}, **state["stories"]}
    (ws / STATE).write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2))
    return ws, deep


class TestOneShotView:
    """A bounded view asks about old commits one by one, up to a count, then walks all."""

    @pytest.fixture
    def history(self, tmp_path: Path) -> tuple[GitRepo, list[str]]:
        repo = GitRepo(tmp_path / "repo").init()
        return repo, [repo.commit(f"c{i}") for i in range(12)]

    def test_a_few_old_commits_are_probed(self, history: tuple[GitRepo, list[str]]) -> None:
        repo, shas = history
        view = open_view(str(repo.path), walk_limit=3, widen_after=ONE_SHOT_PROBES)
        assert view is not None
        try:
            got = view.reachable([shas[0], shas[1], shas[-1]], "main", repo.head())
            assert got == dict.fromkeys([shas[0], shas[1], shas[-1]], True)
            assert view.stats["probes"] == 2 and view.stats["full_walks"] == 1
            assert view.walk_limit == 3
        finally:
            view.close()

    def test_many_old_commits_walk_in_full_once(self, history: tuple[GitRepo, list[str]]) -> None:
        repo, shas = history
        view = open_view(str(repo.path), walk_limit=3, widen_after=ONE_SHOT_PROBES)
        assert view is not None
        try:
            old = shas[: ONE_SHOT_PROBES + 1]
            assert view.reachable(old, "main", repo.head()) == dict.fromkeys(old, True)
            assert view.stats["probes"] == 0 and view.stats["full_walks"] == 2
            assert view.walk_limit == DEFAULT_WALK_LIMIT
            assert view.stats["walked"] == 3 + len(shas)
        finally:
            view.close()

    def test_probes_add_up_across_calls(self, history: tuple[GitRepo, list[str]]) -> None:
        repo, shas = history
        view = open_view(str(repo.path), walk_limit=3, widen_after=ONE_SHOT_PROBES)
        assert view is not None
        try:
            for sha in shas[:ONE_SHOT_PROBES]:
                assert view.reachable([sha], "main", repo.head()) == {sha: True}
            assert view.stats["probes"] == ONE_SHOT_PROBES
            assert view.reachable([shas[-5]], "main", repo.head()) == {shas[-5]: True}
            assert view.stats["probes"] == ONE_SHOT_PROBES and view.stats["full_walks"] == 2
        finally:
            view.close()


def _max_counts(starts: list[str], command: str) -> list[int]:
    found = []
    for start in starts:
        words = start.split()
        if command in words:
            found += [int(w.split("=")[1]) for w in words if w.startswith("--max-count=")]
    return found


@pytest.mark.slow
def test_session_start_on_a_deep_history_walks_a_bounded_part(
    tmp_path: Path,
) -> None:
    """Two DONE commits older than the bound, one amended away: three probes, no full walk."""
    git = LoggingGit(tmp_path)
    ws, _ = _deep_workspace(tmp_path, 2)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    git.env)
    assert done.returncode == 0, done.stderr
    assert b"unit(s) in flight" in done.stdout
    starts = git.starts()
    walks = _max_counts(starts, "rev-list")
    assert walks and max(walks) <= ONE_SHOT_WALK, starts
    probes = [s for s in starts if "merge-base --is-ancestor" in s]
    assert 2 <= len(probes) <= ONE_SHOT_PROBES, starts


@pytest.mark.slow
@pytest.mark.parametrize("deep_tasks", [2, ONE_SHOT_PROBES + 2])
def test_one_shot_and_daemon_scans_find_the_same_on_a_deep_history(
    tmp_path: Path, deep_tasks: int
) -> None:
    """The inline scan (bounded view) and the owner thread's (full walk): equal findings."""
    from storyd.api.scan import scan_workspaces

    ws, _ = _deep_workspace(tmp_path, deep_tasks)
    inline, _ = scan_workspaces([str(ws)], Config())
    owned: list[object] = []
    other = threading.Thread(target=lambda: owned.append(scan_workspaces([str(ws)], Config())[0]))
    other.start()
    other.join(120)
    assert owned, "the scan on another thread did not finish within 120 s"
    assert [dict(u) for u in inline] == [dict(u) for u in owned[0]]  # type: ignore[attr-defined]
    assert any(u["findingList"] for u in inline)
