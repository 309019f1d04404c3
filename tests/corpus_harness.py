"""A shared corpus of real files (../shared/corpus/<name>), read at run time.

Real state files from public repositories, byte for byte (MANIFEST.json names repo,
path, commit and the file in the corpus). Nothing of it is copied into the project: a
test lays files out in its own temporary workspace, and skips when the corpus is absent.
tests/realworld3.py and tests/realworld4.py are this harness bound to their corpus.

    Corpus(name)                  one corpus (its folder beside the project, else /work/shared)
    .need()                       skip the calling test when the corpus is absent
    .entries(convention)          the manifest's entries of one convention
    .lay_out(entry, ws)           one file at its producer path in `ws`; the relative path
    .lay_out_commit(entry, ws)    every file of the entry's repository and commit
    .gitlog(entry)                the repository's commits: (sha, subject, body), newest first
    .size(entry)                  the file's size in bytes
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

__all__ = ["Corpus"]

Entry = dict[str, object]


class Corpus:
    """One corpus folder and its manifest."""

    def __init__(self, name: str) -> None:
        self.name = name
        root = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / name
        if not root.is_dir():  # a worktree beside the main checkout
            root = Path("/work/shared/corpus") / name
        self.root = root

    def need(self) -> None:
        """Skip the calling test when the corpus is not on this machine."""
        if not (self.root / "MANIFEST.json").is_file():
            pytest.skip(f"the {self.name} corpus (../shared/corpus/{self.name}) is absent")

    def entries(self, convention: str) -> list[Entry]:
        """The manifest's entries of one convention (empty when the corpus is absent)."""
        manifest = self.root / "MANIFEST.json"
        if not manifest.is_file():
            return []
        return [e for e in json.loads(manifest.read_text()) if e["convention"] == convention]

    def lay_out(self, entry: Entry, ws: Path) -> str:
        """Copy one corpus file to its producer path in `ws`; the workspace-relative path."""
        relpath = str(entry["path"])
        dest = ws / relpath
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.root / str(entry["file"]), dest)
        return relpath

    def lay_out_commit(self, entry: Entry, ws: Path) -> list[str]:
        """Every corpus file of the entry's repository and commit, at its producer path."""
        return [self.lay_out(e, ws) for e in self.entries(str(entry["convention"]))
                if e["repo"] == entry["repo"] and e["commit"] == entry["commit"]]

    def gitlog(self, entry: Entry) -> list[tuple[str, str, str]]:
        """The repository's commits from `_gitlog/`: (sha, subject, body), newest first."""
        path = self.root / str(entry["gitlog"])
        rows = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) >= 4 and len(fields[0]) >= 7:
                rows.append((fields[0], fields[3], fields[4] if len(fields) > 4 else ""))
        return rows

    def size(self, entry: Entry) -> int:
        """The file's size in bytes."""
        return os.path.getsize(self.root / str(entry["file"]))
