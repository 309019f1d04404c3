"""When a story file last changed: its mtime, or in git mode its last commit.

The seed compares the story file's mtime with each DONE task's completedAt. After a
clone or a checkout every file has a fresh mtime, so every DONE task looks stale. In
git mode (the default) a story file that git tracks and that is unmodified dates from
its last commit, when that is earlier than its mtime. `mtime` mode is the seed's
literal rule. `MODES` is the one spelling of the two modes.

This is the only place the rule lives. Every envelope is made by storyd.api.answers.answer
(`storyd resume`'s direct read, the daemon's cache, and the commands that read without
a daemon), which hands storyd.core.envelope.stale_warnings a `git_commit_time` to call; the
staleness detector restates the envelope's warnings.
Git is asked only when mtime alone would warn, through `git` subprocesses (no
git library: this sits on `storyd resume`'s start-up path):

    per file   two short calls (status, log -1), run at once, memoised on the file's
               stat and the repository's stamp (the index's stat and the commit HEAD
               resolves to)
    ahead      a direct scan (`prefetch`): one `git status` and one `git log` for the
               story files of a whole workspace that will ask, started before the
               detectors are imported and read at the first answer that needs them; the
               log stops once every file has its commit, and a path it cannot vouch
               for (a merge on the way, a name git quotes) is asked per file
    batched    the daemon (`switches.configure(git_batching=True)`, git mode only):
               one `git status` and one `git log --name-only` pass per workspace
               (`prime`), redone when the stamp
               moves (`pin` reads the stamp once for a whole state file); a path the pass
               cannot vouch for (ignored, absent, or changed since it began) is asked
               per file
"""

from __future__ import annotations

import os
import time

from storyd.core.switches import CONFIG

TYPE_CHECKING = False  # `typing` costs start-up time on the resume path (daemon/core/model.py)
if TYPE_CHECKING:
    from storyd.core.gitstate import GitLocation

__all__ = [
    "DEFAULT_MODE",
    "GIT",
    "MODES",
    "MTIME",
    "git_commit_time",
    "mtime_seconds",
    "pin",
    "prefetch",
    "prime",
    "stamp_files",
    "unpin",
]

GIT = "git"  # a tracked, clean story file dates from its last commit
MTIME = "mtime"  # the seed's literal rule: the story file's mtime
MODES = (GIT, MTIME)
DEFAULT_MODE = GIT
_GIT_TIMEOUT = 5.0
_BATCH_TIMEOUT = 60.0
_MEMO_SIZE = 65536
# A file's ctime comes from the filesystem's clock, `started` from time.time(): Linux
# stamps files from a coarse clock that lags the fine one by a tick (several ticks on a
# loaded VM), HFS+ and SMB in whole seconds, FAT in two. A path changed this close
# before a batched pass began is asked per file, not trusted to the pass.
_CTIME_SLACK = 2.0
# The memo, the batched passes, the pins and the batching switch are process-wide state:
# storyd.core.switches holds them (CONFIG.git_*), `switches.reset()` empties them.


def pin(workspace: str) -> None:
    """Read the repository's stamp once for the many story files of one pass (the
    daemon reading a state file of 10,000 stories): without a pin, each file's answer
    reads HEAD, its ref and the index again (2.8 s of a 10,000-story warm-up). The
    pass sees git as it was when it began; a git change after that triggers a recheck.
    Only the batched answers read a pin: without batching there is nothing to read."""
    if not CONFIG.git_batching:
        return
    pins = CONFIG.git_pins.__dict__
    stamps: dict[str, tuple[object, ...] | None] = pins.setdefault("stamps", {})
    stamps[workspace] = _repo_stamp(workspace)


def unpin(workspace: str) -> None:
    """End the pass `pin` began: each answer reads the stamp afresh again."""
    CONFIG.git_pins.__dict__.get("stamps", {}).pop(workspace, None)


def mtime_seconds(path: str) -> int | None:
    """Whole-second mtime (as `stat -c %Y` prints it), None when the file is absent."""
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def git_commit_time(workspace: str, relpath: str, *, prime_batch: bool = True) -> int | None:
    """Committer time of the last commit touching `relpath`, if it is tracked and clean.

    None when git is absent, the workspace is not a repository, or the file is
    untracked, staged or modified. `prime_batch=False` (a daemon's miss for one unit):
    a batch not primed yet is not primed for it, the file is asked alone.
    """
    if CONFIG.git_batching:
        found = _from_batch(workspace, relpath, prime_batch)
        if found is not _MISS:
            return found  # type: ignore[return-value]
    _settle(workspace)
    key = _memo_key(workspace, relpath)
    memo = CONFIG.git_memo
    if key is not None and key in memo:
        return memo[key]
    where = _locate(workspace) if key is None else None  # a stamp: git's files are sound
    if where is not None and where.blocking_file() is not None:
        return None  # git would wait on a FIFO HEAD or ref until its deadline
    # both at once (a clean file needs both; a dirty one wastes a short `log -1`): one
    # git start's wait instead of two, on every unit a hook or resume reads directly
    asked = _spawn(workspace, ("status", "--porcelain", "--untracked-files=all", "--", relpath),
                   _GIT_TIMEOUT)  # fmt: skip
    last = _spawn(workspace, ("log", "-1", "--format=%ct", "--", relpath), _GIT_TIMEOUT)
    status = _collect(asked)
    stamp = (_collect(last) or "").strip()
    clean = status is not None and not status.strip()
    found = int(stamp) if clean and stamp.isdigit() else None
    if key is not None:
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[key] = found
    return found


_MISS = object()


def _locate(workspace: str) -> GitLocation | None:
    """storyd.core.gitstate.locate, imported on first use: most runs of `storyd resume` never
    read git's files."""
    from storyd.core.gitstate import locate

    return locate(workspace)


def _repo_stamp(workspace: str) -> tuple[object, ...] | None:
    """What every git answer of a workspace depends on: the index's stat and the commit
    HEAD resolves to (a reset, commit, checkout or fetch-and-merge changes one of them)."""
    where = _locate(workspace)
    if where is None:
        return None
    try:
        index = os.stat(where.index)
    except OSError:
        return None
    head = where.head_commit()
    if head is None:
        return None
    return (index.st_mtime_ns, index.st_size, index.st_ino, head)


def stamp_files(workspace: str) -> tuple[tuple[str, tuple[int, int, int, int, int] | None], ...]:
    """The files git's answers about a workspace depend on, with their signatures: its
    `.git`, the index, HEAD, the ref HEAD names, packed-refs and shallow (absolute
    paths). A cached answer that asked git is served only while they are unchanged
    (daemon/core/pipeline.py)."""
    where = _locate(workspace)
    if where is None:
        return ()
    found = []
    # and the workspace's own `.git` (a link or a `gitdir:` file retargeted is another
    # repository, whose stamp files are not the ones listed) and `shallow` (a fetch
    # --deepen brings older history, no ref moved)
    more = (os.path.join(workspace, ".git"), os.path.join(where.common, "shallow"))
    for path in (*where.stamp_paths(), *more):
        try:
            st = os.stat(path)
            sig: tuple[int, int, int, int, int] | None = (
                st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
            )
        except (OSError, ValueError):
            sig = None
        found.append((path, sig))
    return tuple(found)


def _from_batch(workspace: str, relpath: str, prime_batch: bool = True) -> object:
    """The batched answer for one path, or _MISS when the batch cannot tell (or is not
    primed and `prime_batch` is False)."""
    pinned = CONFIG.git_pins.__dict__.get("stamps", {})
    stamp = pinned[workspace] if workspace in pinned else _repo_stamp(workspace)
    if stamp is None:
        return _MISS
    primed = CONFIG.git_primed.get(workspace)
    if primed is None or primed[0] != stamp:
        if not prime_batch or not prime(workspace):
            return _MISS
        primed = CONFIG.git_primed.get(workspace)
        if primed is None:
            return _MISS
    _stamp, started, times, dirty = primed
    if relpath in dirty:
        return None
    found = times.get(relpath)
    if found is None:
        return _MISS  # ignored, absent or unparseable name: ask git about this one
    try:
        changed = os.stat(os.path.join(workspace, relpath)).st_ctime
    except OSError:
        return _MISS
    if changed >= started - _CTIME_SLACK:
        return _MISS  # touched since (or just before) the status pass began: ask git again
    return found


def prime(workspace: str) -> bool:
    """Learn every tracked path's last commit time and the dirty paths, in two git runs.

    `git status` gives the staged, modified and untracked paths (their answer is None);
    one `git log --name-only` walk gives, at each path's first appearance, the same
    commit `git log -1 -- path` names. False when git cannot answer.
    """
    stamp = _repo_stamp(workspace)
    if stamp is None:
        return False
    started = _now()
    status = _git(
        workspace,
        "-c",
        "core.quotePath=false",
        "status",
        "--porcelain",
        "-z",
        "--untracked-files=all",
        timeout=_BATCH_TIMEOUT,
    )
    if status is None:
        return False
    dirty = _dirty(status)
    log = _git(
        workspace,
        "-c",
        "core.quotePath=false",
        "log",
        "--no-renames",
        "--format=\x01%ct",
        "--name-only",
        timeout=_BATCH_TIMEOUT,
    )
    times: dict[str, int] = {}
    if log is None:
        # No commits yet (or no git): nothing is tracked, every answer is None or unknown.
        return False
    current = None
    for line in log.split("\n"):
        if line.startswith("\x01"):
            stamp_text = line[1:]
            current = int(stamp_text) if stamp_text.isdigit() else None
        elif line and current is not None and not line.startswith('"'):
            times.setdefault(line, current)
    CONFIG.git_primed[workspace] = (stamp, started, times, frozenset(dirty))
    return True


def _now() -> float:
    """The wall clock a batched pass's start is read from (file ctimes are wall time)."""
    return time.time()


_UNBATCHED = frozenset('*?[\\"')  # pathspec magic, or a name git prints quoted
_AHEAD_MAX = 1000  # story files one prefetch names (git's command line, its pathspec matching)


def prefetch(workspace: str, relpaths: list[str]) -> None:
    """Start git on every story file of a workspace whose answer will ask it: one
    `git status` and one `git log` for all of them (each file's own is two), read by
    the first `git_commit_time` of the workspace. A scan starts them before it imports
    the detectors, so git runs beside the imports. The daemon's batching, a file git
    would print quoted or read as a pattern, a file already memoised, and more than
    `_AHEAD_MAX` files at once are left to the usual path."""
    if CONFIG.git_batching or not relpaths:
        return
    stamp = _repo_stamp(workspace)
    if stamp is None:
        return
    keys: dict[str, tuple[object, ...]] = {}
    for relpath in dict.fromkeys(relpaths):
        key = _stat_key(workspace, relpath, stamp)
        if key is not None and key not in CONFIG.git_memo and _batchable(relpath):
            keys[relpath] = key
    if not keys or len(keys) > _AHEAD_MAX:
        return
    paths = ("--", *keys)
    quiet = ("-c", "core.quotePath=false")
    status = _spawn(workspace, (*quiet, "status", "--porcelain", "-z",
                                "--untracked-files=all", *paths), _GIT_TIMEOUT)  # fmt: skip
    # --full-history --sparse: every commit walked is printed with its real parents, so
    # the first merge on the way is seen (default simplification hides a merge TREESAME
    # to its second parent for the union of paths, and then walks that parent, where one
    # path's own `log -1` walks the first)
    log = _spawn(workspace, (*quiet, "log", "--no-renames", "--full-history", "--sparse",
                             "--format=\x01%ct %P", "--name-only", *paths),
                 _GIT_TIMEOUT)  # fmt: skip
    CONFIG.git_pins.__dict__.setdefault("ahead", {})[workspace] = (keys, status, log)


def _batchable(relpath: str) -> bool:
    """Whether git prints `relpath` as it is and reads it as itself, not as a pattern."""
    if relpath.startswith((":", "/", "../")) or _UNBATCHED & set(relpath):
        return False
    if any(ord(c) < 32 or c == "\x7f" for c in relpath):  # git quotes DEL too
        return False
    if os.path.normpath(relpath) != relpath:  # git prints `a/./b`, `a//b` normalised
        return False
    try:
        relpath.encode("utf-8")
    except UnicodeEncodeError:  # a name that is not UTF-8 (surrogate escapes)
        return False
    return True


def _settle(workspace: str) -> None:
    """Read what `prefetch` started for this workspace into the memo: a path git
    could not vouch for stays out of it (it is asked per file)."""
    ahead = CONFIG.git_pins.__dict__.get("ahead")
    if not ahead or workspace not in ahead:
        return
    keys, status, log = ahead.pop(workspace)
    text = _collect(status)
    if text is None:  # everything is asked per file: no need for the rest of the walk
        _stop(log)
        return
    changed = _dirty(text)
    dirty = {relpath for relpath in keys if _under(relpath, changed)}
    times = _last_commits(log, set(keys) - dirty)  # a dirty file's commit is not asked
    memo = CONFIG.git_memo
    for relpath, key in keys.items():
        if relpath in dirty:
            found: int | None = None
        elif relpath in times:
            found = times[relpath]
        else:
            continue
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[key] = found


def _dirty(status: str) -> set[str]:
    """The paths `git status --porcelain -z` names (a rename's source included)."""
    dirty: set[str] = set()
    fields = iter(status.split("\0"))
    for field in fields:
        if len(field) < 4:
            continue
        dirty.add(field[3:])
        if field[0] in "RC" or field[1] in "RC":
            dirty.add(next(fields, ""))  # the rename's source follows
    return dirty


def _under(relpath: str, paths: set[str]) -> bool:
    """Whether `paths` holds `relpath` or a path inside it (what its pathspec matches)."""
    return relpath in paths or any(p.startswith(relpath + "/") for p in paths)


def _last_commits(started: tuple[int, int, float] | None,
                  wanted: set[str]) -> dict[str, int | None]:  # fmt: skip
    """Each wanted path's committer time as `git log -1 -- path` gives it, read from one
    `git log --name-only` over all of them, ended as soon as each has one (None: git's
    walk ended without it). Stops, leaving the rest out, at a merge (a single path's
    walk could take another parent) or when git fails or overruns."""
    found: dict[str, int | None] = {}
    if started is None:
        return found
    pid, read_end, deadline = started
    import select

    left, current, tail, complete = set(wanted), None, b"", False
    try:
        while left and (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([read_end], [], [], remaining)
            chunk = os.read(read_end, 65536) if ready else b""
            if not chunk:
                complete = bool(ready)
                break
            *lines, tail = (tail + chunk).split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                if line.startswith("\x01"):
                    when, _, parents = line[1:].partition(" ")
                    if " " in parents.strip() or not when.isdigit():
                        left = set()  # a merge: the single path's walk may differ
                        break
                    current = int(when)
                elif line and current is not None:
                    for path in _named(line, left):
                        found[path] = current
                        left.discard(path)
    finally:
        os.close(read_end)
    if not complete:
        os.kill(pid, 9)  # every path answered (or a merge, or the deadline): no more walk
    _, code = os.waitpid(pid, 0)
    if complete and os.waitstatus_to_exitcode(code) == 0:
        found.update(dict.fromkeys(left))  # the walk ended: none of them has a commit
    return found


def _named(name: str, wanted: set[str]) -> list[str]:
    """The wanted paths a changed file's name falls under (itself, or a folder of it)."""
    hits = [name] if name in wanted else []
    parts = name.split("/")
    hits.extend(p for i in range(1, len(parts)) if (p := "/".join(parts[:i])) in wanted)
    return hits


def _stat_key(workspace: str, relpath: str, stamp: tuple[object, ...]) -> tuple[object, ...] | None:
    """`_memo_key` with the repository's stamp already read."""
    try:
        story = os.stat(os.path.join(workspace, relpath))
    except OSError:
        return None
    return (workspace, relpath, story.st_mtime_ns, story.st_size, story.st_ino, stamp)


def _memo_key(workspace: str, relpath: str) -> tuple[object, ...] | None:
    """What the answer depends on: the file, the index and HEAD's commit (None: don't
    memoise). While the file keeps its stat and the repository its stamp, git's answer
    cannot change."""
    stamp = _repo_stamp(workspace)
    return None if stamp is None else _stat_key(workspace, relpath, stamp)


def _git(workspace: str, *args: str, timeout: float = _GIT_TIMEOUT) -> str | None:
    """A git command's stdout, or None when it cannot run, fails or overruns the timeout.

    posix_spawn and a pipe rather than `subprocess`, whose import pulls in `re`, `locale`
    and `signal` (about 9 ms on `storyd resume`'s start-up path).
    """
    return _collect(_spawn(workspace, args, timeout))


def _spawn(workspace: str, args: tuple[str, ...], timeout: float) -> tuple[int, int, float] | None:
    """A git command started: (pid, its stdout's read end, deadline), or None."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            from storyd.core.children import spawn  # the child ends with this process

            pid = spawn(
                _git_path(),
                # fsmonitor is a command the repository's config names: `status` would run it
                ["git", "--no-optional-locks", "-c", "core.fsmonitor=false", "-C", workspace,
                 *args],
                os.environ,
                [
                    (os.POSIX_SPAWN_DUP2, devnull, 0),
                    (os.POSIX_SPAWN_DUP2, write_end, 1),
                    (os.POSIX_SPAWN_DUP2, devnull, 2),
                ],
            )
        finally:
            os.close(devnull)
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    os.close(write_end)
    return pid, read_end, time.monotonic() + timeout


def _git_path() -> str:
    """The git PATH names, found once per PATH and thread (storyd.core.paths.which: os
    functions, not shutil): posix_spawnp's own search tries every folder before it on
    each start. A missing git raises FileNotFoundError, as posix_spawnp would."""
    path = os.environ.get("PATH")
    known: dict[str | None, str] = CONFIG.git_pins.__dict__.setdefault("git", {})
    found = known.get(path)
    if found is None or not os.access(found, os.X_OK):
        from storyd.core.paths import which

        found = which("git")
        if found is None:
            raise FileNotFoundError("git")
        known[path] = found
    return found


def _stop(started: tuple[int, int, float] | None) -> None:
    """End a git command `_spawn` started whose output is no longer wanted."""
    if started is None:
        return
    pid, read_end, _ = started
    os.close(read_end)
    os.kill(pid, 9)  # not reaped yet, so still ours even if it has ended
    os.waitpid(pid, 0)


def _collect(started: tuple[int, int, float] | None) -> str | None:
    """The stdout of a git command `_spawn` started (None: it failed or overran)."""
    import select

    if started is None:
        return None
    pid, read_end, deadline = started
    chunks = []
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([read_end], [], [], remaining)
            if not ready:
                break
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    except BaseException:  # interrupted (an inline detector's alarm): no child left behind
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read_end)
    if time.monotonic() >= deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return None
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    return b"".join(chunks).decode("utf-8", "replace")
