"""The shared realworld3 corpus (../shared/corpus/realworld3), read at run time.

Real spec-kit, Kiro, Task Master and beads files from public repositories, byte for byte
(MANIFEST.json names repo, path and commit). Nothing of it is copied into the project:
a test lays a file out in its own temporary workspace, and skips when the corpus is
absent.

    entries(convention)   the manifest's entries of one convention
    lay_out(entry, ws)    the file at its producer path in `ws` (Task Master's state.json
                          of the same commit beside it); the workspace-relative path
    gitlog(entry)         the repository's commits: (sha, subject, body)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "realworld3"
if not CORPUS.is_dir():  # a worktree beside the main checkout
    CORPUS = Path("/work/shared/corpus/realworld3")

__all__ = ["CORPUS", "entries", "gitlog", "lay_out", "need_corpus"]


def need_corpus() -> None:
    """Skip the calling test when the corpus is not on this machine."""
    if not (CORPUS / "MANIFEST.json").is_file():
        pytest.skip("the realworld3 corpus (../shared/corpus/realworld3) is absent")


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
    if entry["convention"] == "task-master":
        sibling = [
            e for e in entries("task-master")
            if e["repo"] == entry["repo"] and e["commit"] == entry["commit"]
            and e["path"] == ".taskmaster/state.json"
        ]
        for state in sibling:
            (ws / ".taskmaster").mkdir(exist_ok=True)
            shutil.copyfile(CORPUS / str(state["file"]), ws / ".taskmaster" / "state.json")
    return relpath


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


def size(entry: dict[str, object]) -> int:
    """The file's size in bytes."""
    return os.path.getsize(CORPUS / str(entry["file"]))
