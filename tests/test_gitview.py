"""storyd.detectors.gitview: real repositories in tmp dirs, with fixed dates so shas never vary."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from git_harness import EPOCH, GitRepo, age, ambiguous_commit_prefix
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.core import storytime
from storyd.detectors.gitview import (
    AMBIGUOUS,
    FOUND,
    INVALID,
    MISSING,
    GitError,
    GitView,
    close_views,
    find_root,
    git_context,
    hold_tips,
    open_view,
    refresh_views,
    view_for,
)

OpenView = Callable[..., GitView]


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """An empty repository on `main`."""
    return GitRepo(tmp_path / "repo").init()


@pytest.fixture
def view_of() -> Iterator[OpenView]:
    """Open views on repositories; every one is closed after the test."""
    opened: list[GitView] = []

    def open_it(repo: GitRepo, **kwargs: int) -> GitView:
        view = open_view(str(repo.path), **kwargs)
        assert view is not None
        opened.append(view)
        return view

    yield open_it
    for view in opened:
        view.close()


class TestObjects:
    """Existence through one persistent cat-file: full, abbreviated, missing, ambiguous."""

    def test_full_and_abbreviated_names_resolve(self, repo: GitRepo, view_of: OpenView) -> None:
        sha = repo.commit("one")
        view = view_of(repo)
        infos = view.lookup([sha, sha[:7], sha[:7].upper()])
        assert [i.state for i in infos.values()] == [FOUND, FOUND, FOUND]
        assert {i.sha for i in infos.values()} == {sha}
        assert infos[sha].kind == "commit"
        assert view.exists(sha[:4]) and view.resolve(sha[:10]) == sha

    @pytest.mark.parametrize("name", ["0000000", "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef"])
    def test_missing(self, repo: GitRepo, view_of: OpenView, name: str) -> None:
        repo.commit("one")
        view = view_of(repo)
        assert view.lookup([name])[name].state == MISSING
        assert not view.exists(name)

    @pytest.mark.parametrize("name", ["abc", "ghi789", "HEAD", "main", "", "abcd efgh", "a" * 65])
    def test_names_that_are_not_hex_are_invalid(
        self, repo: GitRepo, view_of: OpenView, name: str
    ) -> None:
        repo.commit("one")
        view = view_of(repo)
        assert view.lookup([name])[name].state == INVALID

    def test_ambiguous_prefix(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.fast_import(300)
        sha, prefix = ambiguous_commit_prefix(repo)
        view = view_of(repo)
        assert view.lookup([prefix])[prefix].state == AMBIGUOUS
        assert view.lookup([sha])[sha].state == FOUND

    def test_many_ambiguous_answers_never_stall(self, repo: GitRepo, view_of: OpenView) -> None:
        """git writes candidate hints to stderr for each; they are drained as they come."""
        repo.fast_import(300)
        _, prefix = ambiguous_commit_prefix(repo)
        view = view_of(repo)
        for _ in range(800):  # about 150 KB of hints: more than a pipe holds
            view.refresh()
            assert view.lookup([prefix])[prefix].state == AMBIGUOUS
        assert view.stats["lookups"] > 800

    def test_answers_are_cached_while_no_object_arrives(
        self, repo: GitRepo, view_of: OpenView
    ) -> None:
        sha = repo.commit("one")
        age(repo)
        view = view_of(repo)
        names = [sha, sha[:8], "0000000", "abcdef12"]
        first = view.lookup(names)
        asked = view.stats["lookups"]
        assert view.lookup(names) == first
        assert view.stats["lookups"] == asked
        repo.git("hash-object", "-w", "--stdin", input=b"another\n")
        blob = repo.git("hash-object", "--stdin", input=b"another\n")
        view.lookup([*names, blob])
        assert view.stats["lookups"] == asked + 1 + sum(n[:2] == blob[:2] for n in names[1:])

    def test_an_object_that_arrives_later_is_found(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("one")
        view = view_of(repo)
        blob = repo.git("hash-object", "--stdin", input=b"later\n")
        assert not view.exists(blob)
        repo.git("hash-object", "-w", "--stdin", input=b"later\n")
        assert view.exists(blob)


class TestRefs:
    """Tips are read afresh on every question: branches, tags, HEAD, detached HEAD."""

    def test_tips(self, repo: GitRepo, view_of: OpenView) -> None:
        first = repo.commit("one")
        second = repo.commit("two")
        repo.git("tag", "-a", "v1", "-m", "annotated", first)
        view = view_of(repo)
        assert view.tip_sha("main") == second
        assert view.tip_sha("HEAD") == second
        assert view.tip_sha("refs/heads/main") == second
        assert view.tip_sha("v1") == first  # an annotated tag peels to its commit
        for name in ("nope", "", "-x", "a b"):
            assert view.tip_sha(name) is None

    def test_tip_moves_are_seen_without_refresh(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("one")
        view = view_of(repo)
        assert view.tip_sha("main") == repo.head()
        third = repo.commit("two")
        assert view.tip_sha("main") == third
        repo.git("pack-refs", "--all")
        assert view.tip_sha("main") == third

    def test_current_branch_and_detached_head(self, repo: GitRepo, view_of: OpenView) -> None:
        first = repo.commit("one")
        repo.git("checkout", "-q", "-b", "feature/x")
        view = view_of(repo)
        assert view.current_branch() == "feature/x"
        assert view.head_name() == "feature/x"
        repo.git("checkout", "-q", "--detach", first)
        assert view.current_branch() is None
        assert view.head_name() == "HEAD"

    def test_default_branch(self, repo: GitRepo, view_of: OpenView, tmp_path: Path) -> None:
        repo.commit("one")
        view = view_of(repo)
        assert view.default_branch() == "main"
        clone = repo.clone(tmp_path / "clone")
        clone.git("checkout", "-q", "-b", "topic")
        assert view_of(clone).default_branch() == "origin/HEAD"

    def test_shallow_clone(self, repo: GitRepo, view_of: OpenView, tmp_path: Path) -> None:
        repo.commit("one")
        repo.commit("two")
        assert not view_of(repo).is_shallow()
        clone = repo.clone(tmp_path / "shallow", "--depth", "1")
        assert view_of(clone).is_shallow()


class TestHeldTips:
    """hold_tips: one pass over many units sees one state of the refs, read once."""

    def test_a_held_tip_is_read_once_and_released_afresh(
        self, repo: GitRepo, view_of: OpenView
    ) -> None:
        first = repo.commit("one")
        view = view_of(repo)
        view.hold_tips(True)
        assert view.tip_sha("main") == first
        asked = view.stats["lookups"]
        second = repo.commit("two")
        assert view.tip_sha("main") == first  # the pass's state of the refs
        assert view.tip_sha("nope") is None and view.tip_sha("nope") is None
        assert view.stats["lookups"] == asked + 1  # main once, nope once
        view.hold_tips(False)
        assert view.tip_sha("main") == second  # afresh again

    def test_the_registry_holds_views_opened_during_the_pass(self, repo: GitRepo) -> None:
        first = repo.commit("one", {"a": "1\n"})
        local: dict[str, object] = {}
        try:
            hold_tips(local, True)
            view = view_for(local, str(repo.path))
            assert view is not None and view.tip_sha("main") == first
            repo.commit("two", {"a": "2\n"})
            assert view.tip_sha("main") == first
            hold_tips(local, False)
            assert view.tip_sha("main") == repo.head()
        finally:
            close_views(local)


    def test_the_checked_out_branch_is_read_once_per_pass(
        self, repo: GitRepo, view_of: OpenView
    ) -> None:
        repo.commit("one")
        view = view_of(repo)
        view.hold_tips(True)
        assert view.current_branch() == "main"
        repo.git("checkout", "-q", "-b", "topic")
        assert view.current_branch() == "main"  # the pass's HEAD
        view.hold_tips(False)
        assert view.current_branch() == "topic"  # afresh once the pass ends
        repo.git("checkout", "-q", "--detach")
        assert view.current_branch() is None
        view.hold_tips(True)
        assert view.current_branch() is None and view.head_name() == "HEAD"
        repo.git("checkout", "-q", "main")
        assert view.current_branch() is None  # a detached HEAD is held as such
        view.hold_tips(False)
        assert view.current_branch() == "main"

    def test_a_workspace_root_is_found_once_per_pass(
        self, repo: GitRepo, tmp_path: Path
    ) -> None:
        repo.commit("one")
        inner = repo.path / "plans"
        inner.mkdir()
        local: dict[str, object] = {}
        try:
            hold_tips(local, True)
            assert view_for(local, str(inner)) is not None
            nested = GitRepo(inner).init()  # a repository appears inside, mid-pass
            nested.commit("nested")
            view = view_for(local, str(inner))
            assert view is not None and view.tip_sha("main") == repo.head()
            hold_tips(local, False)
            view = view_for(local, str(inner))
            assert view is not None and view.tip_sha("main") == nested.head()
        finally:
            close_views(local)


class TestPaths:
    """The staleness rule has one home, storyd.core.storytime: its answer in every path state."""

    @pytest.mark.parametrize("state", ["clean", "modified", "staged", "untracked", "absent",
                                       "deleted"])
    def test_storytime_in_every_path_state(self, repo: GitRepo, state: str) -> None:
        repo.commit("base", {"other.txt": "x\n"})
        if state not in {"untracked", "absent"}:
            repo.commit("story", {"plans/story.md": "# story\n"})
        repo.commit("later", {"other.txt": "y\n"})
        if state in ("modified", "staged"):
            repo.write("plans/story.md", "# changed\n")
        if state == "staged":
            repo.git("add", "plans/story.md")
        if state == "untracked":
            repo.write("plans/story.md", "# new\n")
        if state == "deleted":
            (repo.path / "plans/story.md").unlink()
        found = storytime.git_commit_time(str(repo.path), "plans/story.md")
        assert found == (EPOCH + 120 if state == "clean" else None)

    def test_relpath(self, repo: GitRepo, view_of: OpenView, tmp_path: Path) -> None:
        repo.commit("one")
        view = view_of(repo)
        assert view.relpath(str(repo.path / "a" / "b.md")) == "a/b.md"
        assert view.relpath(str(repo.path)) == "."
        assert view.relpath(str(tmp_path / "elsewhere")) is None


class TestAncestry:
    """One walk per tip, kept as a set, extended on fast-forward, redone otherwise."""

    def test_is_ancestor(self, repo: GitRepo, view_of: OpenView) -> None:
        first = repo.commit("one")
        repo.git("checkout", "-q", "-b", "side")
        side = repo.commit("side")
        repo.git("checkout", "-q", "main")
        second = repo.commit("two")
        view = view_of(repo)
        assert view.is_ancestor(first, "main")
        assert view.is_ancestor(second, "main")
        assert not view.is_ancestor(side, "main")
        assert view.is_ancestor(side, "side")
        with pytest.raises(GitError):
            view.is_ancestor(first, "nope")

    def test_fast_forward_walks_only_the_new_commits(
        self, repo: GitRepo, view_of: OpenView
    ) -> None:
        shas = [repo.commit(f"c{i}") for i in range(5)]
        view = view_of(repo)
        before = view.reachable(shas, "main", repo.head())
        assert all(before.values())
        assert view.stats["full_walks"] == 1 and view.stats["walked"] == 5
        new = [repo.commit(f"n{i}") for i in range(3)]
        after = view.reachable(shas + new, "main", repo.head())
        assert all(after.values())
        assert view.stats["full_walks"] == 1
        assert view.stats["incremental_walks"] == 1
        assert view.stats["walked"] == 5 + 3

    def test_a_prefetched_walk_is_the_walk(self, repo: GitRepo, view_of: OpenView) -> None:
        """The walk begun before the lookup answers as the walk begun after it, and is
        read once; one of a tip that moved since is dropped and walked afresh; a walked
        tip is not prefetched (its cache or fast-forward serves)."""
        shas = [repo.commit(f"c{i}") for i in range(4)]
        view = view_of(repo)
        view.prefetch_walk("main", repo.head())
        assert view.lookup(shas)[shas[0]].kind == "commit"
        assert all(view.reachable(shas, "main", repo.head()).values())
        assert view.stats["full_walks"] == 1 and view.stats["walked"] == 4
        moved = view_of(repo)
        moved.prefetch_walk("main", repo.head())
        new = repo.commit("new")
        assert all(moved.reachable([*shas, new], "main", new).values())
        assert moved.stats["walked"] == 5  # the new tip's walk, not the stale one
        moved.prefetch_walk("main", new)
        assert moved._early is None  # walked: nothing begun
        lost = view_of(repo)
        lost.prefetch_walk("main", "0" * 40)  # a tip git cannot walk: its error, as ever
        with pytest.raises(GitError, match="git rev-list failed"):
            lost.reachable(shas, "main", "0" * 40)
        closed = view_of(repo)
        closed.prefetch_walk("main", repo.head())
        early = closed._early
        closed.close()
        assert early is not None and early[1].poll() is not None  # ended with the view

    @pytest.mark.slow
    @settings(max_examples=15, deadline=None)
    @given(st.lists(st.sampled_from(["commit", "commit", "reset", "branch"]), max_size=8))
    def test_cached_ancestry_equals_a_fresh_walk(self, ops: list[str]) -> None:
        """Whatever the tip does (move on, move back, switch), the cached answer is git's."""
        with tempfile.TemporaryDirectory() as folder:
            repo = GitRepo(Path(folder) / "repo").init()
            shas = [repo.commit("root")]
            view = open_view(str(repo.path))
            assert view is not None
            try:
                for n, op in enumerate(ops):
                    if op == "commit":
                        shas.append(repo.commit(f"c{n}", {f"f{n}": "x\n"}))
                    elif op == "reset":
                        repo.git("reset", "-q", "--hard", shas[n % len(shas)])
                    else:
                        repo.git("checkout", "-q", "-B", f"b{n}", shas[(n * 7) % len(shas)])
                    tip = repo.head()
                    truth = set(repo.git("rev-list", tip).split())
                    got = view.reachable(shas, view.head_name(), tip)
                    assert got == {sha: sha in truth for sha in shas}
            finally:
                view.close()

    def test_a_reset_is_not_a_fast_forward(self, repo: GitRepo, view_of: OpenView) -> None:
        shas = [repo.commit(f"c{i}") for i in range(4)]
        view = view_of(repo)
        assert all(view.reachable(shas, "main", repo.head()).values())
        repo.git("reset", "-q", "--hard", shas[1])
        result = view.reachable(shas, "main", repo.head())
        assert result == {shas[0]: True, shas[1]: True, shas[2]: False, shas[3]: False}
        assert view.stats["full_walks"] == 2 and view.stats["incremental_walks"] == 0

    def test_a_bounded_walk_falls_back_to_exact_answers(
        self, repo: GitRepo, view_of: OpenView
    ) -> None:
        shas = [repo.commit(f"c{i}") for i in range(6)]
        repo.git("checkout", "-q", "-b", "side", shas[2])
        side = repo.commit("side")
        repo.git("checkout", "-q", "main")
        view = view_of(repo, walk_limit=2)
        result = view.reachable([*shas, side], "main", repo.head())
        assert result == {**dict.fromkeys(shas, True), side: False}
        assert view.stats["walked"] == 2

    def test_merge_base(self, repo: GitRepo, view_of: OpenView) -> None:
        base = repo.commit("base")
        repo.git("checkout", "-q", "-b", "side")
        side = repo.commit("side")
        repo.git("checkout", "-q", "main")
        main = repo.commit("main")
        view = view_of(repo)
        assert view.merge_base(side, main) == base
        repo.git("checkout", "-q", "--orphan", "lonely")
        lonely = repo.commit("lonely")
        assert view.merge_base(lonely, main) is None


class TestRewrites:
    """A rewritten commit's replacement is found by `git patch-id --stable`."""

    def test_amend(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("base", {"a.txt": "a\n"})
        old = repo.commit("task 1", {"b.txt": "b\n"})
        new = repo.commit("task 1, reworded", amend=True)
        view = view_of(repo)
        assert not view.is_ancestor(old, "main")
        assert view.replacement(old, "main", 500) == new

    def test_rebase(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("base", {"a.txt": "a\n"})
        repo.git("checkout", "-q", "-b", "topic")
        olds = [repo.commit(f"task {i}", {f"t{i}.txt": f"{i}\n"}) for i in range(3)]
        repo.git("checkout", "-q", "main")
        repo.commit("upstream", {"u.txt": "u\n"})
        repo.git("checkout", "-q", "topic")
        repo.git("rebase", "-q", "main")
        news = repo.git("rev-list", "--reverse", "main..topic").split()
        view = view_of(repo)
        assert [view.replacement(o, "topic", 500) for o in olds] == news

    def test_reset_has_no_replacement(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("base", {"a.txt": "a\n"})
        old = repo.commit("task", {"b.txt": "b\n"})
        repo.git("reset", "-q", "--hard", "HEAD~1")
        repo.commit("other", {"c.txt": "c\n"})
        view = view_of(repo)
        assert view.replacement(old, "main", 500) is None

    def test_the_search_is_bounded(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("base", {"a.txt": "a\n"})
        old = repo.commit("task", {"b.txt": "b\n"})
        new = repo.commit("task again", amend=True)
        for i in range(3):
            repo.commit(f"after {i}", {f"x{i}.txt": "x\n"})
        view = view_of(repo)
        assert view.replacement(old, "main", 3) is None
        assert view.replacement(old, "main", 4) == new

    def test_patch_ids_are_computed_once(self, repo: GitRepo, view_of: OpenView) -> None:
        shas = [repo.commit(f"c{i}", {f"f{i}": f"{i}\n"}) for i in range(3)]
        view = view_of(repo)
        first = view.patch_ids(shas)
        assert all(first.values()) and len(set(first.values())) == 3
        assert view.patch_ids(shas) == first
        assert view.stats["patch_ids"] == 3

    def _rewritten(self, repo: GitRepo) -> tuple[list[str], str]:
        """A topic branch of five kinds of commits (a new file, an edit, a rename, an
        empty commit, a merge), rebased onto main: (the old commits, the new tip)."""
        repo.commit("base", {"a.txt": "a\n", "r.txt": "r\n" * 20})
        repo.git("checkout", "-q", "-b", "topic")
        olds = [repo.commit("task 1", {"t1.txt": "1\n"}), repo.commit("task 2", {"a.txt": "b\n"})]
        repo.git("mv", "r.txt", "s.txt")
        repo.git("commit", "-q", "-m", "task 3, a rename")
        olds.append(repo.git("rev-parse", "HEAD").strip())
        repo.git("commit", "-q", "--allow-empty", "-m", "task 4, nothing")
        olds.append(repo.git("rev-parse", "HEAD").strip())
        repo.git("checkout", "-q", "-b", "side", "HEAD~3")
        repo.commit("side work", {"side.txt": "s\n"})
        repo.git("checkout", "-q", "topic")
        repo.git("merge", "-q", "--no-ff", "-m", "a merge", "side")
        olds.append(repo.git("rev-parse", "HEAD").strip())
        repo.git("checkout", "-q", "main")
        repo.commit("upstream", {"u.txt": "u\n"})
        repo.git("checkout", "-q", "topic")
        repo.git("rebase", "-q", "--rebase-merges", "--keep-empty", "main")
        return olds, repo.git("rev-parse", "topic").strip()

    @pytest.mark.slow
    def test_a_cold_view_answers_as_a_warm_one(self, repo: GitRepo, view_of: OpenView) -> None:
        """The cold path (lost commits' and candidates' patch ids from two pipes side by
        side, no rev-list) gives what one commit at a time through the warm path gives:
        for every subset of lost commits, a merge or an empty one among them or not."""
        olds, tip = self._rewritten(repo)
        oracle = {}
        for old in olds:
            warm = view_of(repo)
            warm.patch_ids([tip])  # a cache to reuse: the rev-list path
            oracle[old] = warm.replacement(old, "topic", 500)
        assert [oracle[o] is not None for o in olds] == [True, True, True, False, False]
        for subset in (olds[:3], olds[:4], olds[2:], [olds[4]], olds):
            cold = view_of(repo)
            asked: list[str] = []
            run = cold._run

            def spy(
                *args: str, ok: tuple[int, ...] = (0,), run=run, asked: list[str] = asked
            ) -> tuple[int, str]:
                asked.append(args[0])
                return run(*args, ok=ok)

            cold._run = spy  # type: ignore[method-assign]
            assert cold.replacements(subset, "topic", 500) == {o: oracle[o] for o in subset}
            mixed = any(o in olds[3:] for o in subset) and any(o in olds[:3] for o in subset)
            assert ("rev-list" in asked) == mixed, (subset, asked)  # none: nothing to find

    def test_a_cold_view_keeps_the_search_bound(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("base", {"a.txt": "a\n"})
        old = repo.commit("task", {"b.txt": "b\n"})
        new = repo.commit("task again", amend=True)
        for i in range(3):
            repo.commit(f"after {i}", {f"x{i}.txt": "x\n"})
        assert view_of(repo).replacements([old], "main", 3) == {old: None}
        assert view_of(repo).replacements([old], "main", 4) == {old: new}


class TestScans:
    """Recent commits of a tip, since its merge-base with the default branch."""

    def test_commits_since_base_and_by_path(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("base", {"a.txt": "a\n"})
        repo.git("checkout", "-q", "-b", "topic")
        one = repo.commit("one\n\nbody TASK-1", {"x/one.txt": "1\n"})
        two = repo.commit("two", {"two.txt": "2\n"})
        view = view_of(repo)
        tip = repo.head()
        base = view.scan_base(tip, "main")
        assert base == repo.head("main")
        assert [c.sha for c in view.commits(tip, base, 10)] == [two, one]
        assert "body TASK-1" in view.commits(tip, base, 10)[1].message
        assert [c.sha for c in view.commits(tip, base, 1)] == [two]
        touching = view.commits(tip, base, 10, ("x/one.txt", "missing.txt"))
        assert [(c.sha, c.paths) for c in touching] == [(one, ("x/one.txt",))]
        assert touching[0].time == EPOCH + 120

    def test_no_base_on_the_default_branch_itself(self, repo: GitRepo, view_of: OpenView) -> None:
        repo.commit("one")
        view = view_of(repo)
        assert view.scan_base(repo.head(), "main") is None
        assert view.scan_base(repo.head(), None) is None
        assert view.scan_base(repo.head(), "nope") is None


class TestFactory:
    """git_context finds or makes the owner thread's view of the workspace's repository."""

    def test_views_are_cached_per_repository(self, repo: GitRepo) -> None:
        repo.commit("one", {"plans/x.md": "x\n"})
        local: dict[str, object] = {}
        try:
            a = view_for(local, str(repo.path))
            b = view_for(local, str(repo.path / "plans"))
            assert a is not None and a is b
            assert find_root(str(repo.path / "plans")) == str(repo.path.resolve())
            refresh_views(local)
            assert view_for(local, str(repo.path)) is a
        finally:
            close_views(local)
        assert view_for(local, str(repo.path)) is not a
        close_views(local)

    def test_not_a_repository(self, tmp_path: Path) -> None:
        from storyd.core.model import Unit

        local: dict[str, object] = {}
        (tmp_path / "plain").mkdir()
        unit = Unit("epic", "s.json", "k", (), branch="feature")
        context = git_context(local, str(tmp_path / "plain"), unit, None, "mtime")
        assert context.git is None and context.tip == "feature" and context.staleness == "mtime"

    def test_a_removed_repository_is_forgotten(self, repo: GitRepo) -> None:
        import shutil

        repo.commit("one")
        local: dict[str, object] = {}
        try:
            assert view_for(local, str(repo.path)) is not None
            shutil.rmtree(repo.path / ".git")
            assert view_for(local, str(repo.path)) is None
        finally:
            close_views(local)

    def test_git_absent(self, repo: GitRepo) -> None:
        """With no `git` on PATH there is no view; the built-ins run and nothing raises."""
        repo.commit("one")
        script = (
            "from storyd.detectors import load\n"
            "from storyd.detectors.runner import Runner\n"
            "from storyd.detectors.gitview import git_context, view_for\n"
            "from storyd.core.model import DONE, PENDING, Task, Unit\n"
            "local = {}\n"
            "tasks = (Task('T-0001-0001', 'DONE', DONE, commit_sha='abc1234'),\n"
            "         Task('T-0001-0002', 'PENDING', PENDING))\n"
            "unit = Unit('epic', 's', 'k', tasks, story_file='story.md')\n"
            f"c = git_context(local, {str(repo.path)!r}, unit, None, 'git')\n"
            "print(c.git is None, view_for(local, '.') is None)\n"
            "runner = Runner(load(), context_factory=git_context)\n"
            f"for f in runner.run({str(repo.path)!r}, unit, None):\n"
            "    print(f.detector, f.code, f.severity)\n"
            "runner.close()\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_PYTHON")}
        env["PATH"] = str(Path(sys.executable).parent)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              check=False, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        lines = done.stdout.decode().splitlines()
        assert lines == ["True True", "commit-in-history no-repository info"]

    def test_a_view_refuses_other_threads(self, repo: GitRepo, view_of: OpenView) -> None:
        import threading

        repo.commit("one")
        view = view_of(repo)
        errors: list[BaseException] = []

        def use() -> None:
            try:
                view.lookup([repo.head()])
            except GitError as exc:
                errors.append(exc)

        thread = threading.Thread(target=use)
        thread.start()
        thread.join(timeout=10)
        assert len(errors) == 1 and "owner thread" in str(errors[0])
