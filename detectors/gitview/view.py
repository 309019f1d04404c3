"""GitView: one repository's cached answers (objects, ancestry, patch ids, scans).

The package docstring (detectors/gitview/__init__.py) says what is cached and why each
cache stays true.
"""

from __future__ import annotations

import _thread
import os
import sys

from storyd.core.errors import GitError
from storyd.core.gitstate import GitLocation
from storyd.detectors.gitview.errors import _describe
from storyd.detectors.gitview.objects import (
    FOUND,
    INVALID,
    ObjectInfo,
    _CatFile,
    _parse_answer,
    _Stamps,
    is_object_name,
    kept,
    unkept,
)
from storyd.detectors.gitview.proc import check_git_files, finish, piped, piped_all
from storyd.detectors.gitview.proc import run as run_git
from storyd.detectors.gitview.proc import start as start_git
from storyd.detectors.gitview.records import Commit, Walk, newest, parse_patch_ids, trim

__all__ = ["EMPTY_TREE", "Commit", "GitView"]

DEFAULT_WALK_LIMIT = 200_000
ONE_SHOT_WALK = 2_000  # a one-shot scan's first walk (commits)
ONE_SHOT_PROBES = 4  # `merge-base --is-ancestor` calls before such a view walks in full
_MAX_TIPS = 8
_MAX_OBJECTS = 200_000
_MAX_SCANS = 64
_FIELD = "\x1f"
_RECORD = "\x1e"
_DIFF_FLAGS = (  # a commit's patch as `git patch-id --stable` reads it
    "--pretty=medium", "--no-color", "--no-ext-diff", "--no-textconv", "--no-notes", "--no-abbrev",
    "--diff-merges=off", "-p",
)  # fmt: skip

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import TypeVar

    from storyd.detectors.gitview.spawn import Process

    T = TypeVar("T")


class GitView:
    """Cached answers about one repository; use it only from the thread that made it.

    `stats` counts the work done, so tests and the bench can see what was cached:
    full_walks, incremental_walks, walked (commits read from rev-list), lookups
    (names sent to cat-file), patch_ids (commits whose patch id was computed), probes
    (`merge-base --is-ancestor` calls for commits beyond a bounded walk).

    `walk_limit` bounds each tip's walk; git is asked about each older commit alone,
    or, past `widen_after` such probes, the walk goes in full (DEFAULT_WALK_LIMIT). A
    one-shot scan (a hook without a daemon) walks ONE_SHOT_WALK, widen_after=ONE_SHOT_PROBES.
    """

    def __init__(self, root: str, location: GitLocation, git: str = "git", *,
                 walk_limit: int = DEFAULT_WALK_LIMIT,
                 widen_after: int | None = None) -> None:  # fmt: skip
        self._git = git
        self._owner = _thread.get_ident()
        self.root = os.path.realpath(root)
        self.common_dir = os.path.abspath(location.common)
        self.git_dir = os.path.abspath(location.gitdir)
        self.location = GitLocation(self.git_dir, self.common_dir)  # HEAD read there
        self.objects_dir = os.path.join(self.common_dir, "objects")
        self.walk_limit = walk_limit
        self.widen_after = widen_after
        self.stats = dict.fromkeys(
            ("full_walks", "incremental_walks", "walked", "lookups", "patch_ids", "probes"), 0
        )
        self._cat: _CatFile | None = None
        self._objects: dict[str, ObjectInfo | tuple[int, int]] = {}  # by name, with stamps
        self._stamps: dict[tuple[int, int], tuple[int, int]] = {}
        self._walks: dict[str, Walk] = {}  # oldest first (an LRU without collections)
        self._verdicts: dict[tuple[str, str], bool] = {}
        self._patch_ids: dict[str, str | None] = {}
        self._rewrites: dict[tuple[str, str, int], str | None] = {}
        self._scans: dict[tuple[object, ...], object] = {}  # oldest first
        self._held_tips: dict[str, str | None] | None = None  # hold_tips: one pass's tips
        self._held_branch: tuple[str | None] | None = None  # and its checked-out branch
        self._early: tuple[tuple[str, int], Process] | None = None  # (tip, limit), walk
        self._early_logs: dict[tuple[object, ...], Process] = {}  # prefetch_commits'

    def __repr__(self) -> str:
        return f"GitView({self.root!r})"

    # -- plumbing --------------------------------------------------------------------

    def _check_owner(self) -> None:
        if _thread.get_ident() != self._owner:
            msg = f"the git view of {self.root} was used outside its owner thread"
            raise GitError(msg)

    def _run(self, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
        """Run `git <args>` in the work tree: (exit status, stdout). Other statuses raise."""
        self._check_owner()
        self.check_files()
        status, out, err = run_git(self._argv(*args), self.root)
        return self._checked(args, ok, status, out, err)

    def _checked(
        self, args: tuple[str, ...], ok: tuple[int, ...], status: int, out: str, err: str
    ) -> tuple[int, str]:
        if status not in ok:
            detail = " ".join(str(err).split())[:300] or f"exit status {status}"
            msg = f"git {args[0]} failed: {detail}"
            raise GitError(msg)
        return status, out.removesuffix("\n")

    def _argv(self, *args: str) -> list[str]:
        return [self._git, "--no-optional-locks", *args]

    def check_files(self) -> None:
        """GitError when HEAD, packed-refs, config or commondir is not a regular file (a
        FIFO there would hang every git started here)."""
        check_git_files(self.git_dir, self.common_dir)

    def _cached(self, key: tuple[object, ...], compute: Callable[[], T]) -> T:
        """A small LRU for scans, keyed by everything the answer depends on."""
        if key in self._scans:
            value = self._scans[key] = self._scans.pop(key)  # now the newest
            return value  # type: ignore[return-value]
        value = compute()
        self._scans[key] = value
        trim(self._scans, _MAX_SCANS)
        return value

    def relpath(self, path: str) -> str | None:
        """A path (absolute, or relative to the current directory) relative to the work
        tree, or None when it lies outside."""
        full = os.path.realpath(path)
        if full == self.root:
            return "."
        if not full.startswith(self.root + os.sep):
            return None
        return os.path.relpath(full, self.root).replace(os.sep, "/")

    def close(self) -> None:
        """End the persistent processes and forget the caches."""
        self._drop_early(logs=True)
        if self._cat is not None:
            cat, self._cat = self._cat, None
            cat.close()
        self.refresh()

    def refresh(self) -> None:
        """Forget every cache (they validate themselves; this only frees memory)."""
        self._objects.clear()
        self._stamps.clear()
        self._walks.clear()
        self._verdicts.clear()
        self._patch_ids.clear()
        self._rewrites.clear()
        self._scans.clear()

    # -- objects ---------------------------------------------------------------------

    def lookup(self, names: Iterable[str]) -> dict[str, ObjectInfo]:
        """What the repository holds under each name (full or abbreviated hex sha).

        An answer holds while the object folder the name would live in and the pack
        folder keep their mtimes: a new object (loose or packed) changes one of them, and
        so does `git gc` pruning one. Folders changed in the last moments are not trusted.
        """
        self._check_owner()
        stamps = _Stamps(self.objects_dir, self._stamps)
        result: dict[str, ObjectInfo] = {}
        ask: list[tuple[str, str, tuple[int, int] | None]] = []
        for name in dict.fromkeys(names):
            key = name if name.islower() else name.lower()  # the caller's string, if it can
            cached = unkept(name, self._objects.get(key), stamps.of(key))
            if cached is not None:
                result[name] = cached
            elif not is_object_name(name):
                result[name] = ObjectInfo(name, INVALID)
            else:
                ask.append((name, key, stamps.of(key)))
        answers = self._ask([key for _, key, _ in ask])
        for (name, key, stamp), line in zip(ask, answers, strict=True):
            info = _parse_answer(name, line)
            result[name] = info
            if stamp is not None:  # found ones too: `git gc --prune` deletes objects
                info.stamp = stamp
                if len(self._objects) >= _MAX_OBJECTS:
                    self._objects.clear()
                    self._stamps.clear()
                self._objects[key] = kept(info)
        return result

    def _ask(self, names: list[str]) -> list[str]:
        if not names:
            return []
        self.stats["lookups"] += len(names)
        self.check_files()
        if self._cat is None or not self._cat.alive():
            self._cat = _CatFile(self._argv("cat-file", "--batch-check"), self.root)
        try:
            return self._cat.ask(names)
        except GitError:
            broken, self._cat = self._cat, None
            broken.kill()
            raise

    def exists(self, name: str) -> bool:
        """Whether `name` names exactly one object in the repository."""
        return self.lookup([name])[name].state == FOUND

    def resolve(self, name: str) -> str | None:
        """The full sha of an object name, None when missing, ambiguous or invalid."""
        return self.lookup([name])[name].sha

    # -- refs ------------------------------------------------------------------------

    def tip_sha(self, tip: str) -> str | None:
        """The commit a branch, remote branch, tag, HEAD or sha points at, read afresh
        (or, between `hold_tips(True)` and `hold_tips(False)`, as first read then)."""
        if not tip or tip.startswith("-") or any(c.isspace() for c in tip):
            return None
        held = self._held_tips
        if held is not None and tip in held:
            return held[tip]
        answer = _parse_answer(tip, self._ask([f"{tip}^{{commit}}"])[0])
        sha = answer.sha if answer.state == FOUND else None
        if held is not None:
            held[tip] = sha
        return sha

    def hold_tips(self, on: bool) -> None:
        """Start (True) or end (False) a pass over many units that should see one state of
        the refs: each tip is read once for the whole pass instead of once per unit and
        detector (a cat-file round trip each: 28% of the detectors' time in a 2,000-unit
        warm-up). A ref that moves during the pass is seen by the recheck its git event
        asks for, which is a new pass. The checked-out branch is read once too."""
        self._held_tips = {} if on else None
        self._held_branch = None

    def current_branch(self) -> str | None:
        """The checked-out branch's short name; None on a detached HEAD (read once per
        held pass, like the tips)."""
        self._check_owner()
        if self._held_branch is not None:
            return self._held_branch[0]
        branch = self._read_branch()
        if self._held_tips is not None:
            self._held_branch = (branch,)
        return branch

    def _read_branch(self) -> str | None:
        try:
            return self.location.branch()
        except OSError as exc:
            msg = f"cannot read HEAD: {_describe(exc)}"
            raise GitError(msg) from exc

    def head_name(self) -> str:
        """The checked-out branch, or `HEAD` when detached."""
        return self.current_branch() or "HEAD"

    def default_branch(self) -> str | None:
        """The first of origin/HEAD, main and master that names a commit."""
        return next((n for n in ("origin/HEAD", "main", "master") if self.tip_sha(n)), None)

    def is_shallow(self) -> bool:
        """Whether this is a shallow clone (its history is cut off)."""
        return os.path.isfile(os.path.join(self.common_dir, "shallow"))

    # -- ancestry --------------------------------------------------------------------

    def is_ancestor(self, sha: str, tip: str) -> bool:
        """Whether the commit `sha` (full) is in the history of `tip` (a name or sha)."""
        tip_sha = self.tip_sha(tip)
        if tip_sha is None:
            msg = f"{tip} does not name a commit"
            raise GitError(msg)
        return self.reachable([sha], tip, tip_sha)[sha]

    def reachable(self, shas: Iterable[str], tip: str, tip_sha: str) -> dict[str, bool]:
        """For full commit shas: whether each is reachable from `tip` (at `tip_sha`)."""
        shas = list(shas)
        walk = self._walk(tip, tip_sha)
        if not walk.complete and self._too_many_probes(shas, walk):
            self.walk_limit = DEFAULT_WALK_LIMIT  # many old commits: one walk for them all
            self._walks.pop(tip, None)
            walk = self._walk(tip, tip_sha)
        result: dict[str, bool] = {}
        for sha in shas:
            if sha in walk.reachable:
                result[sha] = True
            elif walk.complete:
                result[sha] = False
            else:
                result[sha] = self._beyond_walk(sha, tip_sha)
        return result

    def _too_many_probes(self, shas: list[str], walk: Walk) -> bool:
        """Whether a bounded walk leaves more commits than `widen_after` allows probing."""
        if self.widen_after is None or self.walk_limit >= DEFAULT_WALK_LIMIT:
            return False
        verdicts, reached = self._verdicts, walk.reachable
        beyond = {s for s in shas if s not in reached and (s, walk.tip) not in verdicts}
        return bool(beyond) and self.stats["probes"] + len(beyond) > self.widen_after

    def _beyond_walk(self, sha: str, tip_sha: str) -> bool:
        """The exact answer for a tip whose walk hit the bound (cached per sha and tip)."""
        key = (sha, tip_sha)
        if key not in self._verdicts:
            if len(self._verdicts) >= _MAX_OBJECTS:
                self._verdicts.clear()
            status, _ = self._run("merge-base", "--is-ancestor", sha, tip_sha, ok=(0, 1))
            self._verdicts[key] = status == 0
            self.stats["probes"] += 1
        return self._verdicts[key]

    def _walk(self, tip: str, tip_sha: str) -> Walk:
        """The reachable set of `tip` at `tip_sha`: cached, fast-forwarded, or walked."""
        walk = self._walks.pop(tip, None)
        if walk is not None:
            self._walks[tip] = walk  # now the newest
            if walk.tip == tip_sha:
                return walk
            if self._fast_forward(walk, tip_sha):
                return walk
        walk = self._full_walk(tip_sha)
        self._walks[tip] = walk
        trim(self._walks, _MAX_TIPS)
        return walk

    def prefetch_walk(self, tip: str, tip_sha: str) -> None:
        """Start the walk `reachable` will need for a tip this view has not walked, so
        git walks while cat-file answers the lookup asked before it (one wait, not two).
        A walked tip is left to `_walk` (cached, or fast-forwarded)."""
        if tip in self._walks or self._early is not None:
            return
        self._check_owner()
        self.check_files()
        argv = self._argv("rev-list", f"--max-count={self.walk_limit}", tip_sha)
        self._early = ((tip_sha, self.walk_limit), start_git(argv, self.root))

    def _drop_early(self, *, logs: bool = False) -> None:
        """End the early walk (and, with `logs`, the early scans) nobody read."""
        early, self._early = self._early, None
        dropped = [early[1]] if early is not None else []
        if logs:
            dropped += self._early_logs.values()
            self._early_logs = {}
        for proc in dropped:
            proc.kill()
            proc.communicate()

    def _full_walk(self, tip_sha: str) -> Walk:
        args = ("rev-list", f"--max-count={self.walk_limit}", tip_sha)
        if self._early is not None and self._early[0] == (tip_sha, self.walk_limit):
            proc, self._early = self._early[1], None
            _, out = self._checked(args, (0,), *finish(proc))
        else:
            self._drop_early()
            _, out = self._run(*args)
        reachable = set(map(sys.intern, out.split()))  # shared by every tip's set
        self.stats["full_walks"] += 1
        self.stats["walked"] += len(reachable)
        return Walk(tip_sha, reachable, len(reachable) < self.walk_limit)

    def _fast_forward(self, walk: Walk, new: str) -> bool:
        """Extend `walk` to `new` when the old tip is one of its ancestors.

        `rev-list --parents new ^old` lists what `new` adds; the old tip is an ancestor
        exactly when it is the parent of one of those commits.
        """
        limit = self.walk_limit
        try:
            _, out = self._run("rev-list", "--parents", f"--max-count={limit}", new, f"^{walk.tip}")
        except GitError:  # the old tip was pruned: walk afresh
            return False
        rows = [line.split() for line in out.splitlines() if line.strip()]
        if len(rows) >= limit or not any(walk.tip in row[1:] for row in rows):
            return False
        walk.reachable.update(sys.intern(row[0]) for row in rows)
        walk.tip = new
        self.stats["incremental_walks"] += 1
        self.stats["walked"] += len(rows)
        return True

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two commits; None for unrelated histories (kept
        for the pair: a detector's prepare step and its check ask the same)."""

        def compute() -> str | None:
            status, out = self._run("merge-base", a, b, ok=(0, 1))
            return out.split()[0] if status == 0 and out.strip() else None

        return self._cached(("merge-base", a, b), compute)

    # -- rewrites --------------------------------------------------------------------

    def replacement(self, sha: str, tip: str, depth: int) -> str | None:
        """The newest commit on `tip` with the same `git patch-id --stable` as `sha`."""
        return self.replacements([sha], tip, depth)[sha]

    def replacements(self, shas: list[str], tip: str, depth: int) -> dict[str, str | None]:
        """For each commit, its rewritten copy on `tip`, or None.

        The search covers the commits of `tip` that none of `shas` reaches (for one sha:
        back to its merge-base with the tip), at most `depth` of them, in one rev-list
        for the whole batch: a 50-commit rebase costs one walk, not fifty.
        """
        tip_sha = self.tip_sha(tip)
        if tip_sha is None:
            return dict.fromkeys(shas)
        todo = [s for s in dict.fromkeys(shas) if (s, tip_sha, depth) not in self._rewrites]
        if todo:
            if len(self._rewrites) >= _MAX_OBJECTS:
                self._rewrites.clear()
            found = self._find_replacements(todo, tip_sha, depth)
            for sha in todo:
                self._rewrites[(sha, tip_sha, depth)] = found.get(sha)
        return {s: self._rewrites.get((s, tip_sha, depth)) for s in shas}

    def _find_replacements(self, shas: list[str], tip_sha: str, depth: int) -> dict[str, str]:
        if not self._patch_ids:  # a cold view: both questions in one step
            found = self._replacements_at_once(shas, tip_sha, depth)
            if found is not None:
                return found
        wanted = {s: p for s, p in self.patch_ids(shas).items() if p is not None}
        if not wanted:
            return {}
        _, out = self._run(
            "rev-list", "--no-merges", f"--max-count={depth}", tip_sha, "--not", *wanted
        )
        return newest(wanted, self.patch_ids(out.split()))

    def _replacements_at_once(
        self, shas: list[str], tip_sha: str, depth: int
    ) -> dict[str, str] | None:
        """`_find_replacements` without a cache to reuse: the lost commits' patch ids and
        the candidates' (`git log -p`, the same commits rev-list would list, newest
        first) from two pipes run side by side, instead of show | patch-id, rev-list,
        show | patch-id one after the other. None when a lost commit has no patch id
        (a merge, an empty commit): the candidates are then those of the others only."""
        self._check_owner()
        self.check_files()
        if (found := self._in_one_pipe(shas, tip_sha, depth)) is not None:
            return found
        walk = ["log", "--no-decorate", "--no-merges", f"--max-count={depth}", *_DIFF_FLAGS]
        patch_id = self._argv("patch-id", "--stable")
        own, others = piped_all(
            [
                (self._argv("show", *_DIFF_FLAGS, *shas), patch_id),
                (self._argv(*walk, tip_sha, "--not", *shas), patch_id),
            ],
            self.root,
        )
        wanted = parse_patch_ids(own)
        candidates = parse_patch_ids(others)
        self.stats["patch_ids"] += len(shas) + len(candidates)
        for sha in shas:
            self._patch_ids[sha] = wanted.get(sha)
        if len(wanted) < len(set(shas)):
            return None
        self._patch_ids.update(candidates)
        if len(self._patch_ids) > _MAX_OBJECTS:
            self._patch_ids.clear()
        return newest(wanted, candidates)

    def _in_one_pipe(self, shas: list[str], tip_sha: str, depth: int) -> dict[str, str] | None:
        """The same in one pipe (2 processes, not 4): `log -p tip lost --not lost^@` lists
        each lost commit among exactly the candidates `tip --not lost` lists, in order;
        None when one is missing (a merge, empty, past the bound, reached by another)."""
        lost = list(dict.fromkeys(shas))
        argv = self._argv("log", "--no-decorate", "--no-merges", *_DIFF_FLAGS,
                          f"--max-count={depth + len(lost)}", tip_sha, *lost, "--not",
                          *(f"{sha}^@" for sha in lost))  # fmt: skip
        try:
            ids = parse_patch_ids(piped(argv, self._argv("patch-id", "--stable"), self.root))
        except GitError:
            return None
        if any(sha not in ids for sha in lost):
            return None
        wanted = {sha: ids[sha] for sha in lost}
        candidates = {c: p for c, p in ids.items() if c not in wanted}
        self.stats["patch_ids"] += len(ids)
        self._patch_ids.update(ids)
        if len(self._patch_ids) > _MAX_OBJECTS:
            self._patch_ids.clear()
        return newest(wanted, candidates)

    def patch_ids(self, shas: list[str]) -> dict[str, str | None]:
        """`git patch-id --stable` of each commit (None for an empty or merge diff)."""
        todo = [s for s in dict.fromkeys(shas) if s not in self._patch_ids]
        for start in range(0, len(todo), 200):
            chunk = todo[start : start + 200]
            found = self._compute_patch_ids(chunk)
            for sha in chunk:
                self._patch_ids[sha] = found.get(sha)
        if len(self._patch_ids) > _MAX_OBJECTS:
            self._patch_ids.clear()
        return {s: self._patch_ids.get(s) for s in shas}

    def combined_patch_id(self, first: str, last: str) -> str | None:
        """`git patch-id --stable` of the whole change from `first`'s parent to `last`: what
        a squash merge of the commits first..last puts in one commit (None: no change)."""
        key = ("combined-patch-id", first, last)

        def compute() -> str | None:
            status, parent = self._run("rev-parse", "--verify", "-q", f"{first}^", ok=(0, 1))
            base = parent.strip() if status == 0 and parent.strip() else EMPTY_TREE
            self.check_files()
            diff = self._argv("diff", "--no-color", "--no-ext-diff", base, last)
            out = piped(diff, self._argv("patch-id", "--stable"), self.root)
            parts = str(out).split()
            return parts[0] if parts else None

        return self._cached(key, compute)

    def _compute_patch_ids(self, shas: list[str]) -> dict[str, str]:
        self._check_owner()
        self.stats["patch_ids"] += len(shas)
        self.check_files()
        show = self._argv("show", *_DIFF_FLAGS, *shas)
        return parse_patch_ids(piped(show, self._argv("patch-id", "--stable"), self.root))

    # -- scans -----------------------------------------------------------------------

    def scan_base(self, tip_sha: str, default: str | None) -> str | None:
        """Where a branch's own commits start: its merge-base with `default`, unless
        that is the tip itself (working on the default branch)."""
        if default is None:
            return None
        default_sha = self.tip_sha(default)
        if default_sha is None or default_sha == tip_sha:
            return None
        base = self.merge_base(tip_sha, default_sha)
        return None if base == tip_sha else base

    def commits(
        self, tip_sha: str, base: str | None, limit: int, paths: tuple[str, ...] = ()
    ) -> list[Commit]:
        """The newest `limit` commits of `tip_sha` not reachable from `base`, newest
        first; with `paths`, only those touching them (and which of them they touch)."""
        key = ("commits", tip_sha, base, limit, paths)
        return self._cached(key, lambda: self._log(tip_sha, base, limit, paths))

    def prefetch_commits(
        self, tip_sha: str, base: str | None, limit: int, paths: tuple[str, ...] = ()
    ) -> None:
        """Start the `git log` a later `commits` with the same arguments reads (a
        detector's prepare step: it runs beside the other detectors' git)."""
        key = ("commits", tip_sha, base, limit, paths)
        if key in self._scans or key in self._early_logs:
            return
        self._check_owner()
        self.check_files()
        argv = self._argv(*_log_args(tip_sha, base, limit, paths))
        self._early_logs[key] = start_git(argv, self.root)

    def _log(
        self, tip_sha: str, base: str | None, limit: int, paths: tuple[str, ...]
    ) -> list[Commit]:
        args = _log_args(tip_sha, base, limit, paths)
        early = self._early_logs.pop(("commits", tip_sha, base, limit, paths), None)
        if early is not None:
            _, out = self._checked(tuple(args), (0,), *finish(early))
        else:
            _, out = self._run(*args)
        found = []
        for record in out.split(_RECORD)[1:]:
            sha, stamp, message, names = [*record.split(_FIELD), "", "", ""][:4]
            touched = tuple(n for n in names.split("\n") if n.strip()) if paths else ()
            when = int(stamp) if stamp.isdigit() else 0
            found.append(Commit(sha.strip(), when, message, touched))
        return found


def _log_args(tip_sha: str, base: str | None, limit: int, paths: tuple[str, ...]) -> list[str]:
    """`git log`'s arguments for GitView.commits."""
    fmt = f"--format={_RECORD}%H{_FIELD}%ct{_FIELD}%B{_FIELD}"
    args = ["log", fmt, f"--max-count={limit}", tip_sha]
    if base:
        args.append(f"^{base}")
    if paths:
        args += ["--name-only", "--no-renames", "--", *paths]
    return args


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's empty tree: the base of a root commit's change."""
