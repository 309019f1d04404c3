"""The configuration file: $XDG_CONFIG_HOME/storyd/config.toml, read with tomllib.

Every key, its default and its range is in docs/service.md. A missing file means the
defaults. Any problem raises ConfigError (exit 78, EX_CONFIG) listing every problem
found, each as `PATH:LINE: FIELD: MESSAGE`, where FIELD is the dotted key
(`limits.max_workspaces`, `notify.hook[0]`) and LINE is where that key is written.

Nothing heavy is imported at module level: `storyd resume` may call `load_staleness()`,
which only stats the file when there is none. tomllib, re and difflib are imported
inside the functions that need them.
"""

from __future__ import annotations

import math
import os

from daemon.errors import SetupError
from daemon.paths import config_path

__all__ = [
    "DEFAULT_STALENESS",
    "LIMITS",
    "STALENESS_MODES",
    "Config",
    "ConfigError",
    "Limits",
    "Notify",
    "Problem",
    "load",
    "load_staleness",
    "locate",
]

DEFAULT_STALENESS = "git"
STALENESS_MODES = ("git", "mtime")
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes, one of them the terminating NUL

# limits.<name>: (type, default, lowest, highest), both bounds inclusive.
LIMITS: dict[str, tuple[type, float, float, float]] = {
    "max_workspaces": (int, 64, 1, 4096),
    "max_line_bytes": (int, 65536, 1024, 64 * 1024 * 1024),
    "lock_timeout": (float, 5.0, 0.0, 600.0),
    "verify_interval": (float, 2.0, 0.1, 3600.0),
    "settle_ms": (int, 20, 0, 10_000),
    "max_subscribers": (int, 256, 1, 65_536),
    "subscriber_buffer": (int, 1024 * 1024, 4096, 1024 * 1024 * 1024),
}
_HOOK_TIMEOUT = (10.0, 0.1, 3600.0)
_TOP_KEYS = (
    "auto_watch",
    "detectors",
    "limits",
    "notify",
    "reconcile",
    "socket",
    "staleness",
    "workspaces",
)
_RECONCILE_KEYS = ("auto",)
_NOTIFY_KEYS = ("desktop", "hook", "hook_timeout", "log")


class Problem:
    """One thing wrong with the file: the dotted field, its 1-based line (0: none), why."""

    __slots__ = ("field", "line", "message")

    def __init__(self, field: str, line: int, message: str) -> None:
        self.field = field
        self.line = line
        self.message = message

    def format(self, path: str) -> str:
        """`PATH:LINE: FIELD: MESSAGE` (no LINE when the problem has none)."""
        where = f"{path}:{self.line}" if self.line else path
        return f"{where}: {self.field}: {self.message}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Problem):
            return NotImplemented
        return (self.field, self.line, self.message) == (other.field, other.line, other.message)

    def __hash__(self) -> int:
        return hash((self.field, self.line, self.message))

    def __repr__(self) -> str:
        return f"Problem({self.field!r}, {self.line}, {self.message!r})"


class ConfigError(SetupError):
    """The configuration file has problems; `problems` lists every one."""

    def __init__(self, problems: list[Problem], path: str) -> None:
        super().__init__("\n".join(p.format(path) for p in problems))
        self.problems = problems
        self.path = path


class Limits:
    """[limits]: bounds on the daemon's resources; see LIMITS for defaults and ranges."""

    __slots__ = tuple(LIMITS)
    max_workspaces: int
    max_line_bytes: int
    lock_timeout: float
    verify_interval: float
    settle_ms: int
    max_subscribers: int
    subscriber_buffer: int

    def __init__(self, **values: float) -> None:
        unknown = set(values) - set(LIMITS)
        if unknown:
            msg = f"unknown limits: {', '.join(sorted(unknown))}"
            raise TypeError(msg)
        for name, (kind, default, _, _) in LIMITS.items():
            setattr(self, name, kind(values.get(name, default)))

    def as_dict(self) -> dict[str, float]:
        """Every limit by name."""
        return {name: getattr(self, name) for name in LIMITS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Limits) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Limits({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"


class Notify:
    """[notify]: where drift events go besides subscribers."""

    __slots__ = ("desktop", "hook", "hook_timeout", "log")

    def __init__(
        self,
        log: bool = True,
        desktop: bool = True,
        hook: list[str] | None = None,
        hook_timeout: float = _HOOK_TIMEOUT[0],
    ) -> None:
        self.log = log
        self.desktop = desktop
        self.hook = hook
        self.hook_timeout = hook_timeout

    def as_dict(self) -> dict[str, object]:
        """Every key by name (hook is None when unset)."""
        return {
            "log": self.log,
            "desktop": self.desktop,
            "hook": None if self.hook is None else list(self.hook),
            "hook_timeout": self.hook_timeout,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Notify) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Notify({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"


class Config:
    """The effective configuration. `path` is the file it came from, None for defaults.

    socket       str | None   the socket path (None: daemon.paths.socket_path())
    staleness    str          "git" or "mtime"
    workspaces   list[str]    absolute, normalised, without duplicates, in file order
    auto_watch   bool         a query for an unwatched workspace starts watching it
    limits       Limits
    detectors    dict[str, dict[str, object]]  [detectors.<name>] tables as written
    notify       Notify
    reconcile_auto list[str]  [reconcile] auto: repair codes the daemon applies on its own
    """

    __slots__ = (
        "auto_watch",
        "detectors",
        "limits",
        "notify",
        "path",
        "reconcile_auto",
        "socket",
        "staleness",
        "workspaces",
    )

    def __init__(
        self,
        *,
        socket: str | None = None,
        staleness: str = DEFAULT_STALENESS,
        workspaces: list[str] | None = None,
        auto_watch: bool = True,
        limits: Limits | None = None,
        detectors: dict[str, dict[str, object]] | None = None,
        notify: Notify | None = None,
        path: str | None = None,
        reconcile_auto: list[str] | None = None,
    ) -> None:
        self.socket = socket
        self.staleness = staleness
        self.workspaces = [] if workspaces is None else workspaces
        self.auto_watch = auto_watch
        self.limits = Limits() if limits is None else limits
        self.detectors = {} if detectors is None else detectors
        self.notify = Notify() if notify is None else notify
        self.path = path
        self.reconcile_auto = [] if reconcile_auto is None else reconcile_auto

    def detector_enabled(self, name: str, default: bool = True) -> bool:
        """[detectors.<name>] enabled, else `default`."""
        value = self.detectors.get(name, {}).get("enabled", default)
        return bool(value)

    def detector_options(self, name: str) -> dict[str, object]:
        """[detectors.<name>] without `enabled`: the detector's own options."""
        return {k: v for k, v in self.detectors.get(name, {}).items() if k != "enabled"}

    def as_dict(self) -> dict[str, object]:
        """The configuration as plain data (what `storyd config show` prints)."""
        return {
            "socket": self.socket,
            "staleness": self.staleness,
            "workspaces": list(self.workspaces),
            "auto_watch": self.auto_watch,
            "limits": self.limits.as_dict(),
            "detectors": {name: dict(table) for name, table in self.detectors.items()},
            "notify": self.notify.as_dict(),
            "reconcile": {"auto": list(self.reconcile_auto)},
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Config(path={self.path!r}, {self.as_dict()!r})"


# -- reading -------------------------------------------------------------------------------


def _read(path: str) -> tuple[dict[str, object], str] | None:
    """The parsed document and its text; None when there is no file; ConfigError if unusable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ConfigError([Problem("file", 0, f"cannot read: {exc.strerror}")], path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError([Problem("syntax", line, "not valid UTF-8")], path) from None
    import tomllib

    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message, line = _syntax_message(str(exc), text)
        raise ConfigError([Problem("syntax", line, message)], path) from None
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
    """The configuration in `path` (default: daemon.paths.config_path()).

    A missing file gives the defaults; any problem raises ConfigError listing all of them.
    """
    path = path or config_path()
    read = _read(path)
    if read is None:
        return Config()
    document, text = read
    checker = _Checker(text)
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
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return DEFAULT_STALENESS
    read = _read(path)
    if read is None:
        return DEFAULT_STALENESS
    document, text = read
    checker = _Checker(text)
    staleness = checker.staleness(document.get("staleness", DEFAULT_STALENESS))
    if checker.problems:
        raise ConfigError(checker.problems, path)
    return staleness


# -- checking ------------------------------------------------------------------------------


def locate(path: str, field: str) -> int:
    """The 1-based line where a dotted field (`limits.settle_ms`, `workspaces[2]`) is written.

    0 when the file cannot be read or the field is not in it. For `storyd config check`'s
    warnings about values that are valid but suspicious.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return 0
    checker = _Checker(text)
    key, bracket, index = field.partition("[")
    if not bracket:
        return checker.line(field)
    return checker.element_line(key, _nth(path, key, int(index.rstrip("]"))))


def _nth(path: str, key: str, index: int) -> object:
    import tomllib

    try:
        with open(path, "rb") as handle:
            value: object = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError):
        return None
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value[index] if isinstance(value, list) and 0 <= index < len(value) else None


def _kind(value: object) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    if type(value) in names:
        return names[type(value)]
    return {"datetime": "a date-time", "date": "a date", "time": "a time"}.get(
        type(value).__name__, type(value).__name__
    )


class _Checker:
    """Builds a Config from a parsed document, collecting every problem with its line."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.keys = _key_lines(self.lines)
        self.problems: list[Problem] = []

    # where -------------------------------------------------------------------------------

    def line(self, field: str) -> int:
        """The line of `field`, else of its nearest parent written in the file."""
        key = field.partition("[")[0]
        parts = key.split(".")
        while parts:
            found = self.keys.get(".".join(parts))
            if found:
                return found
            parts.pop()
        return 0

    def element_line(self, field: str, value: object) -> int:
        """The line of the index-th element of an array, when it is a string we can find."""
        start = self.line(field)
        if not start or isinstance(value, (list, dict)):
            return start
        import re

        if isinstance(value, str):
            pattern = re.compile("|".join(map(re.escape, (_toml_basic(value), f"'{value}'"))))
        else:
            token = str(value).lower() if isinstance(value, bool) else str(value)
            pattern = re.compile(rf"(?<![\w.+-]){re.escape(token)}(?![\w.])")
        stop = min((n for n in self.keys.values() if n > start), default=len(self.lines) + 1)
        for number in range(start, stop):
            text = self.lines[number - 1]
            if number == start:
                text = text.partition("=")[2]
            if pattern.search(text):
                return number
        return start

    def problem(self, field: str, message: str, line: int | None = None) -> None:
        """Record a problem at `field`'s line (or the line given)."""
        self.problems.append(Problem(field, self.line(field) if line is None else line, message))

    # values ------------------------------------------------------------------------------

    def unknown(self, table: dict[str, object], known: tuple[str, ...], prefix: str) -> None:
        import difflib

        for key in table:
            if key in known:
                continue
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
            self.problem(prefix + key, f"unknown key {key!r}{hint}")

    def boolean(self, field: str, value: object, default: bool) -> bool:
        if isinstance(value, bool):
            return value
        self.problem(field, f"expected true or false, got {_kind(value)}")
        return default

    def number(self, field: str, value: object, spec: tuple[type, float, float, float]) -> float:
        kind, default, low, high = spec
        wanted = "an integer" if kind is int else "a number"
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (kind is int and isinstance(value, float))
        ):
            self.problem(field, f"expected {wanted}, got {_kind(value)}")
            return default
        if isinstance(value, float) and not math.isfinite(value):
            self.problem(field, f"expected a finite number, got {value}")
            return default
        if not low <= value <= high:
            self.problem(field, f"{value:g} is out of range: expected {low:g} to {high:g}")
            return default
        return kind(value)  # type: ignore[no-any-return]

    def table(self, field: str, value: object) -> dict[str, object]:
        if isinstance(value, dict):
            return value
        self.problem(field, f"expected a table, got {_kind(value)}")
        return {}

    def staleness(self, value: object) -> str:
        if isinstance(value, str) and value in STALENESS_MODES:
            return value
        shown = repr(value) if isinstance(value, str) else _kind(value)
        modes = " or ".join(map(repr, STALENESS_MODES))
        self.problem("staleness", f"expected {modes}, got {shown}")
        return DEFAULT_STALENESS

    def socket(self, value: object) -> str | None:
        if not isinstance(value, str) or not value:
            got = "an empty string" if value == "" else _kind(value)
            self.problem("socket", f"expected an absolute path, got {got}")
            return None
        path = os.path.expanduser(value)
        if not os.path.isabs(path):
            self.problem("socket", f"{value!r} is not an absolute path (~ is allowed)")
            return None
        size = len(os.fsencode(path))
        if size > SOCKET_PATH_MAX:
            self.problem(
                "socket", f"{size} bytes is too long for a socket path (at most {SOCKET_PATH_MAX})"
            )
            return None
        return os.path.normpath(path)

    def workspaces(self, value: object) -> list[str]:
        if not isinstance(value, list):
            self.problem("workspaces", f"expected an array of paths, got {_kind(value)}")
            return []
        home = os.path.expanduser("~")
        found: list[str] = []
        for index, item in enumerate(value):
            field = f"workspaces[{index}]"
            if not isinstance(item, str) or not item:
                got = "an empty string" if item == "" else _kind(item)
                self.problem(
                    field, f"expected a path, got {got}", self.element_line("workspaces", item)
                )
                continue
            path = os.path.normpath(os.path.join(home, os.path.expanduser(item)))
            if path not in found:
                found.append(path)
        return found

    def hook(self, value: object) -> list[str] | None:
        field = "notify.hook"
        if not isinstance(value, list) or not value:
            got = "an empty array" if value == [] else _kind(value)
            self.problem(field, f"expected a non-empty array (program, then arguments), got {got}")
            return None
        ok = True
        for index, item in enumerate(value):
            if not isinstance(item, str) or (index == 0 and not item):
                got = "an empty string" if item == "" else _kind(item)
                self.problem(
                    f"{field}[{index}]",
                    f"expected a string, got {got}",
                    self.element_line(field, item),
                )
                ok = False
        if not ok:
            return None
        return [os.path.expanduser(value[0]), *value[1:]]

    # the document ------------------------------------------------------------------------

    def config(self, document: dict[str, object]) -> Config:
        self.unknown(document, _TOP_KEYS, "")
        config = Config()
        if "socket" in document:
            config.socket = self.socket(document["socket"])
        if "staleness" in document:
            config.staleness = self.staleness(document["staleness"])
        if "workspaces" in document:
            config.workspaces = self.workspaces(document["workspaces"])
        if "auto_watch" in document:
            config.auto_watch = self.boolean("auto_watch", document["auto_watch"], True)
        if "limits" in document:
            config.limits = self.limits(self.table("limits", document["limits"]))
        if "detectors" in document:
            config.detectors = self.detectors(self.table("detectors", document["detectors"]))
        if "notify" in document:
            config.notify = self.notify(self.table("notify", document["notify"]))
        if "reconcile" in document:
            config.reconcile_auto = self.reconcile(self.table("reconcile", document["reconcile"]))
        cap = config.limits.max_workspaces
        if len(config.workspaces) > cap:
            self.problem(
                "workspaces",
                f"{len(config.workspaces)} listed, more than limits.max_workspaces ({cap})",
            )
        return config

    def limits(self, table: dict[str, object]) -> Limits:
        self.unknown(table, tuple(LIMITS), "limits.")
        values = {}
        for name, spec in LIMITS.items():
            if name in table:
                values[name] = self.number(f"limits.{name}", table[name], spec)
        return Limits(**values)

    def detectors(self, table: dict[str, object]) -> dict[str, dict[str, object]]:
        found = {}
        for name, value in table.items():
            options = self.table(f"detectors.{name}", value)
            if "enabled" in options and not isinstance(options["enabled"], bool):
                self.problem(
                    f"detectors.{name}.enabled",
                    f"expected true or false, got {_kind(options['enabled'])}",
                )
                options = {k: v for k, v in options.items() if k != "enabled"}
            found[name] = options
        return found

    def notify(self, table: dict[str, object]) -> Notify:
        self.unknown(table, _NOTIFY_KEYS, "notify.")
        notify = Notify()
        if "log" in table:
            notify.log = self.boolean("notify.log", table["log"], True)
        if "desktop" in table:
            notify.desktop = self.boolean("notify.desktop", table["desktop"], True)
        if "hook" in table:
            notify.hook = self.hook(table["hook"])
        if "hook_timeout" in table:
            notify.hook_timeout = self.number(
                "notify.hook_timeout", table["hook_timeout"], (float, *_HOOK_TIMEOUT)
            )
        return notify


    def reconcile(self, table: dict[str, object]) -> list[str]:
        """[reconcile] auto: a list of repair codes (see docs/reconcile.md)."""
        from daemon.reconcile.repairs import repair_codes

        self.unknown(table, _RECONCILE_KEYS, "reconcile.")
        value = table.get("auto", [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem("reconcile.auto", f"expected an array of strings, got {_kind(value)}")
            return []
        known = repair_codes()
        for code in value:
            if code not in known:
                names = ", ".join(known)
                self.problem("reconcile.auto", f"unknown repair code {code!r} (known: {names})")
        return [code for code in dict.fromkeys(value) if code in known]


def _toml_basic(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _key_lines(lines: list[str]) -> dict[str, int]:
    """Each dotted key and table header in the text, with the 1-based line it is first on.

    A line scanner, not a parser: the file has already parsed, so it only has to follow
    table headers, `key = value` lines (keys bare, quoted or dotted) and skip the inside
    of multi-line strings. Keys inside inline tables resolve to the inline table's line.
    """
    import re

    key = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
    dotted = rf"{key}(?:\s*\.\s*{key})*"
    header = re.compile(rf"\[\[?\s*({dotted})\s*\]\]?")
    keyval = re.compile(rf"({dotted})\s*=")
    part = re.compile(key)

    def join(text: str) -> str:
        names = []
        for match in part.finditer(text):
            name = match.group(0)
            names.append(name[1:-1] if name[0] in "\"'" else name)
        return ".".join(names)

    found: dict[str, int] = {}
    table = ""
    closing = ""
    for number, raw in enumerate(lines, 1):
        if closing:
            if closing in raw:
                closing = ""
            continue
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        match = header.match(text)
        if match:
            table = join(match.group(1))
            found.setdefault(table, number)
            continue
        match = keyval.match(text)
        if not match:
            continue
        name = join(match.group(1))
        found.setdefault(f"{table}.{name}" if table else name, number)
        rest = text[match.end() :]
        for quotes in ('"""', "'''"):
            if rest.count(quotes) % 2 == 1:
                closing = quotes
    return found
