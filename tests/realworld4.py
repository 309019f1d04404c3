"""The shared realworld4 corpus (../shared/corpus/realworld4), read at run time.

Real OpenSpec, Backlog.md, BMAD and GSD files (tests/corpus_harness.py says how a
corpus is read; the Codex ExecPlans are in realworld3: tests/realworld3.py).

    entries(convention)      the manifest's entries of one convention
    lay_out(entry, ws)       one file at its producer path in `ws`; the relative path
    lay_out_commit(entry, ws)  every file of the entry's repository and commit at its
                             producer path (a backlog: config.yml and its task files)
    gitlog(entry)            the repository's commits: (sha, subject, body)
"""

from __future__ import annotations

from corpus_harness import Corpus

__all__ = ["CORPUS", "entries", "gitlog", "lay_out", "lay_out_commit", "need_corpus"]

_CORPUS = Corpus("realworld4")
CORPUS, entries, gitlog, need_corpus = _CORPUS.root, _CORPUS.entries, _CORPUS.gitlog, _CORPUS.need
lay_out, lay_out_commit = _CORPUS.lay_out, _CORPUS.lay_out_commit
