"""beads since v0.56: `.beads/issues.jsonl` is an export of the Dolt database beside it;
an export older than the database is never reported as current (export-lags)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from format_harness import codes, load_one
from realworld3 import entries, lay_out, need_corpus

from storyd.core.formats import builtin

BEADS = ".beads/issues.jsonl"
LINE = b'{"id": "bd-1", "status": "open", "title": "x"}\n'


def _ws(tmp_path: Path, database: str | None, exported: float, changed: float) -> Path:
    (tmp_path / ".beads").mkdir(parents=True)
    (tmp_path / BEADS).write_bytes(LINE)
    os.utime(tmp_path / BEADS, (exported, exported))
    if database is not None:
        path = tmp_path / database
        if database.endswith("dolt"):
            (path / "beads" / ".dolt" / "noms").mkdir(parents=True)
            (path / "beads" / ".dolt" / "noms" / "manifest").write_bytes(b"x")
            os.utime(path / "beads" / ".dolt" / "noms" / "manifest", (changed, changed))
            os.utime(path / "beads" / ".dolt" / "noms", (exported, exported))
            os.utime(path / "beads" / ".dolt", (exported, exported))
            os.utime(path / "beads", (exported, exported))
            os.utime(path, (exported, exported))
        else:
            path.write_bytes(b"SQLite format 3\0")
            os.utime(path, (changed, changed))
    return tmp_path


class TestExportLags:
    """The database's mtime against the export's, both named in the finding."""

    def test_a_newer_dolt_database_makes_the_export_lag(self, tmp_path: Path) -> None:
        ws = _ws(tmp_path, ".beads/dolt", 1_767_225_600, 1_767_225_600 + 3600)
        unit = load_one(builtin("beads"), ws, BEADS)
        [lag] = [f for f in unit.findings if f.code == "export-lags"]
        assert lag.severity == "warning"
        assert "2026-01-01T00:00:00Z" in lag.message and "2026-01-01T01:00:00Z" in lag.message
        assert unit.labels["export"] == "lags the database"

    def test_a_newer_sqlite_database_too(self, tmp_path: Path) -> None:
        ws = _ws(tmp_path, ".beads/beads.db", 1_767_225_600, 1_767_225_600 + 60)
        assert "export-lags" in codes(load_one(builtin("beads"), ws, BEADS))

    def test_an_export_as_new_as_its_database_or_none_is_current(self, tmp_path: Path) -> None:
        ws = _ws(tmp_path / "a", ".beads/dolt", 1_767_225_600, 1_767_225_600)
        assert "export-lags" not in codes(load_one(builtin("beads"), ws, BEADS))
        ws = _ws(tmp_path / "b", None, 1_767_225_600, 0)
        unit = load_one(builtin("beads"), ws, BEADS)
        assert "export-lags" not in codes(unit) and "export" not in unit.labels

    @pytest.mark.slow
    def test_the_real_files_with_a_newer_database_beside_them(self, tmp_path: Path) -> None:
        need_corpus()
        for n, entry in enumerate(entries("beads")):
            ws = tmp_path / str(n)
            relpath = lay_out(entry, ws)
            os.utime(ws / relpath, (1_767_225_600, 1_767_225_600))
            (ws / ".beads" / "beads.db").write_bytes(b"SQLite format 3\0")
            unit = load_one(builtin("beads"), ws, relpath)
            assert "export-lags" in codes(unit), entry["file"]
