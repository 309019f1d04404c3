"""Where beads keeps its truth: `.beads/metadata.json`, read bounded, and the database it
names, contained in the workspace.

beads' `internal/configfile/configfile.go` (steveyegge/beads @ fbcee6c6, and its JSONL-era
versions) gives the fields read here: `database` (relative to `.beads/`: SQLite's
`beads.db` before v0.56), `backend` (`sqlite` or `dolt`; empty is Dolt since v0.56),
`jsonl_export` (the JSONL era's export name), `dolt_mode` (`embedded`, `server`,
`proxied-server`), `dolt_server_host` and `dolt_data_dir` (a Dolt folder elsewhere; by
default `.beads/dolt`). A path the file names that leads out of the workspace or into
git's folders is ignored, with a finding; so is a file that is not a small JSON object.

    store_of(source)   the Store: backend, the database found (or None), the Dolt
                       server host it names when not this machine, and `problems` (one
                       line each: the format's `metadata-unreadable` findings)
    newest(path)       the newest mtime at a database's path (Dolt's files below it)
"""

from __future__ import annotations

import os
import stat

from storyd.core.containment import Refused, resolve
from storyd.core.formats.base import Source
from storyd.core.jsonio import JSONError, loads
from storyd.core.regular import read_regular

__all__ = ["DEFAULTS", "META", "Store", "newest", "store_of"]

META = ".beads/metadata.json"
META_LIMIT = 64 * 1024  # beads writes a few hundred bytes
# where beads (v0.56+: Dolt; before, SQLite) keeps the truth the JSONL is exported from
DEFAULTS = (".beads/dolt", ".beads/beads.db", ".beads/issues.db")
_LOOPBACK = frozenset(("", "localhost", "127.0.0.1", "::1", "[::1]"))
_NAMES = 200  # at most this many names a folder are looked at
_DOLT_ROOTS = ("manifest", "v" * 32)  # where a Dolt write records its new root


class Store:
    """What `.beads/` says of beads' database (all paths workspace-relative)."""

    __slots__ = ("backend", "database", "export", "has_meta", "problems", "remote")

    def __init__(self) -> None:
        self.has_meta = False
        self.backend = ""  # metadata's `backend`, lower case ("" when not said)
        self.database: str | None = None  # the database found, or None
        self.remote: str | None = None  # a Dolt server host that is not this machine
        self.export: str | None = None  # `jsonl_export` (`.beads/beads.jsonl` before 2025-11-21)
        self.problems: list[str] = []  # what is wrong with the metadata, one line each


def store_of(source: Source) -> Store:
    """Read `.beads/metadata.json` (if any) and find the database it names, or a default."""
    store = Store()
    meta = _metadata(source, store)
    named: dict[str, str] = {}
    for key in ("dolt_data_dir", "database"):
        value = meta.get(key)
        if isinstance(value, str) and value.strip() and "\0" not in value:
            named[key] = os.path.normpath(os.path.join(".beads", value.strip()))
    # Dolt (the default since v0.56) ignores a relative `database` (configfile.go's
    # DatabasePath: `.beads/dolt`), which still says `beads.db` after a migration
    sqlite = store.backend == "sqlite"
    candidates = [named.get("dolt_data_dir"), named.get("database") if sqlite else None,
                  *DEFAULTS, named.get("database")]  # fmt: skip
    export = meta.get("jsonl_export")
    if isinstance(export, str) and export.endswith(".jsonl") and "/" not in export \
            and os.sep not in export and not export.startswith("."):
        store.export = f".beads/{export}"  # a name in .beads/, read under the link rule
    host = meta.get("dolt_server_host")
    if isinstance(host, str) and host.strip().lower() not in _LOOPBACK:
        store.remote = host.strip()[:100]  # bd would dial it: storyd does not ask bd
    for relpath in dict.fromkeys(c for c in candidates if c is not None):
        if _contained(source, relpath, store) and source.exists(relpath):
            store.database = relpath
            _note_files(source, relpath)
            break
    return store


def _metadata(source: Source, store: Store) -> dict[str, object]:
    """metadata.json's object; {} (with a finding when it is there but unreadable)."""
    path = source.path(META)
    if not os.path.lexists(path):
        source.seen.setdefault(META, None)
        return {}
    store.has_meta = True
    source.exists(META)  # its signature: the answer depends on it
    try:
        resolve(source.workspace, META)
        value = loads(read_regular(path, META_LIMIT))
    except Refused as exc:
        why = exc.message
    except (OSError, JSONError) as exc:
        why = f"{META}: {exc.strerror if isinstance(exc, OSError) else exc}"
    else:
        if isinstance(value, dict):
            backend = value.get("backend")
            store.backend = backend.lower() if isinstance(backend, str) else ""
            return value
        why = f"{META}: not a JSON object"
    message = f"{why}; beads' metadata is ignored (the default database paths are looked at)"
    store.problems.append(message[:300])
    return {}


def _contained(source: Source, relpath: str, store: Store) -> bool:
    """Whether a database path stays in the workspace and out of git's folders."""
    if relpath.startswith(("..", os.sep)):
        shown = relpath[:120]
        message = (f"{META} names a database outside the workspace ({shown}); it is "
                   "ignored: storyd reads only what is inside the workspace")
        if message not in store.problems:
            store.problems.append(message)
        return False
    try:
        resolve(source.workspace, relpath)
    except Refused as exc:
        message = f"{exc.message}; {META}'s database path is ignored"
        store.problems.append(message[:300])
        return False
    return True


def _note_files(source: Source, relpath: str) -> None:
    """Record the files a write to the database changes (the answer depends on them):
    Dolt's `noms/manifest` and its chunk journal (`noms/vvvv…`, dolthub/dolt's
    `chunkJournalAddr`: every root update is appended to it), or SQLite's file and WAL."""
    path = source.path(relpath)
    if not os.path.isdir(path):
        source.exists(relpath + "-wal")
        return
    try:
        names = sorted(n for n in os.listdir(path) if not n.startswith("."))[:_NAMES]
    except OSError:
        names = []
    for db in (relpath, *(f"{relpath}/{name}" for name in names)):
        for name in _DOLT_ROOTS:
            source.exists(f"{db}/.dolt/noms/{name}")


def newest(path: str, depth: int = 4) -> float:
    """The newest mtime at `path` or below it, `depth` folders down (Dolt's
    `<db>/.dolt/noms/` files), links not followed, at most 200 names a folder."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0.0
    found = st.st_mtime
    if depth and stat.S_ISDIR(st.st_mode):
        try:
            names = os.listdir(path)[:_NAMES]
        except OSError:
            return found
        for name in names:
            found = max(found, newest(os.path.join(path, name), depth - 1))
    return found
