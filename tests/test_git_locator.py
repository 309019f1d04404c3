"""storyd.core.gitstate, the one git locator: git dir and common dir, HEAD, the commit it
resolves to, the stamp files, operation markers, and its callers (storytime, the git
views, the epic view's evidence).

Self-contained: real repositories made with `git` in tmp_path (no test harness module).
Each case says what broke when it fails: a linked worktree's refs live in the common
dir, packed-refs may hold the only copy of a ref, a FIFO must never block a read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_harness import lean_pythonpath

from storyd.core import storytime
from storyd.core.gitstate import (
    GitLocation,
    git_lock_age,
    git_operation_in_progress,
    held_lock_findings,
    is_work_tree,
    locate,
    work_tree_root,
)

REPO = Path(__file__).resolve().parent.parent
WHEN = "2025-03-03T09:00:00Z"
WHEN_TS = 1740992400  # WHEN, in seconds
FIFO_DEADLINE = 4.0  # under storytime's 5 s git deadline: a FIFO is refused, not waited out


def _env(home: Path) -> dict[str, str]:
    return dict(
        os.environ,
        HOME=str(home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@storyd.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@storyd.invalid",
        GIT_AUTHOR_DATE=WHEN,
        GIT_COMMITTER_DATE=WHEN,
    )


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """`git <args>` in `cwd`: its stdout, stripped."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=_env(cwd), capture_output=True, text=True,
        timeout=60, check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout.strip()


def commit(ws: Path, name: str = "story.md", text: str = "# a story\n") -> str:
    (ws / name).write_text(text, encoding="utf-8")
    git(ws, "add", name)
    git(ws, "commit", "-qm", f"write {name}")
    return git(ws, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository on branch main with one commit."""
    ws = tmp_path / "main"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    commit(ws)
    return ws


@pytest.fixture
def worktree(repo: Path) -> Path:
    """A linked worktree of `repo` on its own branch `topic`, one commit ahead."""
    wt = repo.parent / "linked"
    git(repo, "worktree", "add", "-q", "-b", "topic", str(wt))
    commit(wt, "topic.md")
    return wt


def real(path: str | Path) -> str:
    return os.path.realpath(path)


# -- where: git dir and common dir ---------------------------------------------------------


def test_a_plain_repository(repo: Path) -> None:
    where = locate(str(repo))
    assert where is not None
    assert real(where.gitdir) == real(where.common) == real(repo / ".git")
    assert not where.linked
    assert where.head_ref() == "refs/heads/main"
    assert where.branch() == "main"
    assert where.head_commit() == git(repo, "rev-parse", "HEAD")
    dotgit = repo / ".git"
    assert [real(p) for p in where.stamp_paths()] == [
        real(dotgit / "index"),
        real(dotgit / "HEAD"),
        real(dotgit / "packed-refs"),
        real(dotgit / "refs/heads/main"),
    ]
    assert is_work_tree(str(repo))
    (repo / "plans" / "deep").mkdir(parents=True)
    assert work_tree_root(str(repo / "plans" / "deep")) == real(repo)


def test_a_linked_worktree_reads_its_refs_from_the_common_dir(
    repo: Path, worktree: Path
) -> None:
    where = locate(str(worktree))
    assert where is not None and where.linked
    assert real(where.common) == real(repo / ".git")
    assert real(where.gitdir) == real(git(worktree, "rev-parse", "--absolute-git-dir"))
    assert where.branch() == "topic"
    head = git(worktree, "rev-parse", "HEAD")
    assert head != git(repo, "rev-parse", "HEAD")
    assert where.head_commit() == head  # the branch's file is in the common dir only
    assert not os.path.exists(os.path.join(where.gitdir, "refs", "heads", "topic"))
    index, head_file, packed, ref = where.stamp_paths()
    assert (real(index), real(head_file)) == (
        real(os.path.join(where.gitdir, "index")),
        real(os.path.join(where.gitdir, "HEAD")),
    )
    assert real(packed) == real(repo / ".git" / "packed-refs")
    assert real(ref) == real(repo / ".git" / "refs" / "heads" / "topic")
    # the main work tree keeps its own HEAD
    main = locate(str(repo))
    assert main is not None and main.branch() == "main"
    assert main.head_commit() == git(repo, "rev-parse", "HEAD")
    (worktree / "sub").mkdir()
    assert work_tree_root(str(worktree / "sub")) == real(worktree)


def test_per_worktree_refs_are_read_from_the_worktree(repo: Path, worktree: Path) -> None:
    """refs/worktree/, refs/bisect/, refs/rewritten/ are each worktree's own (git keeps
    them in its gitdir): the same name in two worktrees names two commits."""
    git(worktree, "update-ref", "refs/worktree/mark", "HEAD")
    git(repo, "update-ref", "refs/worktree/mark", "HEAD")
    linked, main = locate(str(worktree)), locate(str(repo))
    assert linked is not None and main is not None
    assert linked.resolve("refs/worktree/mark") == git(worktree, "rev-parse", "HEAD")
    assert main.resolve("refs/worktree/mark") == git(repo, "rev-parse", "HEAD")
    assert linked.ref_path("refs/worktree/mark").startswith(linked.gitdir)
    assert linked.ref_path("refs/heads/topic").startswith(linked.common)


def test_the_stamp_moves_when_a_worktree_commits(repo: Path, worktree: Path) -> None:
    """storytime.stamp_files (what a cached answer that asked git holds for) sees a commit
    in the linked worktree: its branch's file is in the common dir."""
    before = {real(path): sig for path, sig in storytime.stamp_files(str(worktree))}
    ref = real(repo / ".git" / "refs" / "heads" / "topic")
    assert len(before) == 6 and before[ref] is not None  # and the work tree's .git, shallow
    time.sleep(0.01)
    commit(worktree, "more.md")
    after = {real(path): sig for path, sig in storytime.stamp_files(str(worktree))}
    assert before[ref] != after[ref]


def test_storytime_memoises_in_a_linked_worktree(
    repo: Path, worktree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old stamp read `<ws>/.git/index` (a file in a worktree): no stamp, so no memo
    and no batch there; every answer ran two git processes. Now the second answer comes
    from the memo: git is no longer on PATH and it is still right."""
    assert storytime.git_commit_time(str(worktree), "topic.md") == WHEN_TS
    empty = tmp_path / "no-git"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert storytime.git_commit_time(str(worktree), "topic.md") == WHEN_TS


def test_the_main_tree_memoises_too(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memo holds while the file and the stamp hold, and no longer."""
    assert storytime.git_commit_time(str(repo), "story.md") == WHEN_TS
    empty = tmp_path / "no-git"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert storytime.git_commit_time(str(repo), "story.md") == WHEN_TS
    (repo / "story.md").write_text("# changed\n", encoding="utf-8")
    assert storytime.git_commit_time(str(repo), "story.md") is None  # no git: no answer


# -- HEAD: detached, unborn, packed, symbolic, garbage ----------------------------------------


def test_a_detached_head(repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    commit(repo, "second.md")
    git(repo, "checkout", "-q", "--detach", first)
    where = locate(str(repo))
    assert where is not None
    assert where.head_ref() is None and where.branch() is None
    assert where.head_commit() == first
    assert [os.path.basename(p) for p in where.stamp_paths()] == ["index", "HEAD", "packed-refs"]


def test_a_detached_worktree(repo: Path) -> None:
    wt = repo.parent / "detached"
    git(repo, "worktree", "add", "-q", "--detach", str(wt))
    where = locate(str(wt))
    assert where is not None and where.linked
    assert where.branch() is None
    assert where.head_commit() == git(repo, "rev-parse", "HEAD")


def test_an_unborn_branch(tmp_path: Path) -> None:
    ws = tmp_path / "fresh"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    where = locate(str(ws))
    assert where is not None
    assert where.branch() == "main"
    assert where.head_commit() is None
    stamps = dict(storytime.stamp_files(str(ws)))
    assert stamps[os.path.join(where.gitdir, "refs", "heads", "main")] is None  # not yet


def test_an_orphan_branch_beside_packed_refs(repo: Path) -> None:
    """Unborn although other branches exist, in loose files and in packed-refs."""
    git(repo, "pack-refs", "--all")
    git(repo, "checkout", "-q", "--orphan", "fresh")
    where = locate(str(repo))
    assert where is not None
    assert where.branch() == "fresh"
    assert where.head_commit() is None
    assert where.resolve("refs/heads/main") == git(repo, "rev-parse", "main")


def test_a_ref_only_in_packed_refs(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    where = locate(str(repo))
    assert where is not None
    assert where.head_commit() == head
    stamps = dict(storytime.stamp_files(str(repo)))
    assert stamps[os.path.join(where.common, "packed-refs")] is not None


def test_a_worktree_branch_only_in_packed_refs(repo: Path, worktree: Path) -> None:
    head = git(worktree, "rev-parse", "HEAD")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "topic").exists()
    where = locate(str(worktree))
    assert where is not None
    assert where.head_commit() == head
    assert storytime.git_commit_time(str(worktree), "topic.md") == WHEN_TS


def test_packed_refs_with_a_peeled_tag(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "-a", "-m", "v1", "v1")
    git(repo, "pack-refs", "--all")
    text = (repo / ".git" / "packed-refs").read_text(encoding="ascii")
    assert text.startswith("#") and "\n^" in text  # the header, the tag's peeled line
    where = locate(str(repo))
    assert where is not None
    assert where.head_commit() == head
    assert where.resolve("refs/tags/v1") == git(repo, "rev-parse", "refs/tags/v1")


def test_a_sha256_repository(tmp_path: Path) -> None:
    """A 64-digit object name is read whole (the old reader cut packed-refs' at 40)."""
    ws = tmp_path / "sha256"
    ws.mkdir()
    done = subprocess.run(
        ["git", "init", "-q", "-b", "main", "--object-format=sha256"], cwd=ws,
        env=_env(ws), capture_output=True, timeout=60, check=False,
    )
    if done.returncode != 0:
        pytest.skip("this git cannot make a sha256 repository")
    head = commit(ws)
    assert len(head) == 64
    where = locate(str(ws))
    assert where is not None and where.head_commit() == head
    git(ws, "pack-refs", "--all")
    assert where.head_commit() == head


def test_a_symbolic_ref_chain(repo: Path) -> None:
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/alias")
    where = locate(str(repo))
    assert where is not None
    assert where.branch() == "alias"
    assert where.head_commit() == git(repo, "rev-parse", "main")
    names = [os.path.relpath(p, where.common) for p in where.stamp_paths()[3:]]
    assert names == ["refs/heads/alias", "refs/heads/main"]


def test_a_head_that_leads_outside_the_git_dir_is_no_ref(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("a" * 40 + "\n", encoding="ascii")
    (repo / ".git" / "HEAD").write_text("ref: refs/../../../outside\n", encoding="ascii")
    where = locate(str(repo))
    assert where is not None
    assert where.head_ref() is None
    assert where.head_commit() is None
    assert len(where.stamp_paths()) == 3


def test_a_head_that_is_not_a_commit_name(repo: Path) -> None:
    (repo / ".git" / "HEAD").write_text("something else\n", encoding="ascii")
    where = locate(str(repo))
    assert where is not None
    assert where.head_ref() is None and where.head_commit() is None


# -- FIFOs: refused at once, never waited on ----------------------------------------------


_PROBE = """
import sys
from storyd.core import storytime
from storyd.core.gitstate import locate, git_operation_in_progress
ws = sys.argv[1]
where = locate(ws)
if where is None:
    print("none")
    raise SystemExit(0)
try:
    print("branch", where.branch())
except OSError as exc:
    print("branch-error", type(exc).__name__)
print("commit", where.head_commit())
print("stamps", len(storytime.stamp_files(ws)))
print("busy", git_operation_in_progress(ws))
print("time", storytime.git_commit_time(ws, sys.argv[2]))
"""


def probe(ws: Path, relpath: str = "story.md") -> list[str]:
    """The locator's answers, read in a child that is killed if it blocks."""
    env = dict(_env(ws), PYTHONPATH=lean_pythonpath())
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ws), relpath], env=env, capture_output=True,
        text=True, timeout=FIFO_DEADLINE, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_fifo_head_does_not_block(repo: Path) -> None:
    head = repo / ".git" / "HEAD"
    head.unlink()
    os.mkfifo(head)
    out = probe(repo)
    assert "branch-error NotRegularFile" in out
    assert "commit None" in out
    assert "stamps 5" in out  # index, HEAD, packed-refs, .git, shallow: no ref is named
    assert "time None" in out


def test_a_fifo_loose_ref_does_not_block(repo: Path) -> None:
    ref = repo / ".git" / "refs" / "heads" / "main"
    ref.unlink()
    os.mkfifo(ref)
    out = probe(repo)
    assert "branch main" in out and "commit None" in out and "stamps 6" in out


def test_a_fifo_packed_refs_does_not_block(repo: Path) -> None:
    git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    packed.unlink()
    os.mkfifo(packed)
    out = probe(repo)
    assert "branch main" in out and "commit None" in out


def test_a_fifo_commondir_does_not_block(repo: Path, worktree: Path) -> None:
    where = locate(str(worktree))
    assert where is not None
    commondir = Path(where.gitdir) / "commondir"
    commondir.unlink()
    os.mkfifo(commondir)
    out = probe(worktree, "topic.md")
    assert "branch topic" in out
    assert "commit None" in out  # the common dir is unknown: its refs are not found


def test_a_fifo_dotgit_does_not_block(tmp_path: Path) -> None:
    ws = tmp_path / "fifo"
    ws.mkdir()
    os.mkfifo(ws / ".git")
    assert probe(ws) == ["none"]
    assert is_work_tree(str(ws))  # there is a `.git`: the folder is still a work tree


# -- operations and the index lock --------------------------------------------------------


@pytest.mark.parametrize(
    ("marker", "folder"),
    [
        ("MERGE_HEAD", False),
        ("CHERRY_PICK_HEAD", False),
        ("BISECT_LOG", False),
        ("rebase-merge", True),
        ("rebase-apply", True),
    ],
)
def test_operation_markers(repo: Path, marker: str, folder: bool) -> None:
    where = locate(str(repo))
    assert where is not None
    assert where.operation() is None and not git_operation_in_progress(str(repo))
    path = Path(where.gitdir) / marker
    if folder:
        path.mkdir()
    else:
        path.write_text("x\n", encoding="ascii")
    assert where.operation() == marker
    assert git_operation_in_progress(str(repo))


def test_a_real_merge_conflict_in_a_worktree_is_that_worktrees_own(
    repo: Path, worktree: Path
) -> None:
    """git's MERGE_HEAD lives in the worktree's gitdir: the worktree is busy, not main."""
    commit(repo, "clash.md", "main's\n")
    commit(worktree, "clash.md", "topic's\n")
    done = subprocess.run(
        ["git", "merge", "-q", "main"], cwd=worktree, env=_env(worktree),
        capture_output=True, timeout=60, check=False,
    )
    assert done.returncode != 0  # the conflict
    assert locate(str(worktree)).operation() == "MERGE_HEAD"  # type: ignore[union-attr]
    assert git_operation_in_progress(str(worktree))
    assert not git_operation_in_progress(str(repo))


def test_the_index_lock(repo: Path, worktree: Path) -> None:
    where = locate(str(worktree))
    assert where is not None
    assert where.lock_age() is None and git_lock_age(str(worktree)) is None
    lock = Path(where.gitdir) / "index.lock"
    lock.write_bytes(b"")
    assert git_operation_in_progress(str(worktree), 5.0)  # young: git is writing
    assert not git_operation_in_progress(str(repo), 5.0)  # the main tree's index is free
    assert held_lock_findings(str(worktree), 5.0) == ()
    old = time.time() - 60
    os.utime(lock, (old, old))
    found = git_lock_age(str(worktree))
    assert found is not None and found[0] == str(lock) and found[1] >= 59
    assert not git_operation_in_progress(str(worktree), 5.0)  # left behind: not waited on
    (finding,) = held_lock_findings(str(worktree), 5.0)
    assert finding.code == "git-lock-held" and str(lock) in finding.message


# -- no repository ----------------------------------------------------------------------


def test_no_repository(tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    assert locate(str(ws)) is None
    assert not is_work_tree(str(ws))
    assert storytime.stamp_files(str(ws)) == ()
    assert not git_operation_in_progress(str(ws))
    assert git_lock_age(str(ws)) is None
    assert held_lock_findings(str(ws)) == ()
    root = work_tree_root(str(ws))
    assert root is None or not root.startswith(real(tmp_path))


@pytest.mark.parametrize(
    "text", ["not a gitfile\n", "gitdir: does/not/exist\n", ""], ids=["garbage", "missing", "empty"]
)
def test_a_dotgit_file_that_names_no_folder(tmp_path: Path, text: str) -> None:
    ws = tmp_path / "odd"
    ws.mkdir()
    (ws / ".git").write_text(text, encoding="utf-8")
    assert locate(str(ws)) is None
    assert storytime.stamp_files(str(ws)) == ()


def test_a_location_is_a_value() -> None:
    where = GitLocation("/r/.git/worktrees/w", "/r/.git")
    assert where == GitLocation("/r/.git/worktrees/w", "/r/.git")
    assert hash(where) == hash(GitLocation("/r/.git/worktrees/w", "/r/.git"))
    assert where != GitLocation("/r/.git", "/r/.git")
    assert where.linked and not GitLocation("/r/.git", "/r/.git").linked
    with pytest.raises(AttributeError):
        where.gitdir = "/elsewhere"


def test_the_locator_stays_light() -> None:
    """It sits on `storyd resume`'s path: no typing, dataclasses, subprocess, threading."""
    env = dict(os.environ, PYTHONPATH=lean_pythonpath())
    done = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", "import storyd.core.gitstate"], env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    assert "storyd.core.gitstate" in names
    assert not names & {"typing", "dataclasses", "subprocess", "threading", "re",
                        "storyd.core.model"}


# -- the views: the same locator, and one owner each ---------------------------------------


def test_a_worktree_view_reads_head_through_the_locator(repo: Path, worktree: Path) -> None:
    from storyd.detectors.gitview import private_view

    (worktree / "plans").mkdir()
    first = private_view(str(worktree / "plans"))
    second = private_view(str(worktree))
    assert first is not None and second is not None
    try:
        assert first is not second  # a request's own, never a cached one
        assert first.root == real(worktree)
        assert real(first.location.common) == real(repo / ".git")
        assert first.current_branch() == "topic"
        git(worktree, "checkout", "-q", "--detach")
        assert first.current_branch() is None
    finally:
        first.close()
        second.close()


def test_the_epic_evidence_of_a_worktree(repo: Path, worktree: Path) -> None:
    from storyd.api.epicview import Evidence

    evidence = Evidence(str(worktree))
    try:
        assert evidence.base == "topic"
        assert evidence.tip_sha == git(worktree, "rev-parse", "HEAD")
    finally:
        evidence.close()
