"""config.toml as tomllib parsed it, kept between processes: a hook needs no tomllib.

    $XDG_CACHE_HOME/storyd/config/<sha256(path)[:32]>.<cache tag>.marshal   (0600, folder 0700)

holds, in marshal's format, the SHA-256 of the file's bytes and the document tomllib made
of them. `load` answers the document only for those very bytes (any edit, however small
and whenever made, changes the digest: no timestamps are trusted), from a regular file of
the user's own; anything else (no cache, another file's, a broken or foreign one) is
None and the caller parses. `save` writes it whole through a temporary file; a document
marshal cannot hold exactly (a TOML date or time) is not kept, nor is anything when the
cache folder cannot be written. marshal's format may change between Python versions and
is not meant for data from others (docs.python.org/3/library/marshal.html): the file
is named by the interpreter's cache tag (`cpython-311`, as __pycache__'s files are) and
read only when it is the user's own. The checker runs on the document either way: the cache
saves tomllib's import and parse (3-5 ms of a hook's start), never a check.
"""

from __future__ import annotations

import os

__all__ = ["MAX_FILES", "cache_file", "load", "save"]

MAX_FILES = 32  # configuration files kept (one per path: --config names others)
_MAX_BYTES = 4 << 20  # a cache larger than this is not ours


def _digest(data: bytes) -> str:
    from storyd.core.digest import sha256_hex

    return sha256_hex(data)


def cache_file(path: str) -> str:
    """Where the parsed `path` is kept ($XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    import sys

    name = _digest(os.path.abspath(path).encode("utf-8", "surrogateescape"))[:32]
    tag = sys.implementation.cache_tag or "python"
    return os.path.join(base, "storyd", "config", f"{name}.{tag}.marshal")


def load(path: str, data: bytes) -> dict[str, object] | None:
    """The document tomllib made of exactly `data` (the file at `path`), or None."""
    import marshal

    try:
        # O_NONBLOCK: a FIFO put there opens at once (and is refused below), never waited on
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(cache_file(path), flags)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_size > _MAX_BYTES or not _regular(st.st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            kept = marshal.loads(handle.read(_MAX_BYTES + 1))  # grown since: marshal refuses
    except (OSError, ValueError, EOFError, TypeError):
        return None
    finally:
        os.close(fd)
    if not (isinstance(kept, tuple) and len(kept) == 2 and isinstance(kept[1], dict)):
        return None
    return kept[1] if kept[0] == _digest(data) else None


def save(path: str, data: bytes, document: dict[str, object]) -> None:
    """Keep `document` (tomllib's parse of `data`) for the next process; never raises."""
    import marshal

    try:
        blob = marshal.dumps((_digest(data), document))
    except ValueError:
        return  # a date or time: marshal cannot hold it, the next process parses
    if marshal.loads(blob) != (_digest(data), document):
        return  # not held exactly (NaN is never equal): parse every time instead
    target = cache_file(path)
    folder = os.path.dirname(target)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        try:  # noqa: SIM105 (contextlib's import)
            os.unlink(tmp)  # a crashed process's (of this pid), or a FIFO put there
        except OSError:
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        os.replace(tmp, target)
    except OSError:
        try:  # noqa: SIM105 (contextlib's import, collections and functools: 2.7 ms)
            os.unlink(tmp)
        except OSError:
            pass
        return
    _prune(folder)


def _prune(folder: str) -> None:
    """At most MAX_FILES configurations kept: the least recently written go."""
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".marshal")]
        if len(names) <= MAX_FILES:
            return
        paths = [os.path.join(folder, n) for n in names]
        paths.sort(key=lambda p: os.stat(p).st_mtime_ns)
        for old in paths[: len(paths) - MAX_FILES]:
            os.unlink(old)
    except OSError:
        pass  # another process pruned it first


def _regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)
