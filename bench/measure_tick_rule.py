"""Would ticking a box from git be safe? The task-named rule against the realworld3
corpus's successive versions (../shared/corpus/realworld3, read in place).

For every saved version V of a spec-kit, Kiro, Task Master or beads file, the commits
dated at or before V's commit (from `_gitlog/`) are matched with the task-named
detector's rules (storyd.detectors.mentions). A task open in V that a commit claims
(`claimed-in-commit`) is a box reconcile would tick. The newest later version of the
same file says whether the producer ticked it too (a true tick), still leaves it open
(a false tick) or dropped it (unknown). Mentions (`named-in-commit`) are counted apart.

    python bench/measure_tick_rule.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from realworld3 import CORPUS, entries, lay_out

from storyd.core.formats import adapter_for
from storyd.core.formats.base import Source
from storyd.detectors.mentions import claims_done, named_ids

CONVENTIONS = ("spec-kit", "kiro", "task-master", "beads")


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _log(entry: dict[str, object]) -> list[tuple[datetime, str]]:
    rows = []
    path = CORPUS / str(entry["gitlog"])
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) >= 4:
            body = fields[4].replace("\\n", "\n") if len(fields) > 4 else ""
            rows.append((_when(fields[1]), f"{fields[3]}\n{body}"))
    return rows


def _state(entry: dict[str, object]) -> dict[str, bool]:
    """Task id -> done, in the file's current (or only) unit."""
    with tempfile.TemporaryDirectory() as tmp:
        relpath = lay_out(entry, Path(tmp))
        units = adapter_for(relpath).load(Source(tmp), relpath)
    unit = next((u for u in units if u.labels.get("current") == "yes"), units[0])
    return {t.id: t.done for t in unit.tasks}


def measure() -> dict[str, dict[str, int]]:
    """Per convention: ticks (true, false, unknown, unverifiable) and mentions."""
    results: dict[str, dict[str, int]] = {}
    for convention in CONVENTIONS:
        counts = dict.fromkeys(("true", "false", "unknown", "unverifiable", "mentions"), 0)
        files = [e for e in entries(convention) if not str(e["path"]).endswith("state.json")]
        by_file: dict[tuple[str, str], list[dict[str, object]]] = {}
        for entry in files:
            by_file.setdefault((str(entry["repo"]), str(entry["path"])), []).append(entry)
        for versions in by_file.values():
            versions.sort(key=lambda e: _when(str(e["commit_date"])))
            states = [_state(v) for v in versions]
            log = _log(versions[0])
            for index, version in enumerate(versions):
                when = _when(str(version["commit_date"]))
                open_ids = {k for k, done in states[index].items() if not done}
                claimed: set[str] = set()
                named: set[str] = set()
                for date, message in log:
                    if date <= when:
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
