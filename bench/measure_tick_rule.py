"""Would ticking a box from git be safe? The task-named rule against the realworld3 and
realworld4 corpora's successive versions (../shared/corpus/realworld3, realworld4, read
in place).

For every saved version V of a spec-kit, Kiro, Task Master or beads file, and of an
OpenSpec tasks.md, a Backlog.md config (with its commit's task files), a BMAD
sprint-status.yaml (with its story files) or a GSD STATE.md (with ROADMAP.md and the
plans), the commits
dated at or before V's commit (from `_gitlog/`) are matched with the task-named
detector's rules (storyd.detectors.mentions). A task open in V that a commit claims
(`claimed-in-commit`) is a box reconcile would tick. The newest later version of the
same file says whether the producer ticked it too (a true tick), still leaves it open
(a false tick) or dropped it (unknown). Mentions (`named-in-commit`) are counted apart.
An OpenSpec commit counts only when it also names the change, as the detector reads it.

    python bench/measure_tick_rule.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import realworld3
import realworld4
from realworld3 import CORPUS

from storyd.core.formats import adapter_for
from storyd.core.formats.base import Source
from storyd.detectors.mentions import claims_done, named_ids

# convention -> (its corpus, the suffix of its state files; "" for all but state.json)
CONVENTIONS = {"spec-kit": (realworld3, ""), "kiro": (realworld3, ""),
               "task-master": (realworld3, ""), "beads": (realworld3, ""),
               "openspec": (realworld4, "tasks.md"), "backlog-md": (realworld4, "config.yml"),
               "bmad": (realworld4, "sprint-status.yaml"), "gsd": (realworld4, "STATE.md")}


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _log(corpus: Path, entry: dict[str, object]) -> list[tuple[datetime, str]]:
    rows = []
    path = corpus / str(entry["gitlog"])
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) >= 4:
            body = fields[4].replace("\\n", "\n") if len(fields) > 4 else ""
            rows.append((_when(fields[1]), f"{fields[3]}\n{body}"))
    return rows


def _state(corpus: Any, entry: dict[str, object]) -> tuple[str, dict[str, bool]]:
    """The file's current (or only) unit: its key, and task id -> done (realworld4's
    with every file of the entry's commit: a backlog's tasks, a sprint's stories)."""
    with tempfile.TemporaryDirectory() as tmp:
        if corpus is realworld4:
            corpus.lay_out_commit(entry, Path(tmp))
            relpath = str(entry["path"])
        else:
            relpath = corpus.lay_out(entry, Path(tmp))
        units = adapter_for(relpath).load(Source(tmp), relpath)
    unit = next((u for u in units if u.labels.get("current") == "yes"), units[0])
    return unit.key, {t.id: t.done for t in unit.tasks}


def measure() -> dict[str, dict[str, int]]:
    """Per convention: ticks (true, false, unknown, unverifiable) and mentions."""
    results: dict[str, dict[str, int]] = {}
    for convention, (corpus, suffix) in CONVENTIONS.items():
        counts = dict.fromkeys(("true", "false", "unknown", "unverifiable", "mentions"), 0)
        files = [e for e in corpus.entries(convention) if str(e["path"]).endswith(suffix)
                 and not str(e["path"]).endswith("state.json")]
        by_file: dict[tuple[str, str], list[dict[str, object]]] = {}
        for entry in files:
            by_file.setdefault((str(entry["repo"]), str(entry["path"])), []).append(entry)
        for versions in by_file.values():
            versions.sort(key=lambda e: _when(str(e["commit_date"])))
            read = [_state(corpus, v) for v in versions]
            states = [tasks for _, tasks in read]
            log = _log(corpus.CORPUS, versions[0])
            for index, version in enumerate(versions):
                when = _when(str(version["commit_date"]))
                open_ids = {k for k, done in states[index].items() if not done}
                claimed: set[str] = set()
                named: set[str] = set()
                change = read[index][0].lower() if convention == "openspec" else ""
                for date, message in log:
                    if date <= when and change in message.lower():
                        ids = named_ids(convention, message, open_ids)
                        (claimed if claims_done(message) else named).update(ids)
                counts["mentions"] += len(named - claimed)
                later = states[-1] if index + 1 < len(versions) else None
                for task_id in claimed:
                    if later is None:
                        counts["unverifiable"] += 1
                    elif task_id not in later:
                        counts["unknown"] += 1
                    else:
                        counts["true" if later[task_id] else "false"] += 1
        results[convention] = counts
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.parse_args()
    if not (CORPUS / "MANIFEST.json").is_file():
        sys.exit(f"no corpus at {CORPUS}")
    print(f"{'convention':12} {'true':>5} {'false':>5} {'unknown':>7} {'unverif.':>8} "
          f"{'mentions':>8}")
    for convention, c in measure().items():
        print(f"{convention:12} {c['true']:5} {c['false']:5} {c['unknown']:7} "
              f"{c['unverifiable']:8} {c['mentions']:8}")


if __name__ == "__main__":
    main()
