"""What the early door answers while the daemon starts (server/door.py; issue 43).

`ping`, and a `resume` or a plain `resume-cli` read from the files now: the answers a
cache miss gives, through the same calls. The asked unit is read alone under the
writers' lock within the daemon's limits (answers.resume, as `storyd resume --direct`
reads it; the daemon's `limits.max_state_bytes` is set here first). A `resume` adds the
daemon's own detectors (answers.with_detectors; lazydetect builds them once, for both)
and the `regressed` findings the history database holds (answers.recorded_losses, as
`--detail` reads them: the recorder's marks are not loaded yet).
The bytes come from protocol.py, with the clock of the instance the daemon's event log
takes over, at generation 0: a client replaying events since it misses none.

Everything else is None, which the daemon answers once it serves. That covers a line
that does not parse, another op, a `--detail` or other-staleness `resume-cli`, and any
error: the daemon answers errors in its own words, and may hold a last good read.
The daemon takes over what the door answered (`hand_over`): it counts each answer as a
miss, auto-watches the workspace, and keeps the newest read of each state file as a
miss's read is kept, so a file torn since answers as the door did, never with an error
where the door gave an answer.
"""

from __future__ import annotations

import contextlib
import os
import threading

from storyd.api import answers
from storyd.core import jsonio, switches, target
from storyd.core.errors import StorydError
from storyd.core.pipeline import Options
from storyd.core.query import Output, checked_workspace, from_argv, from_request
from storyd.server.kept import KeepingSource
from storyd.server.protocol import direct_body, finish, id_suffix, output_frame, ping_body, reply

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.config.values import Limits
    from storyd.server.lazydetect import Detectors

__all__ = ["KEPT_FILES", "Answered", "EarlyAnswers"]

KEPT_FILES = 16  # state files whose reads the door keeps for the daemon; past it, it hands over


class Answered:
    """What the door answered from one state file, for the daemon to take over: how
    many answers, and the newest read's bytes, signature and start (server/kept.py)."""

    __slots__ = ("count", "data", "read_ns", "relpath", "sig", "workspace")

    def __init__(self, workspace: str, relpath: str, source: KeepingSource) -> None:
        self.workspace, self.relpath = workspace, relpath
        self.data, self.sig, self.read_ns = source.data, source.sig, source.read_ns
        self.count = 1


class EarlyAnswers:
    """The early door's `answer`: one request line to its reply, or None."""

    def __init__(self, limits: Limits, staleness: str, detectors: Detectors,
                 history: str | None = None) -> None:
        """`history`: the database the daemon will record into (None: [history] off),
        whose marks give the door's answers their `regressed` findings."""
        self.history = history
        self.instance = os.urandom(4).hex()
        self.clock = f"{self.instance}:0".encode()
        self.staleness = staleness
        self.options = Options(limits.lock_timeout, staleness, limits.max_answer_bytes)
        self.detectors = detectors
        self._kept: dict[tuple[str, str], Answered] = {}  # by workspace and state file
        self._take: Callable[[Answered], object] | None = None
        self._lock = threading.Lock()
        # the daemon's bound on a state file's size; the parser stays the lean one that
        # `storyd resume` uses until the daemon's assembly sets its own (fastjson.py)
        switches.configure(max_state_bytes=limits.max_state_bytes)

    def prepare(self) -> None:
        """Import what a first answer imports (storyd's own detectors, the registry of
        formats, the seed's format, a git child's runner, the next step), before the door
        opens: its first answer then waits for no module or lock the daemon's start-up
        holds (server/door.py; at 20 stories under those imports: 3-7 ms, where it was
        37-53). Third-party detector plugins stay for the first answer that runs the
        detectors (lazydetect.py): their import is theirs to make slow, and the socket
        must answer before it (tests/test_serve_start.py)."""
        import atexit  # noqa: F401 (children.py's guard: maybe on a detector's thread)

        import storyd.api.detection
        import storyd.core.causes
        import storyd.core.children
        import storyd.core.childwait
        import storyd.core.dists
        import storyd.core.formats.epic
        import storyd.core.nextstep
        import storyd.detectors.owner
        import storyd.detectors.runner  # noqa: F401
        from storyd.core import registry

        for entry in registry.get().entries(registry.DETECTORS, plugins=False):
            with contextlib.suppress(Exception):  # the build names one that fails
                entry.load()

    def hand_over(self, take: Callable[[Answered], object]) -> None:
        """The daemon serves: `take` gets what the door answered from each state file
        so far, and any answer given later (the door's last one; any thread). The
        daemon counts them, watches their workspaces and keeps their reads, so that a
        file torn since answers as the door did (Reads.keep_newer)."""
        with self._lock:
            self._take = take
            kept, self._kept = list(self._kept.values()), {}
        for answered in kept:
            take(answered)

    def __call__(self, line: bytes) -> tuple[bytes, bool] | None:
        """The reply to `line` and whether the connection ends with it; None: the
        daemon's to answer (so is a bug's exception: the door hands the line over)."""
        request = _request(line)
        if request is None:
            return None
        op = request.get("op")
        try:
            suffix = id_suffix(request)
            if op == "ping":
                return reply(ping_body(self.instance), self.clock, suffix), False
            if op == "resume":
                return self._resume(request, suffix)
            if op == "resume-cli":
                return self._resume_cli(request)
        except StorydError:  # the daemon's answer, in its words (a last good read, maybe)
            return None
        return None

    def _resume(self, request: dict[str, object], suffix: bytes) -> tuple[bytes, bool] | None:
        """A cache miss's answer: read now, with the detectors (a request is --detail)."""
        path = _workspace(request.get("workspace"))
        if path is None:
            return None
        query = from_request(request, path)
        read = self._read(path, target.for_query(path, query))
        if read is None:
            return None
        result, answered = read
        if query.detail:  # the history's findings before the detectors', as the daemon's
            if self.history is not None:  # progress lost while no daemon ran, told now
                result.findings += answers.recorded_losses(path, result.unit, self.history)
            result = answers.with_detectors(path, result, self.detectors.detect)
        body = finish(direct_body(result, None), self.clock, suffix)
        self._keep(answered)
        return body, False

    def _resume_cli(self, request: dict[str, object]) -> tuple[bytes, bool] | None:
        argv, cwd = request.get("argv"), request.get("cwd")
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)
                and isinstance(cwd, str) and os.path.isabs(cwd)):  # fmt: skip
            return None
        query = from_argv(list(argv), cwd)
        path = _workspace(query.workspace)
        if path is None or query.detail or (query.staleness or self.staleness) != self.staleness:
            return None
        read = self._read(path, target.for_query(path, query))
        if read is None:
            return None
        result, answered = read
        frame = output_frame(Output(0, result.line, tuple(result.warnings)))
        self._keep(answered)
        return frame, True

    def _read(self, path: str, where: target.Target) -> tuple[answers.Answer, Answered] | None:
        """The asked unit read now, and its read for the daemon to keep once the reply
        is made (`_keep`); None: a file past KEPT_FILES (the daemon reads it, and keeps
        what it reads). Git is asked about the asked unit's story file only, as in a
        daemon's miss: a first answer never waits for the whole repository's batch."""
        file = (path, where.relpath)
        with self._lock:
            if self._take is None and file not in self._kept and len(self._kept) >= KEPT_FILES:
                return None
        source = KeepingSource(path, self.options.lock_timeout, where.relpath)
        result = answers.resume(path, where, self.options, source, prime_batch=False)
        return result, Answered(path, where.relpath, source)

    def _keep(self, answered: Answered) -> None:
        """An answer the door is about to give, counted and kept for the daemon (a
        reply that failed to build is the daemon's miss alone: not counted here)."""
        file = (answered.workspace, answered.relpath)
        with self._lock:
            take = self._take
            if take is None:
                before = self._kept.get(file)
                if before is not None:
                    answered.count += before.count
                self._kept[file] = answered
        if take is not None:
            take(answered)


_WHITESPACE = " \t\n\r"


def _request(line: bytes) -> dict[str, object] | None:
    """The request line's object as the daemon reads it (orjson), by the C scanner that
    every read uses (orjson is not imported yet); None, for the daemon to read: not an
    object, not JSON, or what the two could read apart (a float, an integer beyond 64
    bits, a lone surrogate), in any value, one a repeated key drops included."""
    if not line.startswith(b"{"):
        return None
    try:
        text = line.decode("utf-8")
        value, end = _scan(text, 0)
    except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
        return None
    if text[end:].strip(_WHITESPACE) or type(value) is not dict:
        return None
    return value


class _ReadApart(ValueError):
    """A value orjson would read otherwise, or refuse: the line is the daemon's."""


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """Each object the scanner reads, from all its pairs (a repeated key's too)."""
    for key, value in pairs:
        if not (_alike(key) and _alike(value)):
            raise _ReadApart
    return dict(pairs)


_scan = jsonio.scanner_with(_pairs)


def _alike(value: object) -> bool:
    """Whether orjson reads this value as the C scanner did (an object was checked when
    it was made, by `_pairs`)."""
    if isinstance(value, str):
        return value.isascii() or not any("\ud800" <= c <= "\udfff" for c in value)
    if type(value) is int:  # orjson reads a larger one as a float
        return jsonio.ORJSON_INTS[0] <= value < jsonio.ORJSON_INTS[1]
    if type(value) is list:
        return all(_alike(item) for item in value)
    return value is None or value is True or value is False or type(value) is dict


def _workspace(raw: object) -> str | None:
    """The workspace as the daemon keys it (symlinks resolved), or None: not a folder
    (the daemon says why)."""
    path = os.path.realpath(checked_workspace(raw))
    return path if os.path.isdir(path) else None
