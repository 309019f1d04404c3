"""The one code path that turns a state file into answers.

The CLI's direct read, the daemon's refresh and the daemon's cache-miss read all come
through here, so the socket and the fallback cannot disagree.
"""

from __future__ import annotations

import os

from daemon import envelope, storytime
from daemon.errors import DataError, StorydError, StoryNotInState, UsageError
from daemon.formats import builtin, detect
from daemon.formats.base import Adapter, Source
from daemon.locking import DEFAULT_LOCK_TIMEOUT
from daemon.model import DONE, Finding, Unit
from daemon.query import Output, Query

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/model.py
if TYPE_CHECKING:
    from daemon.server.engine import Detect
    from daemon.wire import Envelope

__all__ = [
    "Answer",
    "Options",
    "answer",
    "detail_line",
    "resolve_state_file",
    "resume_epic",
    "resume_unit",
    "run",
    "with_detectors",
]


class Options:
    """How to read: the lock bound and the staleness mode (`git` or `mtime`)."""

    __slots__ = ("lock_timeout", "staleness")

    def __init__(
        self, lock_timeout: float = DEFAULT_LOCK_TIMEOUT, staleness: str = storytime.DEFAULT_MODE
    ) -> None:
        if staleness not in storytime.MODES:
            modes = ", ".join(storytime.MODES)
            msg = f"invalid staleness mode {staleness!r}: expected one of {modes}"
            raise UsageError(msg)
        self.lock_timeout = lock_timeout
        self.staleness = staleness


class Answer:
    """One unit's answer: the envelope, its rendered line, stderr warnings and findings."""

    __slots__ = ("envelope", "findings", "line", "unit", "warnings")

    def __init__(self, unit: Unit, env: Envelope, findings: tuple[Finding, ...]) -> None:
        self.unit = unit
        self.envelope = env
        self.line = envelope.render(env)
        self.warnings = envelope.status_warnings(unit)
        self.findings = findings


def answer(workspace: str, unit: Unit, options: Options) -> Answer:
    """Compute one unit's envelope: the seed's Steps 3-6 (staleness included)."""
    if unit.error:
        raise DataError(unit.error)
    done = [t for t in unit.tasks if t.bucket == DONE]
    mtime = None
    commit_time = None
    if unit.story_file and done:
        mtime = storytime.mtime_seconds(os.path.join(workspace, unit.story_file))
        if options.staleness == storytime.GIT:
            story_file = unit.story_file

            def commit_time() -> int | None:
                return storytime.git_commit_time(workspace, story_file)

    stale = envelope.stale_warnings(done, mtime, commit_time)
    return Answer(unit, envelope.build(unit, stale), unit.findings)


def read_units(workspace: str, adapter: Adapter, relpath: str, options: Options) -> list[Unit]:
    """Every unit of one state file, read under the writers' lock."""
    return adapter.load(Source(workspace, options.lock_timeout), relpath)


def _pick(units: list[Unit], key: str | None, relpath: str, missing: str) -> Unit:
    if key is None:
        if len(units) == 1:
            return units[0]
        names = ", ".join(u.key for u in units[:10]) or "none"
        msg = f"{relpath} holds {len(units)} units ({names}); name one with --unit"
        raise UsageError(msg)
    for unit in units:
        if unit.key == key:
            return unit
    raise StoryNotInState(missing)


def resume_epic(workspace: str, epic_id: str, story_id: str, options: Options) -> Answer:
    """The seed skill: `--epic-id` and `--story-id` (both already normalised)."""
    from daemon.formats.epic import epic_state_file

    adapter = builtin("epic")
    relpath = epic_state_file(workspace, epic_id)
    units = read_units(workspace, adapter, relpath, options)
    unit = _pick(units, story_id, relpath, "Story not in execution-state.json")
    return answer(workspace, unit, options)


def resolve_state_file(workspace: str, state_file: str) -> str:
    """A state file given as a path, made workspace-relative; it may not leave the workspace."""
    base = os.path.realpath(workspace)
    full = os.path.realpath(os.path.join(base, state_file))
    if full != base and not full.startswith(base + os.sep):
        msg = f"{state_file}: outside the workspace {workspace}"
        raise UsageError(msg)
    return os.path.relpath(full, base).replace(os.sep, "/")


def resume_unit(workspace: str, state_file: str, key: str | None, options: Options) -> Answer:
    """Any format: a state file (auto-detected by path) and optionally a unit in it."""
    relpath = resolve_state_file(workspace, state_file)
    adapter = detect(relpath)
    units = read_units(workspace, adapter, relpath, options)
    unit = _pick(units, key, relpath, f"unit {key!r} not in {relpath}")
    return answer(workspace, unit, options)


def detail_line(env: Envelope, findings: tuple[Finding, ...], source: str) -> bytes:
    """`--detail` output: the envelope with its findings and which path answered."""
    from daemon.jsonio import dumps

    body = {"envelope": env, "findings": [f.as_dict() for f in findings], "source": source}
    return dumps(body) + b"\n"


def with_detectors(workspace: str, result: Answer, detect: Detect | None) -> Answer:
    """The answer with the detectors' findings added (the daemon's engine does the same)."""
    if detect is not None and result.unit.error is None:
        result.findings = result.findings + tuple(detect(workspace, result.unit, result))
    return result


def run(
    query: Query, default_staleness: str = storytime.DEFAULT_MODE, detect: Detect | None = None
) -> Output:
    """Answer a parsed query by reading the files directly; never raises.

    `detect` adds the detectors' findings to `--detail` output (it loads GitPython, so
    the CLI passes it only for `--detail`).
    """
    try:
        options = Options(query.lock_timeout, query.staleness or default_staleness)
        if query.state_file is not None:
            result = resume_unit(query.workspace, query.state_file, query.unit, options)
        else:
            result = resume_epic(query.workspace, query.epic, query.story, options)  # type: ignore[arg-type]
        if query.detail:
            result = with_detectors(query.workspace, result, detect)
    except StorydError as exc:
        return Output(exc.code, b"", (exc.message,))
    except Exception as exc:  # a bug must still give a clean exit 70, never a traceback
        return Output(70, b"", (f"internal error: {type(exc).__name__}: {exc}",))
    line = detail_line(result.envelope, result.findings, "direct") if query.detail else result.line
    return Output(0, line, tuple(result.warnings))
