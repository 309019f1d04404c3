"""Claims (issue 45): a claims database of the test's own (fixture `store`)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The claims database every process of the test shares ($STORYD_CLAIMS, which
    racers, daemons and commands started by the test inherit)."""
    path = tmp_path / "claims.sqlite3"
    monkeypatch.setenv("STORYD_CLAIMS", str(path))
    return path
