"""The findings storyd gives on the real files of ../shared/corpus/realworld3, per
convention: what docs/formats.md's "before/after" table is measured with.

    findings(entry, ws)   every unit of one corpus file laid out in `ws`, with all its
                          findings (the format's and the built-in detectors', no git)
    figures()             per convention: files, units, files with warnings, warnings,
                          and the count of each severity:detector/code

Run it to print the table: `.venv/bin/python tests/quiet_figures.py`.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realworld3 import entries, lay_out

from storyd.core.model import Finding, Unit

__all__ = ["CONVENTIONS", "figures", "findings"]

CONVENTIONS = ("spec-kit", "kiro", "task-master", "beads")


def files(convention: str) -> list[dict[str, object]]:
    """The convention's state files in the corpus (Task Master's state.json is a companion)."""
    return [e for e in entries(convention) if not str(e["path"]).endswith("state.json")]


def findings(entry: dict[str, object], ws: Path) -> list[tuple[Unit, tuple[Finding, ...]]]:
    """Each unit of the file and its findings, read as the daemon reads them."""
    from storyd.api.answers import Options, answer, read_units
    from storyd.api.detection import build_detect
    from storyd.config.values import Config
    from storyd.core.formats import adapter_for

    relpath = lay_out(entry, ws)
    detect, runner = build_detect(Config(), "git", inline=True)
    try:
        out = []
        for unit in read_units(str(ws), adapter_for(relpath), relpath, Options()):
            got = answer(str(ws), unit, Options())
            out.append((unit, got.findings + tuple(detect(str(ws), unit, got))))
        return out
    finally:
        runner.close()


def figures() -> dict[str, dict[str, object]]:
    """Per convention: files, units, filesWithWarnings, warnings, codes."""
    table: dict[str, dict[str, object]] = {}
    for convention in CONVENTIONS:
        codes: Counter[str] = Counter()
        warned = warnings = units = 0
        listed = files(convention)
        for entry in listed:
            with tempfile.TemporaryDirectory() as folder:
                found = findings(entry, Path(folder))
            units += len(found)
            mine = [f for _, fs in found for f in fs]
            codes.update(f"{f.severity}:{f.detector}/{f.code}" for f in mine)
            count = sum(f.severity == "warning" for f in mine)
            warned += count > 0
            warnings += count
        table[convention] = {"files": len(listed), "units": units, "filesWithWarnings": warned,
                             "warnings": warnings, "codes": dict(sorted(codes.items()))}
    return table


if __name__ == "__main__":
    print("| convention | files | units | files with warnings | warnings |")
    print("| --- | --- | --- | --- | --- |")
    measured = figures()
    for name, row in measured.items():
        print(f"| {name} | {row['files']} | {row['units']} | {row['filesWithWarnings']} | "
              f"{row['warnings']} |")
    for name, row in measured.items():
        print(name, row["codes"])
