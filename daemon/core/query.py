"""A resume query, parsed and validated once, whether it came from argv or the socket.

The CLI, the shell fast path (through the daemon's `resume-cli` op) and the socket's
`resume` op all build a Query here, so they accept and refuse exactly the same input.
"""

from __future__ import annotations

import os

from storyd.core.errors import UsageError
from storyd.core.flags import SWITCH, VALUE, parse
from storyd.core.ids import normalize_epic_id, normalize_story_id
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT
from storyd.core.storytime import MODES

__all__ = [
    "ABOUT", "FLAGS", "USAGE", "Output", "Query", "checked_workspace", "from_argv", "from_request",
]

USAGE = (
    "usage: --story-id <id> --epic-id <id> [--workspace <dir>] [--detail] [--direct]\n"
    "       --state-file <path> [--unit <id>] [--workspace <dir>] [--detail] [--direct]\n"
    "       options: --socket <path> --timeout <ms> --lock-timeout <s> --staleness git|mtime\n"
    "                --config <file>"
)
# `storyd resume --help` and the daemon's `resume-cli` op print this below the usage.
ABOUT = (
    "storyd resume: where to restart one unit, as the seed skill's one-line JSON envelope.\n"
    "It asks the daemon first (--timeout, 50 ms) and else reads the state file here, under\n"
    "its writers' lock; --direct skips the daemon. --detail adds the findings. --config\n"
    "names the configuration a direct read uses (a running daemon answers with its own).\n"
    "exit: 0 answered, 1 state file not found, 2 unit not in the state file, 64 usage,\n"
    "     65 state file not valid, 75 lock held past --lock-timeout, 70 internal error"
)
FLAGS = {
    "story-id": VALUE,
    "epic-id": VALUE,
    "workspace": VALUE,
    "state-file": VALUE,
    "unit": VALUE,
    "detail": SWITCH,
    "direct": SWITCH,
    "socket": VALUE,
    "timeout": VALUE,
    "lock-timeout": VALUE,
    "staleness": VALUE,
    "config": VALUE,
}


def _number(name: str, text: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        msg = f"invalid --{name} {text!r}: expected a number from {low:g} to {high:g}"
        raise UsageError(f"{msg}\n{USAGE}")
    return value


class Query:
    """Which unit to answer for, and how."""

    __slots__ = (
        "config",
        "detail",
        "direct",
        "epic",
        "lock_timeout",
        "socket",
        "staleness",
        "state_file",
        "story",
        "timeout",
        "unit",
        "workspace",
    )

    def __init__(
        self,
        workspace: str,
        *,
        epic: str | None = None,
        story: str | None = None,
        state_file: str | None = None,
        unit: str | None = None,
        detail: bool = False,
        direct: bool = False,
        socket: str | None = None,
        timeout: float = 0.05,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        staleness: str | None = None,
        config: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.epic = epic
        self.story = story
        self.state_file = state_file
        self.unit = unit
        self.detail = detail
        self.direct = direct
        self.socket = socket
        self.timeout = timeout
        self.lock_timeout = lock_timeout
        self.staleness = staleness
        self.config = config


def from_argv(argv: list[str], cwd: str) -> Query:
    """Parse `storyd resume` flags; relative paths are taken from `cwd`."""
    flags = parse(argv, FLAGS, USAGE, ABOUT)
    story = flags.get("story-id")
    epic = flags.get("epic-id")
    state_file = flags.get("state-file")
    if state_file is None:
        for name, value in (("story-id", story), ("epic-id", epic)):
            if value is None:
                raise UsageError(f"missing --{name}\n{USAGE}")
    elif story is not None or epic is not None:
        raise UsageError(f"--state-file replaces --story-id and --epic-id\n{USAGE}")
    for name, value in flags.items():
        if isinstance(value, str) and "\0" in value:
            raise UsageError(f"--{name} may not contain a NUL byte\n{USAGE}")
    if flags.get("unit") is not None and state_file is None:
        raise UsageError(f"--unit goes with --state-file\n{USAGE}")
    staleness = flags.get("staleness")
    if staleness is not None and staleness not in MODES:
        raise UsageError(f"invalid --staleness {staleness!r}: expected git or mtime\n{USAGE}")
    try:
        epic_id = None if epic is None else normalize_epic_id(str(epic))
        story_id = None if story is None else normalize_story_id(str(story))
    except UsageError as exc:
        raise UsageError(f"{exc.message}\n{USAGE}") from None
    workspace = os.path.join(cwd, str(flags.get("workspace", ".")))
    return Query(
        os.path.normpath(workspace),
        epic=epic_id,
        story=story_id,
        state_file=None if state_file is None else str(state_file),
        unit=None if flags.get("unit") is None else str(flags["unit"]),
        detail=bool(flags.get("detail")),
        direct=bool(flags.get("direct")),
        socket=None if flags.get("socket") is None else str(flags["socket"]),
        timeout=_number("timeout", str(flags.get("timeout", "50")), 1, 60000) / 1000,
        lock_timeout=_number("lock-timeout", str(flags.get("lock-timeout", "5")), 0, 3600),
        staleness=None if staleness is None else str(staleness),
        config=None if flags.get("config") is None else os.path.join(cwd, str(flags["config"])),
    )


def _text(request: dict[str, object], name: str, *, required: bool = False) -> str | None:
    value = request.get(name)
    if value is None:
        if required:
            raise UsageError(f"missing field {name!r}")
        return None
    if not isinstance(value, str):
        raise UsageError(f"field {name!r} must be a string, not {type(value).__name__}")
    if "\0" in value:
        raise UsageError(f"field {name!r} may not contain a NUL byte")
    return value


def checked_workspace(raw: object) -> str:
    """A request's `workspace` field as given, once it is a non-empty absolute path
    without a NUL byte (UsageError naming what is wrong)."""
    if not isinstance(raw, str) or not raw:
        raise UsageError("field 'workspace' must be a non-empty string")
    if "\0" in raw:
        raise UsageError("field 'workspace' may not contain a NUL byte")
    if not os.path.isabs(raw):
        raise UsageError(f"workspace {raw!r} must be an absolute path")
    return raw


def from_request(request: dict[str, object], workspace: str) -> Query:
    """A socket `resume` request (or the Python client's call) as a Query: the same
    fields, checks and id rules as `from_argv`; `workspace` is already canonical."""
    state_file = _text(request, "stateFile")
    unit = _text(request, "unit")
    if state_file is None:
        epic = normalize_epic_id(str(_text(request, "epic", required=True)))
        story = normalize_story_id(str(_text(request, "story", required=True)))
        if unit is not None:
            raise UsageError("field 'unit' goes with 'stateFile'")
        return Query(workspace, epic=epic, story=story, detail=True)
    if request.get("epic") is not None or request.get("story") is not None:
        raise UsageError("field 'stateFile' replaces 'epic' and 'story'")
    return Query(workspace, state_file=state_file, unit=unit, detail=True)


class Output:
    """What a `storyd resume` process prints and returns, from whichever path answered."""

    __slots__ = ("code", "stderr", "stdout")

    def __init__(self, code: int, stdout: bytes = b"", stderr: tuple[str, ...] = ()) -> None:
        self.code = code
        self.stdout = stdout
        self.stderr = stderr
