"""Per-session records for the agents' hooks: where a session began, what it has checked.

    $XDG_STATE_HOME/storyd/sessions/<sha256(session id)[:32]>.json   (mode 0600)

A record holds the workspace, when the session began and the commit HEAD named then,
and every state file's last check: the signatures of the files its units were read from
(the state file, its companions such as execution.json, a `.bak` that stood in), how
many units it held and the problems it had. `changes` compares the workspace with the
record: a state file whose files did not change is not read again, so a hook after a
command that touched no state file costs a walk of the format roots and some stats.

Records are small (one line per state file), written whole through a temporary file,
and bounded: at most MAX_RECORDS, the oldest dropped, none older than MAX_AGE. A record
is read only when it is a regular file of at most 1 MiB (a FIFO there is unreadable at
once, storyd.core.regular), and written only inside the `sessions` folder itself: the
folder is opened without following a link, the temporary file made new (O_EXCL,
O_NOFOLLOW) and renamed over the record, so no link there leads a write elsewhere.

Every hook call also leaves the session's last event (issue 34, `storyd top`): `event`
(session-start, post-tool-use, stop, notification), `at` (when the session entered
that state), `note` (what a notification said), `on` (the state file, and the unit when
known, the session is on). The file's mtime is the last hook call: `mark` rewrites the
record only when one of those changed, else touches it. Records written before issue
34 lack the four fields and still load: their state is unknown (`state` gives None).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.core.model import Unit
    from storyd.core.pipeline import FileRead

__all__ = [
    "MAX_AGE", "MAX_RECORDS", "STATES", "Change", "begin", "changes", "keep", "load", "mark",
    "record_path", "save", "state", "touch", "touched", "write_private",
]  # fmt: skip

MAX_RECORDS = 256
MAX_AGE = 14 * 86400.0  # seconds
_MAX_BYTES = 1 << 20  # a record larger than this is not ours: ignored
_LOCK_TIMEOUT = 1.0
# the state a session is in after each event (a notification: waiting for the user)
STATES = {
    "session-start": "working", "post-tool-use": "working", "subagent-stop": "working",
    "stop": "stopped", "notification": "waiting",
}  # fmt: skip
_NOTE_CHARS = 200


class Change:
    """A state file that got worse since the session's last check.

    relpath   the state file
    what      one line: no longer parses, a unit broke, units lost, fell back to .bak
    """

    __slots__ = ("relpath", "what")

    def __init__(self, relpath: str, what: str) -> None:
        self.relpath = relpath
        self.what = what


def record_path(session: str) -> str:
    """Where the record of `session` lives."""
    from storyd.core.digest import sha256_hex  # not hashlib: OpenSSL's load, 5 ms a hook
    from storyd.core.paths import state_dir

    key = sha256_hex(session.encode("utf-8", "surrogatepass"))[:32]
    return os.path.join(state_dir(), "sessions", key + ".json")


def load(session: str) -> dict[str, object] | None:
    """The record of `session`, or None (none yet, unreadable, not ours)."""
    from storyd.core.jsonio import loads  # the C scanner, without `json`'s import of re
    from storyd.core.regular import read_regular

    try:  # a FIFO, a device or more than _MAX_BYTES: unreadable (OSError), never waited on
        value = loads(read_regular(record_path(session), _MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("session") != session:
        return None
    if not isinstance(value.get("files"), dict):
        return None
    return value


def save(record: dict[str, object]) -> bool:
    """Write the record (0600, whole, through a temporary file) and prune old ones; False
    when it cannot be written (a read-only home: the next check then repeats this one)."""
    # storyd's lean writer, not `json` (its import of re: ~5 ms of a hook's 17)
    from storyd.core.jsonio import dumps

    return write_private(record_path(str(record["session"])), dumps(record, exact_floats=True))


def write_private(path: str, data: bytes, *, keep: int = MAX_RECORDS,
                  age: float = MAX_AGE) -> bool:  # fmt: skip
    """Write `data` as `path` in storyd's private state (0600, whole, through a temporary
    file made new in the folder opened without following a link), then leave at most
    `keep` entries there, none older than `age` seconds; False when it cannot be written."""
    folder, name = os.path.split(path)
    tmp = f".record-{os.getpid()}.tmp"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        # the folder itself, never a link's target: every name below is taken in it
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            _unlink(tmp, dfd)  # a crashed process's (of this pid), or anything else there
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dfd)  # fmt: skip
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # a link there is replaced
        except OSError:
            _unlink(tmp, dfd)
            return False
        _prune(dfd, keep, age)
    finally:
        os.close(dfd)
    return True


def _unlink(name: str, dfd: int) -> None:
    """Remove `name` from the folder open as `dfd`, if it can be."""
    try:  # noqa: SIM105 (contextlib imports collections, functools...: ~1 ms a hook)
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def _prune(dfd: int, keep: int, age: float) -> None:
    """At most `keep` entries in the folder open as `dfd`, none older than `age` seconds
    (anything but a folder counts: a FIFO or a link left there goes in its turn)."""
    import time

    try:
        with os.scandir(dfd) as found:
            entries = [(e.stat(follow_symlinks=False).st_mtime, e.name) for e in found
                       if not e.is_dir(follow_symlinks=False)]  # fmt: skip
    except OSError:
        return
    entries.sort(reverse=True)
    cutoff = time.time() - age
    for index, (mtime, name) in enumerate(entries):
        if index >= keep or mtime < cutoff:
            _unlink(name, dfd)


def _problems(units: list[Unit]) -> list[str]:
    """The problems a model must hear about: broken units, errors, a `.bak` standing in."""
    found: list[str] = []
    for unit in units:
        if unit.error:
            found.append(f"unit {unit.key} no longer parses: {unit.error}")
        for f in unit.findings:
            if f.severity == "error" or f.code == "restored-from-backup":
                task = f" task {f.task}" if f.task else ""
                found.append(f"{unit.key}{task}: {f.code}: {f.message}")
    return found


def _entry(read: FileRead) -> dict[str, object]:
    deps = [[p, list(s) if s is not None else None] for p, s in read.deps]
    if read.error is not None:
        from storyd.core.errors import DataError

        broken = isinstance(read.error, DataError)
        what = f"no longer parses: {read.error.message}" if broken else None
        return {"deps": deps, "units": None, "problems": [what] if what else [], "skip": not broken}
    units = read.units or []
    return {"deps": deps, "units": len(units), "problems": _problems(units), "skip": False}


def _unchanged(entry: object) -> bool:
    from storyd.core.pipeline import signature

    if not isinstance(entry, dict) or entry.get("skip") or not isinstance(entry.get("deps"), list):
        return False
    for dep in entry["deps"]:
        if not (isinstance(dep, list) and len(dep) == 2 and isinstance(dep[0], str)):
            return False
        now = signature(dep[0])
        if (list(now) if now is not None else None) != dep[1]:
            return False
    return True


def survey(workspace: str, files: dict[str, object]) -> dict[str, dict[str, object]]:
    """Every state file of the workspace as a record entry; entries in `files` whose
    files did not change are kept as they are, without reading them."""
    from storyd.core.formats import state_files
    from storyd.core.pipeline import Options, read_file

    # a file unchanged since the last check is not read again, nor its format imported
    found = state_files(workspace, lambda relpath: _unchanged(files.get(relpath)))
    out: dict[str, dict[str, object]] = {}
    for relpath, adapter in found.items():
        if adapter is None:
            out[relpath] = files[relpath]  # type: ignore[assignment]
            continue
        out[relpath] = _entry(read_file(workspace, adapter, relpath, Options(_LOCK_TIMEOUT)))
    return out


def _worse(relpath: str, old: object, new: dict[str, object]) -> list[Change]:
    before = old if isinstance(old, dict) else {}
    seen = set(before.get("problems") or ())
    problems = new["problems"]
    out = [Change(relpath, p) for p in (problems if isinstance(problems, list) else ())
           if p not in seen]
    had, has = before.get("units"), new.get("units")
    if isinstance(had, int) and isinstance(has, int) and has < had:
        out.append(Change(relpath, f"holds {has} unit(s), {had} at the last check: units lost"))
    return out


def begin(
    session: str, workspace: str, *, checked: bool = True, agent: str | None = None
) -> dict[str, object]:
    """A new record: the session starts now, at HEAD, with the workspace as it is (with
    `checked` false, met mid-session: nothing checked yet, so the first `changes` tells
    every problem, and which files the session changed is unknown). `agent` is who
    runs it (claude, cursor, vscode, codex, gemini), which `storyd top` shows."""
    import time

    from storyd.core import gitstate

    where = gitstate.locate(workspace)
    files = survey(workspace, {}) if checked else {}
    return {
        "session": session, "workspace": workspace, "started": time.time(), "agent": agent,
        "head": where.head_commit() if where is not None else None,
        "files": files,
        "begun": {rel: entry["deps"] for rel, entry in files.items()} if checked else None,
    }  # fmt: skip


def changes(record: dict[str, object]) -> list[Change]:
    """What got worse since the record's last check; the record now holds this check."""
    workspace = str(record["workspace"])
    files = record["files"]
    assert isinstance(files, dict)
    now = survey(workspace, files)
    found = [c for rel, entry in now.items() for c in _worse(rel, files.get(rel), entry)]
    record["files"] = now
    return found


def changed_since_start(record: dict[str, object], relpath: str) -> bool:
    """Whether the state file (or a file its units were read from) changed in the session."""
    from storyd.core.pipeline import signature

    begun = record.get("begun")
    if not isinstance(begun, dict):
        return False  # met mid-session: what it changed before is unknown
    deps = begun.get(relpath)
    if not isinstance(deps, list):
        return True  # it appeared during the session
    for dep in deps:
        if not (isinstance(dep, list) and len(dep) == 2 and isinstance(dep[0], str)):
            return True
        now = signature(dep[0])
        if (list(now) if now is not None else None) != dep[1]:
            return True
    return False


def state(record: dict[str, object]) -> str | None:
    """`working`, `stopped` (waiting for the user's next prompt), `waiting` (a
    notification: a permission, a question, input): from the record's last event; None
    for a record written before issue 34 (no event) or an event of no known state."""
    event = record.get("event")
    return STATES.get(event) if isinstance(event, str) else None


def mark(record: dict[str, object], event: str, *, on: list[object] | None = None,
         note: str | None = None) -> bool:  # fmt: skip
    """Set the record's last `event` (a key of STATES), `note` (what a notification
    said) and, when given, `on` ([state file, unit or None]): whether the record changed
    and must be written (else `touch` it). `at` moves only when the state changes."""
    import time

    if note is not None:
        note = " ".join(note.split())[:_NOTE_CHARS]
    changed = record.get("event") != event or record.get("note") != note
    if STATES.get(event) != state(record) or not isinstance(record.get("at"), float):
        record["at"] = time.time()
        changed = True
    record["event"], record["note"] = event, note
    old = record.get("on")
    if on is not None and on[1] is None and isinstance(old, list) and old[:1] == on[:1]:
        on = old  # the same state file: the unit named before stays
    if on is not None and old != on:
        record["on"] = on
        changed = True
    return changed


def touched(before: object, after: object, named: list[str]) -> str | None:
    """The state file a tool call touched: the first one it `named`, else the first
    whose files changed between the two checks (`before` empty: nothing checked yet,
    so no change is known)."""
    if named:
        return named[0]
    if not isinstance(before, dict) or not before or not isinstance(after, dict):
        return None
    return next((rel for rel, entry in after.items() if before.get(rel) is not entry), None)


def touch(session: str) -> None:
    """The record's mtime is now: a hook call that changed nothing else."""
    try:  # noqa: SIM105 (contextlib imports collections, functools...: ~1 ms a hook)
        os.utime(record_path(session), follow_symlinks=False)  # a link's own time, not its target's
    except OSError:
        pass


def keep(record: dict[str, object], changed: bool) -> None:
    """Write the record when it `changed`, else only touch it."""
    if changed:
        save(record)
    else:
        touch(str(record["session"]))
