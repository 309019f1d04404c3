"""The one git locator: where a workspace's git keeps its files, and what they say.

Every part of storyd that reads git's own files (never through a git process) reads
them here: storytime's stamps on `storyd resume`'s path, the watcher's git watches,
the git views' branch, the registry's work-tree roots, doctor.

    locate(ws)                         GitLocation of a work tree, or None: `.git` a
                                       folder, or a linked worktree's `.git` file followed
                                       (its gitdir, whose `commondir` names the shared one)
    is_work_tree(folder)               whether `folder` holds a `.git` (the refresher's and
                                       the registry's test of a work tree)
    work_tree_root(path)               the nearest folder upward that is one
    GitLocation.gitdir, .common        the work tree's own folder (HEAD, index, operation
                                       markers) and the repository's shared one (refs,
                                       packed-refs, objects); the same outside a worktree
    GitLocation.head_ref()             the ref HEAD names (None when detached)
    GitLocation.branch()               its short name when it is a branch
    GitLocation.resolve(ref)           the commit a ref names: loose ref (in the common
                                       dir, or the gitdir for per-worktree refs), then
                                       packed-refs; None when unborn or unreadable
    GitLocation.head_commit()          the commit HEAD resolves to (None: unborn, unknown)
    GitLocation.stamp_paths()          the files every git answer depends on: index, HEAD,
                                       packed-refs, the ref(s) HEAD names
    GitLocation.operation()            the marker of a rebase, am, merge, cherry-pick, revert
                                       or bisect; operation_name() says which, git's word
    operation_under_way(ws)            that name and marker for a workspace, or None
    operation_findings(ws)             the warning that says so (git-operation/
                                       operation-in-progress), or ()
    GitLocation.lock_age()             (path, seconds since last written) of index.lock
    git_operation_in_progress(ws, w, j) an operation under way, or an index.lock written
                                       less than `w` seconds ago (or the index less
                                       than `j`: a work tree git has just written)
    git_lock_age(ws)                   GitLocation.lock_age() of a workspace
    held_lock_findings(ws, w)          the warning that a lock older than `w` is there

Every read goes through storyd.core.regular: a FIFO `.git`, HEAD, commondir, loose ref or
packed-refs is refused at once, never waited on. This module sits on `storyd resume`'s
start-up path (storyd.core.storytime): it imports os, time and storyd.core.regular only.

The daemon defers its detectors while git is mid-operation (mid-rebase every rewritten
commit looks unreachable). index.lock is a lock, not an operation: one left behind by a
crashed git used to defer them for ever. It defers them only while it is younger than
`limits.git_lock_wait` (default 5 s); past that the detectors check anyway, and every
unit of the workspace carries a warning saying how long the lock has been held.
"""

from __future__ import annotations

import os
import stat
import time

from storyd.core.regular import open_regular, read_regular

TYPE_CHECKING = False  # `typing` costs start-up time on the resume path (daemon/core/model.py)
if TYPE_CHECKING:
    from storyd.core.model import Finding

__all__ = [
    "GIT_LOCK_WAIT",
    "OPERATION_DETECTOR",
    "OPERATION_MARKERS",
    "GitLocation",
    "git_lock_age",
    "git_operation_in_progress",
    "held_lock_findings",
    "is_work_tree",
    "locate",
    "operation_findings",
    "operation_under_way",
    "work_tree_root",
]

GIT_LOCK_WAIT = 5.0  # seconds: limits.git_lock_wait's default
_LOCK = "index.lock"
# the files and folders git leaves while an operation is under way (GitLocation.operation)
OPERATION_MARKERS = (
    "rebase-merge",
    "rebase-apply",
    "MERGE_HEAD",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "BISECT_LOG",
)
_OPERATION_NAMES = {
    "rebase-merge": "rebase",
    "rebase-apply": "rebase",
    "MERGE_HEAD": "merge",
    "CHERRY_PICK_HEAD": "cherry-pick",
    "REVERT_HEAD": "revert",
    "BISECT_LOG": "bisect",
}
OPERATION_DETECTOR = "git-operation"
# refs each worktree keeps in its own gitdir (git's is_per_worktree_ref); the rest, and
# packed-refs, live in the common dir
_PER_WORKTREE = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
_SYMREF_DEPTH = 5  # git's own limit on a chain of symbolic refs
_HEX = frozenset("0123456789abcdef")
_SMALL = 4096  # HEAD, a loose ref, `.git` and commondir are one short line


class GitLocation:
    """Where one work tree's git keeps its files (immutable).

    `gitdir` holds what is the work tree's own (HEAD, index, operation markers,
    index.lock); `common` what every worktree of the repository shares (refs,
    packed-refs, objects, config). Outside a linked worktree they are the same folder.
    """

    __slots__ = ("common", "gitdir")
    gitdir: str
    common: str

    def __init__(self, gitdir: str, common: str) -> None:
        object.__setattr__(self, "gitdir", gitdir)
        object.__setattr__(self, "common", common)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"GitLocation is immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"GitLocation is immutable: cannot delete {name}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GitLocation):
            return NotImplemented
        return (self.gitdir, self.common) == (other.gitdir, other.common)

    def __hash__(self) -> int:
        return hash((self.gitdir, self.common))

    def __repr__(self) -> str:
        return f"GitLocation(gitdir={self.gitdir!r}, common={self.common!r})"

    @property
    def linked(self) -> bool:
        """Whether this is a linked worktree (`git worktree add`): its refs are elsewhere."""
        return self.gitdir != self.common

    @property
    def index(self) -> str:
        """The work tree's index file."""
        return os.path.join(self.gitdir, "index")

    # -- refs ------------------------------------------------------------------------

    def ref_path(self, ref: str) -> str:
        """Where a loose ref lives: per-worktree refs in the gitdir, the rest shared."""
        own = ref.startswith(_PER_WORKTREE)
        return os.path.join(self.gitdir if own else self.common, ref)

    def head_ref(self) -> str | None:
        """The ref HEAD names (`refs/heads/main`); None when HEAD is detached, or names
        no ref (reftable's placeholder `refs/heads/.invalid`). OSError when HEAD cannot
        be read: absent, or not a regular file."""
        return _symbolic(_read_line(os.path.join(self.gitdir, "HEAD")))

    def branch(self) -> str | None:
        """The checked-out branch's short name; None when HEAD is detached. OSError when
        HEAD cannot be read."""
        ref = self.head_ref()
        if ref is None or not ref.startswith("refs/heads/"):
            return None
        return ref[len("refs/heads/") :]

    def resolve(self, ref: str) -> str | None:
        """The commit a ref names: its loose file (symbolic refs followed), else its line
        in packed-refs. None when it names nothing (an unborn branch), or the files
        cannot be read (never raises)."""
        for _ in range(_SYMREF_DEPTH):
            if not _is_ref(ref):
                return None
            try:
                line = _read_line(self.ref_path(ref))
            except (FileNotFoundError, NotADirectoryError):
                return self._packed(ref)
            except OSError:  # not a regular file (a FIFO): unknown
                return None
            target = _symbolic(line)
            if target is None:
                return line if _is_sha(line) else None
            ref = target
        return None

    def head_commit(self) -> str | None:
        """The commit HEAD resolves to: a detached sha, or what its ref names. None on an
        unborn branch, or when the files cannot be read (never raises)."""
        try:
            line = _read_line(os.path.join(self.gitdir, "HEAD"))
        except OSError:
            return None
        ref = _symbolic(line)
        if ref is None:
            return line if _is_sha(line) else None
        return self.resolve(ref)

    def _packed(self, ref: str) -> str | None:
        wanted = os.fsencode(ref)
        try:
            fd = open_regular(os.path.join(self.common, "packed-refs"))
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as lines:
                for line in lines:
                    sha, _, name = line.rstrip(b"\r\n").partition(b" ")
                    if name == wanted:
                        text = sha.decode("ascii", "replace")
                        return text if _is_sha(text) else None
        except OSError:
            return None
        return None

    def stamp_paths(self) -> tuple[str, ...]:
        """The files every git answer about the work tree depends on: the index, HEAD,
        packed-refs and the loose ref(s) HEAD names (a symbolic chain: each link). A commit,
        reset, checkout, fetch-and-merge or pack-refs changes one of them."""
        paths = [self.index, os.path.join(self.gitdir, "HEAD")]
        paths.append(os.path.join(self.common, "packed-refs"))
        try:
            ref = self.head_ref()
        except OSError:
            ref = None
        for _ in range(_SYMREF_DEPTH):
            if ref is None or not _is_ref(ref):
                break
            path = self.ref_path(ref)
            paths.append(path)
            try:
                ref = _symbolic(_read_line(path))
            except OSError:
                break
        return tuple(paths)

    def blocking_file(self) -> str | None:
        """The first of git's files that a git process would open and wait on for ever
        (there, but not a regular file: a FIFO, a device), or None."""
        extra = (os.path.join(self.common, "config"), os.path.join(self.gitdir, "commondir"))
        for path in (*self.stamp_paths(), *extra):
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue  # absent: git says so itself, in time
            if not stat.S_ISREG(mode):
                return path
        return None

    # -- operations --------------------------------------------------------------------

    def operation(self) -> str | None:
        """The marker of the git operation under way (rebase, merge, cherry-pick, bisect)."""
        for marker in OPERATION_MARKERS:
            if os.path.exists(os.path.join(self.gitdir, marker)):
                return marker
        return None

    def operation_name(self) -> tuple[str, str] | None:
        """The operation under way as git names it (`rebase`, `am`, `merge`,
        `cherry-pick`, `revert`, `bisect`) and its marker's path, or None."""
        marker = self.operation()
        if marker is None:
            return None
        name = _OPERATION_NAMES[marker]
        if marker == "rebase-apply" and os.path.exists(
            os.path.join(self.gitdir, marker, "applying")
        ):
            name = "am"  # `git am` keeps its state in rebase-apply/ too, with `applying`
        return name, os.path.join(self.gitdir, marker)

    def lock_age(self) -> tuple[str, float] | None:
        """The work tree's index.lock and the seconds since it was last written, if any."""
        path = os.path.join(self.gitdir, _LOCK)
        try:
            written = os.stat(path).st_mtime
        except OSError:
            return None
        return path, max(0.0, time.time() - written)


def _read_line(path: str) -> str:
    """The first line of a small regular file, stripped (OSError if it is none)."""
    fd = open_regular(path)  # a FIFO would block open(2) for ever
    try:
        raw = os.read(fd, _SMALL)
    finally:
        os.close(fd)
    return os.fsdecode(raw.partition(b"\n")[0].strip())


def _symbolic(line: str) -> str | None:
    """The ref a `ref: refs/...` line names; None when the line is anything else."""
    if not line.startswith("ref:"):
        return None
    ref = line[4:].strip()
    return ref if _is_ref(ref) else None


def _is_ref(name: str) -> bool:
    """A ref name under refs/ whose loose file stays inside the git folder (no empty,
    `.` or `..` part: a HEAD saying `ref: refs/../../x` is no ref)."""
    return name.startswith("refs/") and all(
        part and not part.startswith(".") for part in name.split("/")
    )


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and _HEX.issuperset(text)


def locate(workspace: str) -> GitLocation | None:
    """Where the work tree at `workspace` keeps its git files; None when `workspace`
    holds no usable `.git` (absent, a FIFO, a `.git` file not naming a folder)."""
    dotgit = os.path.join(workspace, ".git")
    if os.path.isdir(dotgit):
        return GitLocation(dotgit, dotgit)
    try:  # a FIFO `.git` used to block the refresher here for ever
        line = read_regular(dotgit, _SMALL).decode("utf-8", "replace").partition("\n")[0].strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    gitdir = os.path.normpath(os.path.join(workspace, line[7:].strip()))
    if not os.path.isdir(gitdir):
        return None
    try:
        text = read_regular(os.path.join(gitdir, "commondir"), _SMALL).decode("utf-8", "replace")
        common = os.path.normpath(os.path.join(gitdir, text.partition("\n")[0].strip()))
    except OSError:
        common = gitdir
    return GitLocation(gitdir, common)


def is_work_tree(folder: str) -> bool:
    """Whether `folder` is the top of a work tree: it holds a `.git` (folder or file)."""
    return os.path.exists(os.path.join(folder, ".git"))


def work_tree_root(path: str) -> str | None:
    """The work tree holding `path` (resolved): the nearest folder upward with a `.git`."""
    folder = os.path.realpath(path)
    while True:
        if is_work_tree(folder):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def git_lock_age(workspace: str) -> tuple[str, float] | None:
    """The workspace's index.lock and the seconds since it was last written, if any."""
    where = locate(workspace)
    return None if where is None else where.lock_age()


def git_operation_in_progress(workspace: str, lock_wait: float = GIT_LOCK_WAIT,
                              just_written: float = 0.0) -> bool:  # fmt: skip
    """Whether a git operation is mid-way (rebase, merge, cherry-pick, bisect), or git
    wrote its index.lock less than `lock_wait` seconds ago, or (`just_written`) the
    index itself less than that many seconds ago: a work tree git has just written while
    its ref may not have moved yet (a switch moves HEAD after the index; a cherry-pick
    leaves CHERRY_PICK_HEAD a moment after it)."""
    where = locate(workspace)
    if where is None:
        return False
    if where.operation() is not None:
        return True
    lock = where.lock_age()
    if lock is not None and lock[1] < lock_wait:
        return True
    if just_written <= 0.0:
        return False
    try:
        written = os.stat(os.path.join(where.gitdir, "index")).st_mtime
    except OSError:
        return False
    return time.time() - written < just_written


def operation_under_way(workspace: str) -> tuple[str, str] | None:
    """The git operation stopped mid-way in the workspace (its name and marker), if any."""
    where = locate(workspace)
    return None if where is None else where.operation_name()


def operation_findings(workspace: str) -> tuple[Finding, ...]:
    """An info finding saying which git operation is under way; () when none is.

    While one is, HEAD is transient (mid-rebase every rewritten commit looks
    unreachable): the direct path runs no detector and says this instead, as the daemon
    keeps its detectors' last findings and rechecks when the operation ends. Info, so
    that `check` exits alike on both paths."""
    under_way = operation_under_way(workspace)
    if under_way is None:
        return ()
    from storyd.core.model import Finding  # not at the top: storytime's import stays small

    name, marker = under_way
    ends = "git bisect reset" if name == "bisect" else f"git {name} --continue or --abort"
    message = (
        f"a git {name} is in progress ({marker}): the recorded commits are checked "
        f"when it ends ({ends})"
    )
    return (Finding(OPERATION_DETECTOR, "operation-in-progress", "info", message),)


def held_lock_findings(workspace: str, lock_wait: float = GIT_LOCK_WAIT) -> tuple[Finding, ...]:
    """A warning when index.lock has been held `lock_wait` seconds or more."""
    lock = git_lock_age(workspace)
    if lock is None or lock[1] < lock_wait:
        return ()
    from storyd.core.model import Finding  # not at the top: storytime's import stays small

    path, age = lock
    message = (
        f"a git lock has been held for {age:.0f} s ({path}): checked anyway after "
        f"{lock_wait:g} s; remove it if no git command is running"
    )
    return (Finding("git-lock", "git-lock-held", "warning", message),)
