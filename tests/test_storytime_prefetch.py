"""storytime.prefetch: one `git status` and one `git log` for many story files answer
exactly what each file's own two calls answer (git_commit_time with nothing ahead).

Every case is a real repository built by the real git; each path's answer is taken
twice in this process, from fresh caches: per file, and after a prefetch of them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from git_harness import GitRepo

from storyd.core import storytime, switches
from storyd.core.switches import CONFIG

CLEAN, OLDER, MODIFIED = "a/clean.md", "b/older.md", "c/mod.md"
STAGED, UNTRACKED = "d/st.md", "e/new.md"
GLOB, GLOBBED = "g/x[1].md", "g/x1.md"  # a pathspec pattern, and the file it matches
MOVED_FROM, MOVED_TO = "h/old.md", "h/renamed.md"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    switches.reset()
    yield
    switches.reset()


def _repo(tmp_path: Path) -> GitRepo:
    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("one", {OLDER: "old\n", MODIFIED: "m\n", STAGED: "s\n", GLOBBED: "g\n",
                        GLOB: "x\n", MOVED_FROM: "r\n"})  # fmt: skip
    repo.commit("two", {CLEAN: "c\n", "unrelated.txt": "u\n"})
    repo.commit("three", {"unrelated.txt": "v\n"})
    repo.write(MODIFIED, "changed\n")
    repo.write(STAGED, "staged\n")
    repo.git("add", STAGED)
    repo.write(UNTRACKED, "n\n")
    repo.write(GLOBBED, "dirty\n")  # dirty: a pattern `x[1].md` would match it
    repo.git("mv", MOVED_FROM, MOVED_TO)
    return repo


def _per_file(ws: str, paths: list[str]) -> dict[str, int | None]:
    switches.reset()
    return {p: storytime.git_commit_time(ws, p) for p in paths}


def _ahead(ws: str, paths: list[str]) -> tuple[dict[str, int | None], int]:
    """The answers after a prefetch, and how many the prefetch itself settled."""
    switches.reset()
    storytime.prefetch(ws, paths)
    storytime._settle(ws)
    settled = len(CONFIG.git_memo)
    return {p: storytime.git_commit_time(ws, p) for p in paths}, settled


class TestSameAnswers:
    """A prefetch changes how git is asked, never what a file's answer is."""

    def test_clean_dirty_untracked_renamed_and_patterns(self, tmp_path: Path) -> None:
        repo = _repo(tmp_path)
        ws = str(repo.path)
        paths = [CLEAN, OLDER, MODIFIED, STAGED, UNTRACKED, GLOB, GLOBBED, MOVED_TO]
        expected = _per_file(ws, paths)
        assert expected[CLEAN] is not None and expected[OLDER] is not None
        assert expected[CLEAN] != expected[OLDER]  # the walk must tell them apart
        assert expected[MODIFIED] is None and expected[UNTRACKED] is None
        got, settled = _ahead(ws, paths)
        assert got == expected
        assert settled == len(paths) - 1  # all but the pattern, which is asked per file

    def test_a_merge_on_the_way_leaves_the_rest_to_each_file(self, tmp_path: Path) -> None:
        repo = GitRepo(tmp_path / "ws").init()
        repo.commit("base", {OLDER: "1\n", CLEAN: "1\n"})
        repo.git("checkout", "-q", "-b", "side")
        repo.commit("side", {OLDER: "side\n"})
        repo.git("checkout", "-q", "main")
        repo.commit("main", {CLEAN: "2\n"})
        repo.clock += 60
        repo.git("merge", "-q", "--no-ff", "-m", "merge", "side")
        ws = str(repo.path)
        expected = _per_file(ws, [CLEAN, OLDER])
        got, settled = _ahead(ws, [CLEAN, OLDER])
        assert got == expected
        assert settled == 0  # the merge commit came first: nothing vouched for in one walk

    def test_a_merge_treesame_to_its_second_parent_is_seen(self, tmp_path: Path) -> None:
        """A cherry-pick then a merge of its branch: for both paths the merge is TREESAME
        to the second parent, which git's default simplification would walk (one path's
        own `log -1` walks the first); the walk must see the merge and stop."""
        repo = GitRepo(tmp_path / "ws").init()
        repo.commit("base", {"base.txt": "b\n"})
        repo.git("checkout", "-q", "-b", "feature")
        repo.commit("p", {OLDER: "p\n"})
        picked = repo.git("rev-parse", "HEAD").strip()
        repo.commit("q", {CLEAN: "q\n"})
        repo.git("checkout", "-q", "main")
        repo.clock += 100
        repo.git("cherry-pick", picked)
        repo.clock += 100
        repo.git("merge", "-q", "--no-ff", "-m", "merge", "feature")
        ws = str(repo.path)
        expected = _per_file(ws, [OLDER, CLEAN])
        got, _ = _ahead(ws, [OLDER, CLEAN])
        assert got == expected

    @pytest.mark.parametrize("spelled", ["./a/clean.md", "a//clean.md", "a/../a/clean.md",
                                         "a/del\x7f.md"])
    def test_names_git_would_print_otherwise_are_asked_per_file(self, tmp_path: Path,
                                                                spelled: str) -> None:
        repo = GitRepo(tmp_path / "ws").init()
        repo.commit("one", {CLEAN: "c\n", "a/del\x7f.md": "d\n"})
        ws = str(repo.path)
        expected = _per_file(ws, [spelled])
        assert expected[spelled] is not None
        got, _ = _ahead(ws, [spelled])
        assert got == expected

    def test_a_file_no_commit_touched(self, tmp_path: Path) -> None:
        repo = GitRepo(tmp_path / "ws").init()
        repo.commit("one", {CLEAN: "c\n"})
        ignored = "i/ignored.md"
        repo.commit("ignore", {".gitignore": "i/\n"})
        repo.write(ignored, "x\n")
        ws = str(repo.path)
        expected = _per_file(ws, [CLEAN, ignored])
        assert expected[ignored] is None
        got, settled = _ahead(ws, [CLEAN, ignored])
        assert got == expected and settled == 2

    def test_not_a_repository_starts_nothing(self, tmp_path: Path) -> None:
        folder = tmp_path / "plain"
        folder.mkdir()
        (folder / "s.md").write_text("x\n")
        storytime.prefetch(str(folder), ["s.md"])
        assert not CONFIG.git_pins.__dict__.get("ahead")
        assert storytime.git_commit_time(str(folder), "s.md") is None

    def test_the_daemons_batching_is_left_alone(self, tmp_path: Path) -> None:
        repo = _repo(tmp_path)
        switches.configure(git_batching=True)
        storytime.prefetch(str(repo.path), [CLEAN])
        assert not CONFIG.git_pins.__dict__.get("ahead")

