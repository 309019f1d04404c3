"""The Runner's cached git views (detectors/gitview/registry.py) stay bounded: each holds
a `git cat-file` child and its pipes, and a daemon that watched and let go of fourteen
repositories once kept fourteen children until it stopped (a fresh user's try)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from git_harness import GitWorkspace

from storyd.detectors.gitview import registry


def _repo(root: Path) -> str:
    repo = GitWorkspace(root).init()
    repo.commit("initial", {"README": "x\n"})
    return str(repo.path)


def _alive(view: object) -> bool:
    return view._cat is not None  # type: ignore[attr-defined]  # its cat-file child


def test_a_deleted_repositorys_view_is_closed_when_the_next_one_opens(tmp_path: Path) -> None:
    local: dict[str, object] = {}
    first, second = _repo(tmp_path / "a"), _repo(tmp_path / "b")
    gone = registry.view_for(local, first)
    kept = registry.view_for(local, second)
    assert gone is not None and kept is not None and _alive(gone) and _alive(kept)
    shutil.rmtree(first)
    try:
        assert registry.view_for(local, _repo(tmp_path / "c")) is not None
        assert not _alive(gone), "the view of a deleted repository kept its git child"
        assert _alive(kept)
        assert sorted(registry._views(local)) == sorted([second, str(tmp_path / "c")])
    finally:
        registry.close_views(local)


def test_past_the_bound_the_least_recently_used_view_closes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "MAX_VIEWS", 2)
    local: dict[str, object] = {}
    roots = [_repo(tmp_path / name) for name in "abc"]
    try:
        a = registry.view_for(local, roots[0])
        b = registry.view_for(local, roots[1])
        assert registry.view_for(local, roots[0]) is a  # used again: b is now the oldest
        c = registry.view_for(local, roots[2])
        assert a is not None and b is not None and c is not None
        assert (_alive(a), _alive(b), _alive(c)) == (True, False, True)
        assert list(registry._views(local)) == [roots[0], roots[2]]
        again = registry.view_for(local, roots[1])  # reopened when asked for again
        assert again is not None and again is not b and _alive(again)
    finally:
        registry.close_views(local)
