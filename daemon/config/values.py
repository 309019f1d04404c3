"""What the configuration holds: the keys, their defaults and ranges, the problems.

`Config`, `Limits` and `Notify` are the values `storyd serve` runs with; `LIMITS` is the
one table of every limit's type, default and range (the daemon's `Settings` take their
defaults from it). Reading the file is `loader.py`, checking it `checker.py`.
"""

from __future__ import annotations

from storyd.core.caps import DEFAULT_MAX_ANSWER_BYTES
from storyd.core.errors import SetupError
from storyd.core.storytime import DEFAULT_MODE, MODES
from storyd.core.switches import DEFAULT_MAX_STATE_BYTES

TYPE_CHECKING = False  # not typing's: importing typing costs `storyd resume` start-up
if TYPE_CHECKING:
    from storyd.config.claims import Claims
    from storyd.config.fleet import Fleet
    from storyd.config.history import History

__all__ = [
    "BLOCK_STOP_ON",
    "CONTEXT_CHARS",
    "DEFAULT_STALENESS",
    "HOOKS_KEYS",
    "HOOK_TIMEOUT",
    "LIMITS",
    "MAX_FILE_BYTES",
    "NOTIFY_KEYS",
    "RECONCILE_KEYS",
    "SEVERITIES",
    "SOCKET_PATH_MAX",
    "STALENESS_MODES",
    "TOP_KEYS",
    "Config",
    "ConfigError",
    "Hooks",
    "Limits",
    "Notify",
    "Problem",
]

DEFAULT_STALENESS = DEFAULT_MODE  # one spelling: storyd.core.storytime
STALENESS_MODES = MODES  # one spelling: storyd.core.storytime
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes, one of them the terminating NUL
MAX_FILE_BYTES = 1 << 20  # config.toml larger than this is refused, never read whole

# limits.<name>: (type, default, lowest, highest), both bounds inclusive.
LIMITS: dict[str, tuple[type, float, float, float]] = {
    "max_workspaces": (int, 64, 1, 4096),
    "max_line_bytes": (int, 65536, 1024, 64 * 1024 * 1024),
    "lock_timeout": (float, 5.0, 0.0, 600.0),
    "verify_interval": (float, 2.0, 0.1, 3600.0),
    "settle_ms": (int, 20, 0, 10_000),
    "max_subscribers": (int, 256, 1, 65_536),
    "subscriber_buffer": (int, 1024 * 1024, 4096, 1024 * 1024 * 1024),
    "connection_buffer": (int, 256 * 1024, 4096, 1024 * 1024 * 1024),
    "total_buffer": (int, 64 * 1024 * 1024, 65536, 16 * 1024 * 1024 * 1024),
    "idle_timeout": (float, 300.0, 0.1, 86_400.0),
    # seconds a workspace a query started watching may go unasked before it is
    # unwatched (0: never); configured and `storyd watch`ed ones never expire
    "auto_watch_idle": (float, 86400.0, 0.0, 365 * 86400.0),
    "git_lock_wait": (float, 5.0, 0.0, 3600.0),
    # the largest state file read (parsing one holds the interpreter for ~10 ms a MB,
    # every other client waiting) and the largest answer sent; docs/service.md says why
    "max_state_bytes": (int, DEFAULT_MAX_STATE_BYTES, 65536, 64 * 1024 * 1024),
    "max_answer_bytes": (int, DEFAULT_MAX_ANSWER_BYTES, 65536, 1024 * 1024 * 1024),
}
HOOK_TIMEOUT = (10.0, 0.1, 3600.0)  # notify.hook_timeout: default, lowest, highest
# The keys each table may hold (limits: LIMITS); the checker names any other as unknown.
TOP_KEYS = (
    "auto_watch",
    "claims",
    "detectors",
    "hooks",
    "fleet",
    "history",
    "limits",
    "notify",
    "reconcile",
    "socket",
    "staleness",
    "workspaces",
)
RECONCILE_KEYS = ("auto",)
HOOKS_KEYS = ("block_stop_on", "context_chars", "roots")
# [hooks] block_stop_on: the finding codes that make `storyd hook stop` block (state behind
# git); any repair code the registry holds may be named (checker.py asks it)
BLOCK_STOP_ON = ("unrecorded", "state-not-updated", "output-before-state-update")
# hooks.context_chars: default, lowest, highest (agents cut hook text at 10,000 characters)
CONTEXT_CHARS = (4000, 200, 10_000)
NOTIFY_KEYS = (
    "desktop",
    "hook",
    "hook_codes",
    "hook_severities",
    "hook_timeout",
    "hook_workspaces",
    "log",
)
SEVERITIES = ("info", "warning", "error")  # notify.hook_severities' values


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
    """[limits]: bounds on the daemon's resources; see LIMITS for defaults and ranges.

    Frozen (`__setattr__` raises, as model.Finding): the daemon's `Settings` hold one
    and a reload swaps it whole, so a reader never sees half of an old set and half of
    a new one. `replace` gives a copy with some values changed.
    """

    __slots__ = tuple(LIMITS)
    max_workspaces: int
    max_line_bytes: int
    lock_timeout: float
    verify_interval: float
    settle_ms: int
    max_subscribers: int
    subscriber_buffer: int
    connection_buffer: int
    total_buffer: int
    idle_timeout: float
    auto_watch_idle: float
    git_lock_wait: float
    max_state_bytes: int
    max_answer_bytes: int

    def __init__(self, **values: float) -> None:
        unknown = set(values) - set(LIMITS)
        if unknown:
            msg = f"unknown limits: {', '.join(sorted(unknown))}"
            raise TypeError(msg)
        for name, (kind, default, _, _) in LIMITS.items():
            object.__setattr__(self, name, kind(values.get(name, default)))

    def __setattr__(self, name: str, value: object) -> None:
        msg = "Limits is frozen; replace() gives a changed copy"
        raise AttributeError(msg)

    def __delattr__(self, name: str) -> None:
        msg = "Limits is frozen"
        raise AttributeError(msg)

    def replace(self, **changes: float) -> Limits:
        """A copy with `changes` (limit names) applied."""
        return Limits(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict[str, float]:
        """Every limit by name."""
        return {name: getattr(self, name) for name in LIMITS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Limits) and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().values()))

    def __repr__(self) -> str:
        return f"Limits({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"


class Notify:
    """[notify]: where drift events go besides subscribers."""

    __slots__ = NOTIFY_KEYS  # one list: the keys the file may hold are the fields

    def __init__(
        self,
        log: bool = True,
        desktop: bool = True,
        hook: list[str] | None = None,
        hook_timeout: float = HOOK_TIMEOUT[0],
        hook_workspaces: list[str] | None = None,
        hook_codes: list[str] | None = None,
        hook_severities: list[str] | None = None,
    ) -> None:
        self.log = log
        self.desktop = desktop
        self.hook = hook
        self.hook_timeout = hook_timeout
        # the hook's filters: an empty list lets every event through
        self.hook_workspaces = [] if hook_workspaces is None else hook_workspaces
        self.hook_codes = [] if hook_codes is None else hook_codes
        self.hook_severities = [] if hook_severities is None else hook_severities

    def as_dict(self) -> dict[str, object]:
        """Every key by name (hook is None when unset)."""
        return {
            "log": self.log,
            "desktop": self.desktop,
            "hook": None if self.hook is None else list(self.hook),
            "hook_timeout": self.hook_timeout,
            "hook_workspaces": list(self.hook_workspaces),
            "hook_codes": list(self.hook_codes),
            "hook_severities": list(self.hook_severities),
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Notify) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Notify({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"


class Hooks:
    """[hooks]: what the agents' hooks and `storyd mcp` do (docs/agents.md).

    block_stop_on   finding codes that make the Stop hook block
    roots           an optional restriction: folders under which hooks and MCP may read
                    a workspace (None: any folder the user owns; the configured
                    workspaces always)
    context_chars   the SessionStart context's budget in characters
    """

    __slots__ = ("block_stop_on", "context_chars", "roots")

    def __init__(
        self,
        block_stop_on: list[str] | None = None,
        roots: list[str] | None = None,
        context_chars: int = CONTEXT_CHARS[0],
    ) -> None:
        self.block_stop_on = list(BLOCK_STOP_ON) if block_stop_on is None else block_stop_on
        self.roots = roots
        self.context_chars = context_chars

    def as_dict(self) -> dict[str, object]:
        """Every key by name (roots is None when unset)."""
        return {
            "block_stop_on": list(self.block_stop_on),
            "roots": None if self.roots is None else list(self.roots),
            "context_chars": self.context_chars,
        }


class Config:
    """The effective configuration. `path` is the file it came from, None for defaults.

    socket       str | None   the socket path (None: storyd.core.paths.socket_path())
    staleness    str          "git" or "mtime"
    workspaces   list[str]    absolute, normalised, without duplicates, in file order
    auto_watch   bool         a query for an unwatched workspace starts watching it
    limits       Limits
    detectors    dict[str, dict[str, object]]  [detectors.<name>] tables as written
    notify       Notify
    reconcile_auto list[str]  [reconcile] auto: repair codes the daemon applies on its own
    hooks        Hooks        [hooks]: the agents' hooks and MCP server
    fleet        Fleet | None  [fleet] (daemon/config/fleet.py); None: publish nothing
    history      History | None  [history] (daemon/config/history.py); None: its defaults
    claims       Claims | None  [claims] (daemon/config/claims.py); None: its defaults
    """

    __slots__ = (
        "auto_watch",
        "claims",
        "detectors",
        "fleet",
        "history",
        "hooks",
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
        hooks: Hooks | None = None,
        fleet: Fleet | None = None,
        history: History | None = None,
        claims: Claims | None = None,
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
        self.hooks = Hooks() if hooks is None else hooks
        self.fleet = fleet
        self.history = history
        self.claims = claims

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
            "hooks": self.hooks.as_dict(),
            **({"fleet": self.fleet.as_dict()} if self.fleet is not None else {}),
            **({"history": self.history.as_dict()} if self.history is not None else {}),
            **({"claims": self.claims.as_dict()} if self.claims is not None else {}),
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Config(path={self.path!r}, {self.as_dict()!r})"


