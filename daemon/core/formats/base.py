"""The contract every format adapter meets, and the constructors every adapter uses.

The helpers only some adapters need are in daemon/core/formats/common.py, so the epic
adapter, on `storyd resume`'s start-up path, needs only this module.
"""

from __future__ import annotations

import os

from storyd.core import redo
from storyd.core.containment import Refused, resolve
from storyd.core.errors import DataError, StateFileMissing
from storyd.core.jsonio import JSONError, dumps, kind, loads, value_start
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT, read_locked
from storyd.core.model import DONE, PENDING, Finding, Task, Unit, new_task

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Protocol

    from storyd.core.formats.dialect import Dialect

    class Reuse(Protocol):
        """Adapter.load_reusing's `reuse`: the unit built before from an equal node
        (`reuse(key, node)`) or from equal text (`reuse.text(key, text)`), or None; and
        `reuse.made(key, unit)`, the one built before when a new one carries its data."""

        def __call__(self, key: str, node: dict[str, object]) -> Unit | None: ...

        def text(self, key: str, text: str) -> Unit | None: ...

        def made(self, key: str, unit: Unit) -> Unit: ...

        def restart(self) -> None: ...

__all__ = [
    "Adapter",
    "Source",
    "contained",
    "finding",
    "load_json_object",
    "make_task",
    "normal_status",
    "redo_finding",
    "status_text",
    "walk",
]


def contained(workspace: str, path: str) -> bool:
    """Whether `path` (absolute, or relative to the workspace), links resolved, is still
    inside the (resolved) workspace and out of git's folders (core/containment.py)."""
    try:
        resolve(workspace, path)
    except Refused:
        return False
    return True


class Source:
    """Where an adapter reads from: one workspace, with the lock bound to use.

    Every file it reads or probes is recorded in `seen` (workspace-relative path ->
    its signature when read, None when absent): the answers built from this read
    depend on exactly those files, and the daemon re-checks them on every cache hit
    (daemon/core/pipeline.py, "read your writes").
    """

    __slots__ = ("lock_timeout", "redo", "seen", "workspace")

    def __init__(self, workspace: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.workspace = workspace
        self.lock_timeout = lock_timeout
        self.seen: dict[str, tuple[int, int, int, int, int] | None] = {}
        self.redo: dict[str, str] = {}  # relpath -> core/redo.py `pending`'s word

    def path(self, relpath: str) -> str:
        """The absolute path of a workspace-relative path."""
        return os.path.join(self.workspace, relpath)

    def read(self, relpath: str, name: str = "", *, git: bool = False) -> bytes:
        """The file's bytes, read under the writers' shared flock(2) lock.

        The link rule of every state-file read: a path whose links lead out of the
        workspace or into git's folders is refused (Refused, exit 64), whoever reads
        it (resume, the epic view and its external epics, companions, hooks, MCP).
        `git`: git's own file, asked for by name (read, never a state file)."""
        path = self.path(relpath)
        # Refused (64): out, or into .git (unless `git`: a format reads `.git/HEAD`)
        base, real = resolve(self.workspace, path, git=git)
        # a link on the way: the file it leads to is a dependency too, so a write there
        # (in a folder the link's own folder's change queue does not see) is seen
        target = os.path.relpath(real, base) if real != os.path.join(base, relpath) else None
        try:
            got = read_locked(path, self.lock_timeout, name)
        except StateFileMissing:
            self.seen[relpath] = None
            if target is not None:
                self.seen.setdefault(target, None)
            raise
        self.seen[relpath] = got.signature
        if target is not None:
            self.seen.setdefault(target, got.signature)
        if got.redo is not None:  # a record waits: the answer depends on it too
            self.redo[relpath] = got.redo
            for record in (redo.record_path(os.stat(path)), redo.foreign_path(path)):
                self.seen.setdefault(record, _lsignature(record))
        return got.data

    def exists(self, relpath: str) -> bool:
        """Whether a workspace-relative path exists."""
        try:
            st = os.stat(self.path(relpath))
        except (OSError, ValueError):
            self.seen.setdefault(relpath, None)
            return False
        self.seen.setdefault(
            relpath, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        )
        return True


def _lsignature(path: str) -> tuple[int, int, int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def redo_finding(relpath: str, word: str) -> Finding:
    """What a reader says of a redo record it found for `relpath` (it never obeys one)."""
    if word == "pending":
        message = (f"{relpath}: a reconcile write was interrupted and is pending; the file "
                   "may hold part of it: run `storyd reconcile --recover` to finish it")
        return finding("interrupted-write", "warning", message)
    message = (f"{relpath}: a redo record storyd did not write for this file lies beside "
               "it or in storyd's folder; it is ignored, never obeyed "
               "(`storyd reconcile --recover` says why)")
    return finding("redo-ignored", "warning", message)


def load_json_object(data: bytes, relpath: str) -> dict[str, object]:
    """Parse a state file that must hold a JSON object (UTF-8, or UTF-16/32 with a BOM).

    A DataError is one line naming the file, the cause (a comment, a trailing comma,
    merge-conflict markers, UTF-16 without a BOM, the wrong top-level type, ...) and
    the line and column; the cause is worked out only once parsing has failed.
    """
    try:
        value = loads(data)
    except JSONError as exc:
        msg = f"{relpath}: invalid JSON: {exc}"
        raise DataError(msg) from None
    if not isinstance(value, dict):
        line, column = value_start(data)
        msg = (
            f"{relpath}: the top level must be a JSON object, not {kind(value)} "
            f"at line {line} column {column}"
        )
        raise DataError(msg)
    return value


def finding(
    code: str,
    severity: str,
    message: str,
    task: str | None = None,
    evidence: dict[str, str] | None = None,
) -> Finding:
    """A finding of the `format` detector: a fact read from the files themselves."""
    return Finding("format", code, severity, message, task, evidence)


def status_text(raw: object, default: str) -> str:
    """A raw status as text: null and false give `default` (jq's `//`), non-strings JSON text."""
    if raw is None or raw is False:
        return default
    return raw if isinstance(raw, str) else dumps(raw).decode()


def normal_status(status: str) -> str:
    """A status as writers mean it: surrounding whitespace trimmed, Unicode in NFC.

    `" DONE "` is DONE and an NFD `Concluída` (`i` + combining acute, as some editors
    save it) is the NFC one. `unicodedata` is imported only for non-ASCII text, so the
    usual statuses cost a `strip` and nothing else.
    """
    text = status.strip()
    if text.isascii():
        return text
    import unicodedata

    return unicodedata.normalize("NFC", text)


def make_task(
    task_id: str,
    raw_status: object,
    *,
    done: frozenset[str],
    pending: frozenset[str],
    default: str,
    commit_sha: str | None = None,
    completed_at: object = None,
    extra: dict[str, object] | None = None,
) -> tuple[Task, Finding | None]:
    """A canonical task; statuses match trimmed, NFC and case-insensitively.

    A known status is kept in its normal form (so adapters compare `status.lower()`
    plainly); an unknown one is kept as written, bucketed PENDING, with a finding.
    """
    written = status_text(raw_status, default)
    status = normal_status(written)
    lowered = status.lower()
    bucket = DONE if lowered in done else PENDING
    known = lowered in done or lowered in pending
    task = new_task(task_id, status if known else written, bucket, known, commit_sha,
                    completed_at if isinstance(completed_at, str) else None, extra)
    if known:
        return task, None
    message = f"unknown status {written!r} for task {task_id}; treated as PENDING"
    return task, finding("unknown-status", "warning", message, task_id)


def nameable(path: str) -> bool:
    """Whether a path decoded from the file system is valid UTF-8 (os.fsdecode keeps an
    undecodable byte as a lone surrogate): storyd's answers, events and history are
    UTF-8, so a state file it could not name in them is not one it reads."""
    if path.isascii():
        return True
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def walk(workspace: str, roots: Iterable[str], wanted: Callable[[str], bool],
         enter: Callable[[str], bool] | None = None) -> list[str]:  # fmt: skip
    """Every file below the workspace's `roots` (folders named `.*` skipped) whose
    workspace-relative path `wanted` accepts, sorted: how a format finds its files.
    `enter` (given a folder's workspace-relative path) may spare folders below which
    `wanted` accepts nothing. A folder or file whose name is not UTF-8 is skipped
    (`nameable`)."""
    found: list[str] = []
    for root in roots:
        top = os.path.join(workspace, root)
        # each folder's path relative to the workspace, from its parent's (os.walk goes
        # top-down): one relpath per root, not one per folder and a normpath per file
        rel_of: dict[str, str] = {}
        for folder, dirs, files in os.walk(top):  # (nothing at all for a missing root)
            here = rel_of.pop(folder, None)
            if here is None:  # the root itself, walked first
                here = os.path.relpath(top, workspace)
            prefix = "" if here == "." else here + os.sep
            dirs[:] = [d for d in dirs if not d.startswith(".") and nameable(d)
                       and (enter is None or enter(prefix + d))]  # fmt: skip
            rel_of.update((os.path.join(folder, d), prefix + d) for d in dirs)
            found.extend(rel for f in files if nameable(f) and wanted(rel := prefix + f))
    return sorted(found)


class Adapter:
    """One state-file convention. Subclasses set the class attributes and `load`.

    name        the format's name (`epic`, `session`, ...), as in docs/formats.md
    convention  the seed convention and where its files live, for error messages
    roots       workspace-relative folders where its files live: the only places watched
    time_sensitive  its findings depend on the clock (ancient or future timestamps), so
                the daemon re-reads its files on the periodic rescan even when unchanged
    codes       the codes of the `format` findings it raises (reconcile repairs a code
                only from a source that declares it)
    ordered     its task order is the order the work is done in (task-order checks it);
                False where the file is sorted otherwise (beads by id, Task Master by
                dependencies and priority)
    records_commits  its files record each task's commit sha (unrecorded-commit checks
                them); False where only commit messages name tasks (task-named does)
    dialect     how `storyd reconcile` writes its files (storyd.core.formats.dialect),
                None: storyd never writes them (a property, or an attribute in a plugin)
    """

    name = ""
    convention = ""
    roots: tuple[str, ...] = ()
    time_sensitive = False
    codes: tuple[str, ...] = ()
    ordered = True
    records_commits = True

    dialect_name: str | None = None  # a key of storyd.core.formats.dialect.BY_NAME

    @property
    def dialect(self) -> Dialect | None:
        """How `storyd reconcile` writes its files; None: storyd never writes them. A
        built-in names its dialect (`dialect_name`), imported when first asked, so `storyd
        resume` never loads it; a plugin sets `dialect` itself."""
        if self.dialect_name is None:
            return None
        from storyd.core.formats.dialect import BY_NAME

        return BY_NAME[self.dialect_name]

    def matches(self, relpath: str) -> bool:
        """Whether a workspace-relative path is one of this format's state files."""
        raise NotImplementedError

    def owner(self, relpath: str) -> str | None:
        """The state file whose units a changed companion file (story, journal) affects."""
        return relpath if self.matches(relpath) else None

    def find(self, source: Source) -> list[str]:
        """Every state file of this format in the workspace, workspace-relative."""
        return walk(source.workspace, self.roots, self.matches)

    def load(self, source: Source, relpath: str) -> list[Unit]:
        """Read the state file (under the lock) and return its units in file order."""
        raise NotImplementedError

    def load_one(self, source: Source, relpath: str, key: str | None) -> list[Unit]:
        """The units a query for `key` is answered from: the asked unit alone, none when
        the file does not hold it, or (key None: the file's only or current unit) every
        unit. What a direct read and the daemon's first query of a file build.

        The default loads every unit and keeps the first with the key (the one a query
        picks); a format whose one file holds many units (the epic format) overrides it
        to build only the asked one and probe only that unit's companion files.
        """
        units = self.load(source, relpath)
        if key is None:
            return units
        return next(([u] for u in units if u.key == key), [])

    def load_reusing(self, source: Source, relpath: str, reuse: Reuse) -> list[Unit]:
        """`load`, but a unit whose node `reuse(key, node)` recognises is not built again.

        For formats whose one file holds many units (the epic format), so that a write
        to one story of a large file costs one story's build. `reuse` returns the unit
        built earlier from an identical node, or None. The default reads everything.
        """
        return self.load(source, relpath)
