"""What a cache miss answers from: the asked unit alone, from the freshest parse.

A query the cache cannot answer (a warm-up not done, a file changed since its read)
never waits for a whole file's build, the refresher's or the warm-up's, nor for the
detectors' pass (issue 43). While a warm-up's entries wait for the detectors, the
cached unit answers as long as its files are unchanged (`unchecked_unit`); otherwise
the file is parsed now and the asked unit alone built (`read_for`). A file that does
not parse answers from its newest good read, never older than one already served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storyd.api import answers
from storyd.core import pipeline, target
from storyd.core.errors import DataError

if TYPE_CHECKING:
    from storyd.core.model import Finding, Unit
    from storyd.core.query import Query
    from storyd.core.target import Target
    from storyd.server.engine import Engine
    from storyd.server.refresher import Refresher
    from storyd.server.service import Daemon

__all__ = ["answer", "read_for", "unchecked_unit"]


def answer(daemon: Daemon, path: str, query: Query, since: int | None) -> answers.Answer:
    """A miss's answer (Daemon.read_answer, a query's read): the asked unit from the
    freshest parse, with the detectors and the history's `regressed` findings for a
    `--detail`/`resume`, and a torn file's finding when it is a last good read."""
    engine = daemon.engine
    where = target.for_query(path, query)  # the disk's view
    relpath = where.relpath
    unit, unreadable = unchecked_unit(engine, path, where), None
    if unit is None:
        kept = daemon.watching(path) or engine.expected(path)
        got, unreadable = read_for(engine, daemon.refresher, path, where, since, kept=kept,
                                   warming=not daemon.warm.done)  # fmt: skip
        if got.error is not None:
            raise got.error
        assert got.units is not None
        unit = where.pick(got.units)
    result = pipeline.answer(path, unit, daemon.options, prime_batch=False)  # one unit
    if query.detail:  # the history's findings before the detectors', as an entry has them
        if unreadable is None:
            result.findings += _lost_now(daemon, path, unit)
        result = answers.with_detectors(path, result, engine.detect)
    if unreadable is not None:
        torn_since = engine.unreadable_since(path, relpath)
        result.findings += (engine.unreadable_finding(relpath, unreadable, torn_since),)
    return result


def _lost_now(daemon: Daemon, path: str, unit: Unit) -> tuple[Finding, ...]:
    """The `regressed` findings the cached answer will have (the recorder's `peek`; none
    without history). Its blocking parts (the marks' first read, the writers' lock) do
    not hold the background's passes; a bug in it costs the findings, never the answer."""
    peek = daemon.lost_now
    if peek is None:
        return ()
    try:
        with daemon.engine.reads.priority.waiting():
            return peek(path, unit)
    except Exception as exc:  # a plugin format's loader, say: the answer stands
        daemon.log.warning("regressed_unchecked", workspace=path, stateFile=unit.state_file,
                           unit=unit.key, error=f"{type(exc).__name__}: {exc}")  # fmt: skip
        return ()


def unchecked_unit(engine: Engine, path: str, where: Target) -> Unit | None:
    """The asked unit as the cache holds it while its detectors have not run yet (a
    warm-up's first pass): the freshest parse, when every file it was read from is
    unchanged since (`serve`'s proof) and it read well. None: read it now."""
    if where.key is None:
        return None
    ws = engine.workspaces.get(path)
    snap = ws.files.get(where.relpath) if ws is not None else None
    if snap is None or snap.stale or snap.error is not None:
        return None
    entry = engine.serve(path, where.relpath, where.key, checked=False)
    return entry.unit if entry is not None and entry.error is None else None


def read_for(engine: Engine, refresher: Refresher, path: str, where: Target,
             since: int | None, *, kept: bool,
             warming: bool = False) -> tuple[pipeline.FileRead, str | None]:
    """The read a miss answers from, and why it is a last good read (None: it is not).

    The file parsed now and the asked unit alone built (Reads.read_one), without the
    file's lock a whole read holds. Only when that read fails the way a last good read
    answers (does not parse, lock held past the bound) is the file read whole, against
    the cache, for that last good read, or the newer bytes a one-unit read kept.
    `kept`: the workspace is watched (or about to be), so the cache catches up behind,
    except while the start-up warm-up (`warming`) has yet to read the workspace: its
    read is on its way, and a refresh per miss would only delay it.
    """
    relpath, adapter, key = where.relpath, where.adapter, where.key
    reads = engine.reads
    if key is not None:
        got = reads.read_one(path, relpath, adapter, key)
        if not (isinstance(got.error, DataError) or getattr(got.error, "code", 0) == 75):
            ws = engine.workspaces.get(path)
            if kept and not (warming and (ws is None or not ws.files)):  # (its read is due)
                refresher.nudge(path, relpath)  # the cache catches up behind the answer
            return got, None
    if not kept:
        return pipeline.read_file(path, adapter, relpath, engine.options), None
    got, unreadable = engine.read_now(path, relpath, adapter, since)
    refresher.nudge(path, relpath)  # the cache catches up behind the answer
    if key is not None and (unreadable is not None or got.error is not None):
        newer = reads.replay_one(path, relpath, adapter, key)  # newer than the last good
        if newer is not None:
            return newer, unreadable or getattr(got.error, "message", "")
    return got, unreadable
