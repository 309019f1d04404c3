"""The shared realworld4 corpus (../shared/corpus/realworld4), read at run time.

Real OpenSpec and Backlog.md files from public repositories, byte for byte
(MANIFEST.json names repo, path and commit). Nothing of it is copied into the project:
a test lays files out in its own temporary workspace, and skips when the corpus is
absent. (The Codex ExecPlans are in realworld3: tests/realworld3.py.)

    entries(convention)      the manifest's entries of one convention
    lay_out(entry, ws)       one file at its producer path in `ws`; the relative path
    lay_out_commit(entry, ws)  every file of the entry's repository and commit at its
                             producer path (a backlog: config.yml and its task files)
    gitlog(entry)            the repository's commits: (sha, subject, body)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "realworld4"
if not CORPUS.is_dir():  # a worktree beside the main checkout
    CORPUS = Path("/work/shared/corpus/realworld4")

__all__ = ["CORPUS", "entries", "gitlog", "lay_out", "lay_out_commit", "need_corpus"]


def need_corpus() -> None:
    """Skip the calling test when the corpus is not on this machine."""
    if not (CORPUS / "MANIFEST.json").is_file():
        pytest.skip("the realworld4 corpus (../shared/corpus/realworld4) is absent")


def entries(convention: str) -> list[dict[str, object]]:
    """The manifest's entries of one convention (empty when the corpus is absent)."""
    manifest = CORPUS / "MANIFEST.json"
    if not manifest.is_file():
        return []
    return [e for e in json.loads(manifest.read_text()) if e["convention"] == convention]


def lay_out(entry: dict[str, object], ws: Path) -> str:
    """Copy one corpus file to its producer path in `ws`; the workspace-relative path."""
    relpath = str(entry["path"])
    dest = ws / relpath
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CORPUS / str(entry["file"]), dest)
    return relpath


def lay_out_commit(entry: dict[str, object], ws: Path) -> list[str]:
    """Every corpus file of the entry's repository and commit, at its producer path."""
    return [lay_out(e, ws) for e in entries(str(entry["convention"]))
            if e["repo"] == entry["repo"] and e["commit"] == entry["commit"]]


def gitlog(entry: dict[str, object]) -> list[tuple[str, str, str]]:
    """The repository's commits from `_gitlog/`: (sha, subject, body), newest first."""
    path = CORPUS / str(entry["gitlog"])
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) >= 4 and len(fields[0]) >= 7:
            rows.append((fields[0], fields[3], fields[4] if len(fields) > 4 else ""))
    return rows
