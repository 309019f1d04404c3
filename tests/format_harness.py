"""What the format adapters' tests share: fixture workspaces, one unit, the resume CLI.

    copy_fixture()    copy a fixture workspace into a test's folder, its files dated OLD
    copier()          the body of a test module's `workspace` fixture
    load_one()        the single unit an adapter reads from a state file
    codes()           a unit's finding codes, sorted
    direct_line()     the envelope line of a direct (in-process) resume
    direct_envelope() the same, parsed
    edit_json()       change a workspace's JSON file in place
    resume_direct()   `storyd resume --state-file … --direct` through the real process

A plain module: the tests import it by name (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson

from storyd.api.answers import Options, resume_unit
from storyd.core.formats.base import Adapter, Source
from storyd.core.model import Unit

__all__ = [
    "OLD",
    "Run",
    "codes",
    "copier",
    "copy_fixture",
    "direct_envelope",
    "direct_line",
    "edit_json",
    "load_one",
    "resume_direct",
]

Run = Callable[..., subprocess.CompletedProcess[bytes]]
OLD = 1_767_225_600  # 2026-01-01T00:00:00Z: copied files predate every completion time


def copy_fixture(fixture: Path, dest: Path, stamp: float | None = OLD) -> Path:
    """Copy a fixture workspace to `dest`, every file dated `stamp` (kept as is if None)."""
    shutil.copytree(fixture, dest)
    if stamp is not None:
        for path in dest.rglob("*"):
            os.utime(path, (stamp, stamp))
    return dest


def copier(fixtures: Path, tmp_path: Path) -> Callable[[str], Path]:
    """`name -> workspace`: fixtures/name copied into tmp_path, every file dated OLD."""
    return lambda name: copy_fixture(fixtures / name, tmp_path / name)


def load_one(adapter: Adapter, ws: Path, relpath: str) -> Unit:
    """The one unit `adapter` reads from the state file at `relpath`."""
    [unit] = adapter.load(Source(str(ws)), relpath)
    return unit


def codes(unit: Unit) -> list[str]:
    """The codes of a unit's findings, sorted."""
    return sorted(f.code for f in unit.findings)


def direct_line(ws: Path, relpath: str, staleness: str = "git") -> bytes:
    """The envelope line `storyd resume --state-file RELPATH --direct` would print."""
    return resume_unit(str(ws), relpath, None, Options(staleness=staleness)).line


def direct_envelope(ws: Path, relpath: str, staleness: str = "git") -> dict[str, object]:
    """The envelope of a direct resume, parsed."""
    return orjson.loads(direct_line(ws, relpath, staleness))  # type: ignore[no-any-return]


def edit_json(ws: Path, relpath: str, change: Callable[[dict[str, object]], None]) -> None:
    """Load a workspace's JSON file, let `change` edit it, and write it back (compact)."""
    doc = orjson.loads((ws / relpath).read_bytes())
    change(doc)
    (ws / relpath).write_bytes(orjson.dumps(doc))


def resume_direct(
    run: Run, ws: Path, relpath: str, *flags: str
) -> subprocess.CompletedProcess[bytes]:
    """`storyd resume --state-file RELPATH --direct FLAGS…`, run in the workspace."""
    return run("resume", "--state-file", relpath, "--direct", *flags, cwd=ws)
