"""The shared realworld3 corpus (../shared/corpus/realworld3), read at run time.

Real spec-kit, Kiro, Task Master, beads, Claude Code task-list and Codex ExecPlan files
(tests/corpus_harness.py says how a corpus is read).

    entries(convention)   the manifest's entries of one convention
    lay_out(entry, ws)    the file at its producer path in `ws` (Task Master's state.json
                          of the same commit beside it); the workspace-relative path
    gitlog(entry)         the repository's commits: (sha, subject, body)
"""

from __future__ import annotations

from pathlib import Path

from corpus_harness import Corpus

__all__ = ["CORPUS", "entries", "gitlog", "lay_out", "need_corpus", "size"]

_CORPUS = Corpus("realworld3")
CORPUS, entries, gitlog, size = _CORPUS.root, _CORPUS.entries, _CORPUS.gitlog, _CORPUS.size
need_corpus = _CORPUS.need


def lay_out(entry: dict[str, object], ws: Path) -> str:
    """Copy one corpus file to its producer path in `ws` (a Task Master tasks.json with
    its commit's `.taskmaster/state.json`); the workspace-relative path."""
    relpath = _CORPUS.lay_out(entry, ws)
    if entry["convention"] == "task-master":
        for state in entries("task-master"):
            if (state["repo"], state["commit"]) == (entry["repo"], entry["commit"]) \
                    and state["path"] == ".taskmaster/state.json":  # fmt: skip
                _CORPUS.lay_out(state, ws)
    return relpath
