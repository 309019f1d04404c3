"""Answer a resume query by reading the files now: `storyd resume --direct`.

The reading itself is daemon/core/pipeline.py, which the daemon's refresh and its cache-miss
reads use too, so the socket and the fallback cannot disagree. `direct` is the whole
direct answer (configured staleness, detectors for --detail) that the CLI's fallback and
the Python client's share.
"""

from __future__ import annotations

import os

from storyd.core import storytime, target
from storyd.core.errors import StorydError
from storyd.core.model import Finding, Unit
from storyd.core.pipeline import Answer, Options, answer, read_one, read_units
from storyd.core.query import Output, Query

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from storyd.core.formats.base import Source
    from storyd.core.model import Unit
    from storyd.core.pipeline import Detect
    from storyd.core.wire import Envelope

__all__ = [
    "Answer",
    "Options",
    "answer",
    "detail_line",
    "direct",
    "read_units",
    "recorded_losses",
    "resume",
    "resume_epic",
    "resume_unit",
    "run",
    "with_detectors",
]


def resume_epic(workspace: str, epic_id: str, story_id: str, options: Options) -> Answer:
    """The seed skill: `--epic-id` and `--story-id` (both already normalised)."""
    return resume(workspace, target.for_epic(workspace, epic_id, story_id), options)


def resume_unit(workspace: str, state_file: str, key: str | None, options: Options) -> Answer:
    """Any format: a state file (auto-detected by path) and optionally a unit in it."""
    return resume(workspace, target.for_state_file(workspace, state_file, key), options)


def resume(workspace: str, where: target.Target, options: Options,
           source: Source | None = None, *, prime_batch: bool = True) -> Answer:
    """The answer for a target, read now under the writers' lock: only the asked unit
    is built (pipeline.read_one). `source`: what to read through (the early door keeps
    the bytes it read: server/kept.py). `prime_batch=False`: a daemon's one answer, which
    asks git about this story file only (pipeline.answer)."""
    read = read_one(workspace, where.adapter, where.relpath, where.key, options, source)
    if read.error is not None:
        raise read.error
    return answer(workspace, where.pick(read.units or []), options, prime_batch=prime_batch)


def detail_line(
    env: Envelope, findings: tuple[Finding, ...], source: str, unit: Unit | None = None,
    workspace: str | None = None,
) -> bytes:
    """`--detail` output: the envelope with its findings, the unit's next task and why
    (storyd.core.nextstep; null when nothing is left), which path answered, and with
    `workspace` the unit's `claim` and its `claim-lost` findings (storyd.api.claimview)."""
    from storyd.core.jsonio import dumps
    from storyd.core.nextstep import next_of

    body: dict[str, object] = {
        "envelope": env,
        "findings": [f.as_dict() for f in findings],
        "next": None if unit is None else next_of(unit),
        "source": source,
    }
    if workspace is not None and unit is not None:
        from storyd.api.claimview import attach

        shown: dict[str, object] = {"workspace": os.path.realpath(workspace),
                                    "stateFile": unit.state_file, "unit": unit.key,
                                    "findingList": body["findings"]}  # fmt: skip
        attach([shown])
        body["findings"] = shown["findingList"]
        if "claim" in shown:
            body["claim"] = shown["claim"]
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

    `detect` adds the detectors' findings to `--detail` output (it loads the detectors,
    so the CLI passes it only for `--detail`).
    """
    try:
        options = Options(query.lock_timeout, query.staleness or default_staleness)
        if query.state_file is not None:
            result = resume_unit(query.workspace, query.state_file, query.unit, options)
        else:
            result = resume_epic(query.workspace, query.epic, query.story, options)  # type: ignore[arg-type]
        if query.detail:  # the history's findings before the detectors', as the daemon's
            result.findings += recorded_losses(query.workspace, result.unit, config=query.config)
            result = with_detectors(query.workspace, result, detect)
    except StorydError as exc:
        return Output(exc.code, b"", (exc.message,))
    except Exception as exc:  # a bug must still give a clean exit 70, never a traceback
        return Output(70, b"", (f"internal error: {type(exc).__name__}: {exc}",))
    line = (detail_line(result.envelope, result.findings, "direct", result.unit,
                        query.workspace) if query.detail else result.line)  # fmt: skip
    return Output(0, line, tuple(result.warnings))


def recorded_losses(
    workspace: str, unit: Unit, database: str | None = None, *, config: str | None = None
) -> tuple[Finding, ...]:
    """The unit's `regressed` findings from the history database at `database` (default:
    where the configuration has the daemon record, config.loader.history_database), read
    here: `--detail`, and the early door before the daemon's recorder holds the marks.
    None without one (no recording daemon ever ran, [history] off), and nothing of
    sqlite3, hashlib or json is imported to find that out."""
    if database is None:
        from storyd.config.loader import history_database

        database = history_database(config)  # `config`: --config FILE (None: the default)
    if database is None or not os.path.exists(database):
        return ()
    from storyd.api.history import lost_progress  # sqlite3: --detail only

    found = lost_progress(os.path.realpath(workspace), [unit], database, whole_files=False)
    return found.get((unit.state_file, unit.key), ())


def _configured_staleness(path: str | None) -> str:
    """The configuration's staleness mode, its `limits.max_state_bytes` applied; without
    a file, `git` (and no config module import).

    A --config file that does not exist is an error here (reported as a warning by the
    caller), where the default file may be absent.
    """
    from storyd.core.paths import config_path

    if path is None and not os.path.exists(config_path()):
        return storytime.DEFAULT_MODE
    if path is not None and not os.path.isfile(path):
        from storyd.core.errors import SetupError

        raise SetupError(f"--config {path}: no such file")
    from storyd import config
    from storyd.config.loader import load_state_cap

    staleness = config.load_staleness(path)
    cap = load_state_cap(path)
    if cap is not None:  # the daemon's cap: the same file answers the same either way
        from storyd.core import switches

        switches.configure(max_state_bytes=cap)
    return staleness


def direct(query: Query) -> Output:
    """`storyd resume --direct`: the direct read in the configured staleness mode, with
    the detectors for --detail. The CLI's fallback and the Python client's are this one
    call, so neither can answer differently from the other."""
    warnings: tuple[str, ...] = ()
    try:
        staleness = _configured_staleness(query.config)
    except StorydError as exc:  # a broken config must not break the seed's contract
        staleness = storytime.DEFAULT_MODE
        warnings = (f"warn: {exc.message.splitlines()[0]}; using the default staleness",)
    if not query.detail:
        output = run(query, staleness)
    else:
        from storyd.api.detection import build_detect

        try:
            from storyd import config

            detect, runner = build_detect(config.load(query.config), query.staleness or staleness)
        except StorydError as exc:
            return Output(exc.code, b"", (exc.message,))
        try:
            output = run(query, staleness, detect)
        finally:
            runner.close()
    output.stderr = warnings + output.stderr
    return output
