"""Reading config.toml: tomllib's parse (or an earlier process's, config/parsed.py), then
the checker; the cheap staleness read.

A missing file means the defaults. Any problem raises ConfigError (exit 78) listing
every problem found; so does a file that is not a regular one (a FIFO, a link to a
device: refused at once, storyd.core.regular) or is larger than MAX_FILE_BYTES.
`load_staleness()` is on `storyd resume`'s path: it only stats the file when there is
none, and tomllib is imported only when there is one. `load_claims()` reads only the
[claims] table (a claim's default lease). `history_database()` says where the daemon
records history, for the commands that read it without the daemon.
"""

from __future__ import annotations

from storyd.config.checker import Checker
from storyd.config.values import DEFAULT_STALENESS, MAX_FILE_BYTES, Config, ConfigError, Problem
from storyd.core.paths import config_path
from storyd.core.regular import read_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.config.claims import Claims

__all__ = ["history_database", "load", "load_claims", "load_staleness", "load_state_cap"]


def _read(path: str) -> tuple[dict[str, object], str] | None:
    """The parsed document and its text; None when there is no file; ConfigError if unusable."""
    try:
        data = read_regular(path, MAX_FILE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ConfigError([Problem("file", 0, f"cannot read: {exc.strerror}")], path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError([Problem("syntax", line, "not valid UTF-8")], path) from None
    from storyd.config.parsed import load as parsed_before
    from storyd.config.parsed import save as keep_parsed

    document = parsed_before(path, data)  # these very bytes, parsed by an earlier process
    if document is None:
        import tomllib

        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            message, line = _syntax_message(str(exc), text)
            raise ConfigError([Problem("syntax", line, message)], path) from None
        keep_parsed(path, data, document)
    return document, text


def _syntax_message(text: str, source: str) -> tuple[str, int]:
    """tomllib's "Reason (at line L, column C)" as ("Reason at column C", L)."""
    reason, _, where = text.rpartition(" (at ")
    if not reason or not where.endswith(")"):
        return text, 0
    where = where[:-1]
    if where == "end of document":
        return f"{reason} at the end of the file", max(1, source.count("\n") + 1)
    line_part, _, column_part = where.partition(", ")
    number = line_part.removeprefix("line ")
    if not number.isdigit():
        return text, 0
    return f"{reason} at {column_part}" if column_part else reason, int(number)


def load(path: str | None = None) -> Config:
    """The configuration in `path` (default: storyd.core.paths.config_path()).

    A missing file gives the defaults; any problem raises ConfigError listing all of them.
    """
    path = path or config_path()
    read = _read(path)
    if read is None:
        return Config()
    document, text = read
    checker = Checker(text)
    config = checker.config(document)
    if checker.problems:
        raise ConfigError(sorted(checker.problems, key=lambda p: p.line), path)
    config.path = path
    return config


def load_staleness(path: str | None = None) -> str:
    """The staleness mode, cheaply: "git" when there is no file, without importing tomllib.

    Only problems that affect `staleness` itself (an unreadable file, a syntax error, a
    bad value) raise ConfigError; `storyd config check` reports the rest.
    """
    path = path or config_path()
    read = _read(path)  # None: no file
    if read is None:
        return DEFAULT_STALENESS
    document, text = read
    checker = Checker(text)
    staleness = checker.staleness(document.get("staleness", DEFAULT_STALENESS))
    if checker.problems:
        raise ConfigError(checker.problems, path)
    return staleness


def load_state_cap(path: str | None = None) -> int | None:
    """`limits.max_state_bytes` as written (None: no file, no such key, or a problem with
    it, which `storyd config check` reports): the direct read's cap, as the daemon's."""
    from storyd.config.values import LIMITS

    try:
        read = _read(path or config_path())
    except ConfigError:
        return None
    table = read[0].get("limits") if read is not None else None
    if not isinstance(table, dict) or "max_state_bytes" not in table:
        return None
    checker = Checker(read[1])  # type: ignore[index]
    cap = checker.number("limits.max_state_bytes", table["max_state_bytes"],
                         LIMITS["max_state_bytes"])  # fmt: skip
    return None if checker.problems else int(cap)


def load_claims(path: str | None = None) -> Claims | None:
    """The [claims] table, cheaply (a claim's default lease, per request in the daemon):
    None when there is no file or no table; only the table's own problems (and an
    unreadable file, a syntax error) raise ConfigError, `storyd config check` reports
    the rest."""
    path = path or config_path()
    read = _read(path)  # None: no file
    if read is None or "claims" not in read[0]:
        return None
    document, text = read
    from storyd.config.claims import check

    checker = Checker(text)
    table = check(checker, checker.table("claims", document["claims"]))
    if checker.problems:
        raise ConfigError(checker.problems, path)
    return table


def history_database(path: str | None = None) -> str | None:
    """The history database a daemon on this configuration records into: [history]
    path, else $STORYD_HISTORY, else the state folder's (storyd.core.paths); None when
    [history] is off. A file that cannot be read, or a [history] table with a problem,
    gives the default: a daemon refuses to start on it, and `storyd config check` says
    why. tomllib is imported only when the file exists."""
    import os

    from storyd.core.paths import history_path

    path = path or config_path()
    if not os.path.exists(path):
        return history_path()
    try:
        read = _read(path)
        if read is None or "history" not in read[0]:
            return history_path()
        document, text = read
        from storyd.config.history import check, database_of

        checker = Checker(text)
        table = check(checker, checker.table("history", document["history"]))
    except ConfigError:
        return history_path()
    return history_path() if checker.problems else database_of(table)
