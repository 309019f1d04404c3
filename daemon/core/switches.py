"""Process-wide switches and memory: their one owner, with `configure()` and `reset()`
(as structlog keeps `_CONFIG`).

The switches, set through `configure` (by the daemon's assembly, and by tests):

    fast_parse       a parser `jsonio.loads` tries first (the daemon's orjson,
                     storyd.server.fastjson.loads); None: the lean `_json` path only
    fast_dump        the renderer of the socket's JSON (server/protocol.py): the
                     daemon's orjson.dumps; None: jsonio.dumps_like_orjson, equal in
                     value (the early door's, before orjson is imported)
    git_batching     storytime dates story files from one git pass per workspace (the
                     daemon in git mode); off: two git calls per file, memoised
    max_state_bytes  locking: the largest state file read (the daemon's
                     `limits.max_state_bytes`; 8 MiB otherwise)

The memory a fresh process starts without, kept by the module named and emptied by
`reset` too:

    git_memo         storytime: git's answer per (story file's stat, repository stamp)
    git_primed       storytime: each workspace's batched pass
    git_pins         storytime: per thread, the repository stamp pinned for one pass
    fine_devices     pipeline: devices seen to keep sub-second timestamps (racy rule)
    warned_versions  api.client: daemon versions a mismatch warning was printed for
    fleet_claims     api.claims_fleet: the [fleet] read, remotes, the claims bucket
    disk_steps       api.reconcile.atomic: disk-changing system calls so far (the
                     test hook `kill-at-N`)
    registry         core.registry: the process's one registry of plugins, once built
    bd_memo          formats.beads_bd: bd's last answer per workspace, while the
                     database's files are unchanged (a rescan does not start bd again)

No other module of the package keeps mutable state at module level:
tests/test_switches.py scans for it, and says which exceptions it allows and why.
Stdlib only, and nothing but `_thread`: `storyd resume` imports this at start-up.
"""

from __future__ import annotations

from _thread import _local  # threading's own thread-local store, without its import

TYPE_CHECKING = False  # `typing` costs start-up time on the resume path (core/model.py)
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CONFIG", "DEFAULT_MAX_STATE_BYTES", "configure", "reset"]

# The largest state file any reader reads unless configured (limits.max_state_bytes):
# 5x the largest real one seen (a 1.56 MB Task Master tasks.json); parsing holds the
# interpreter for about 10 ms a MB, so this bounds what one read makes the others wait.
DEFAULT_MAX_STATE_BYTES = 8 * 1024 * 1024


class _Config:
    """The one object holding process-wide state; `reset` restores every field in place
    (modules bind CONFIG itself, never a field of it)."""

    __slots__ = (
        "bd_memo",
        "claims_conns",
        "disk_steps",
        "fast_dump",
        "fast_parse",
        "fine_devices",
        "fleet_claims",
        "git_batching",
        "git_memo",
        "git_pins",
        "git_primed",
        "max_state_bytes",
        "registry",
        "warned_versions",
    )

    def __init__(self) -> None:
        self.fast_parse: Callable[[bytes], object] | None = None
        self.fast_dump: Callable[[object], bytes] | None = None
        self.git_batching = False
        self.max_state_bytes = DEFAULT_MAX_STATE_BYTES
        self.git_memo: dict[tuple[object, ...], int | None] = {}
        # workspace -> (repo stamp, time the pass started, last commit times, dirty paths)
        self.git_primed: dict[
            str, tuple[tuple[object, ...], float, dict[str, int], frozenset[str]]
        ] = {}
        self.git_pins = _local()
        self.claims_conns = _local()  # per worker thread: (path, inode, claims connection)
        self.fleet_claims: object | None = None  # api.claims_fleet's _State: config, bucket
        self.fine_devices: set[int] = set()
        self.warned_versions: set[str] = set()
        self.disk_steps = 0
        self.registry: object | None = None  # a core.registry.Registry (no import here)
        # workspace -> (what the answer depends on, when it expires, the answer or failure)
        self.bd_memo: dict[str, tuple[tuple[object, ...], float, object]] = {}


CONFIG = _Config()
_UNSET: object = object()


def configure(
    *, fast_parse: object = _UNSET, fast_dump: object = _UNSET, git_batching: object = _UNSET,
    max_state_bytes: object = _UNSET,
) -> None:
    """Throw the switches given; the others keep their state."""
    if fast_parse is not _UNSET:
        CONFIG.fast_parse = _callable("fast_parse", fast_parse)  # type: ignore[assignment]
    if fast_dump is not _UNSET:
        CONFIG.fast_dump = _callable("fast_dump", fast_dump)  # type: ignore[assignment]
    if git_batching is not _UNSET:
        CONFIG.git_batching = bool(git_batching)
    if max_state_bytes is not _UNSET:
        if not isinstance(max_state_bytes, int) or max_state_bytes < 1:
            msg = "max_state_bytes must be a positive integer"
            raise TypeError(msg)
        CONFIG.max_state_bytes = max_state_bytes


def _callable(name: str, value: object) -> object:
    if value is not None and not callable(value):
        msg = f"{name} must be a callable or None"
        raise TypeError(msg)
    return value


def reset() -> None:
    """Back to a fresh process's state: every switch off, every memory empty."""
    _Config.__init__(CONFIG)
