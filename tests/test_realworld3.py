"""The four adapters on the real files of ../shared/corpus/realworld3 (read at run time,
skipped when absent): every file reads to units with no traceback, and what
CONVENTIONS.md says the real files show holds in storyd's answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from realworld3 import entries, lay_out, need_corpus

from storyd.api.answers import Options, resume_unit
from storyd.core.errors import DataError
from storyd.core.formats import adapter_for
from storyd.core.formats.base import Source
from storyd.core.model import DONE, Unit

CONVENTIONS = ("spec-kit", "kiro", "task-master", "beads")


def _read(entry: dict[str, object], tmp_path: Path) -> list[Unit]:
    relpath = lay_out(entry, tmp_path)
    return adapter_for(relpath).load(Source(str(tmp_path)), relpath)


def _one(repo: str, commit: str, convention: str, tmp_path: Path,
         path_part: str = "") -> list[Unit]:
    need_corpus()
    [entry] = [e for e in entries(convention) if e["repo"] == repo
               and str(e["commit"]).startswith(commit) and path_part in str(e["path"])
               and not str(e["path"]).endswith("state.json")]
    return _read(entry, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_every_real_file_reads_and_answers(convention: str, tmp_path: Path) -> None:
    need_corpus()
    files = [e for e in entries(convention) if not str(e["path"]).endswith("state.json")]
    assert files, "the premise: the corpus has files of this convention"
    for index, entry in enumerate(files):
        ws = tmp_path / str(index)
        relpath = lay_out(entry, ws)
        units = adapter_for(relpath).load(Source(str(ws)), relpath)
        assert units, entry["file"]
        answer = resume_unit(str(ws), relpath, None, Options())
        point = answer.envelope["resumePoint"]
        unit = answer.unit
        pending = [t for t in unit.tasks if t.bucket != DONE]
        if point.startswith("task-"):
            assert unit.next is not None and point == f"task-{unit.next['task']}", entry["file"]
            assert unit.next["task"] in {t.id for t in pending}, entry["file"]
        else:
            assert point in ("fresh-start", "all-done", "blocked"), (entry["file"], point)
        counts = entry.get("status_counts")
        if convention == "beads" and isinstance(counts, dict):  # tombstones are gone
            live = sum(n for s, n in counts.items() if s != "tombstone")
            assert len(unit.tasks) == live, entry["file"]


def test_spec_kit_real_duplicates_nested_ids_and_legends(tmp_path: Path) -> None:
    [unit] = _one("AungMyoKyaw/FocusBar", "1d3f5764", "spec-kit", tmp_path)
    assert [f.task for f in unit.findings if f.code == "duplicate-task-id"] == ["T003"]
    assert "T002a" in [t.id for t in unit.tasks]
    assert unit.resume_point == "all-done"


def test_spec_kit_non_t_ids_and_never_ticked(tmp_path: Path) -> None:
    [unit] = _one("gcmcnutt/autoc", "11897824", "spec-kit", tmp_path)
    assert unit.resume_point == "fresh-start"
    assert unit.next is not None and unit.next["task"] == "T-XIAO-1"


def test_kiro_optional_tasks_are_never_next(tmp_path: Path) -> None:
    for commit in ("1f701c78", "55d74980"):
        [unit] = _one("Homas/RpiDNS", commit, "kiro", tmp_path / commit)
        optional = {t.id for t in unit.tasks if t.status == "optional"}
        assert optional, "the premise: RpiDNS marks optional tasks"
        assert unit.next is not None and unit.next["task"] not in optional


def test_kiro_optional_tasks_are_not_counted_against_progress(tmp_path: Path) -> None:
    """The summary `status`, `top` and `list` show counts the tasks the format's own
    `progress` label counts (a fresh user saw 44/56 78% beside "progress": "44/45")."""
    from storyd.api.summaries import unit_summary

    for commit in ("1f701c78", "55d74980"):
        [unit] = _one("Homas/RpiDNS", commit, "kiro", tmp_path / commit)
        summary = unit_summary(str(tmp_path), unit, unit.resume_point, (), None, 0)
        done, total = summary["done"], summary["total"]
        assert str(unit.labels["progress"]).startswith(f"{done}/{total} "), (summary, commit)
        assert total < len(unit.tasks), "the premise: optional tasks left open"


def test_kiro_two_digit_subtasks_sort_numerically(tmp_path: Path) -> None:
    [unit] = _one("nobu007/connective-byte", "d5acc8a4", "kiro", tmp_path)
    ids = [t.id for t in unit.tasks]
    for parent in {i.split(".")[0] for i in ids if "." in i}:
        subs = [tuple(map(int, i.split("."))) for i in ids if i.startswith(parent + ".")]
        assert subs == sorted(subs)


def test_task_master_current_tag_is_not_always_master(tmp_path: Path) -> None:
    units = _one("eyaltoledano/claude-task-master", "c2d6c18a", "task-master", tmp_path)
    assert len(units) == 9
    [current] = [u for u in units if u.labels.get("current") == "yes"]
    assert current.key == "loop"
    answer = resume_unit(str(tmp_path), ".taskmaster/tasks/tasks.json", None, Options())
    assert answer.unit.key == "loop"
    units = _one("AcidicSoil/oraclepack", "a7604efa", "task-master", tmp_path / "o")
    assert [u.key for u in units if u.labels.get("current")] == ["chore-overview"]


def test_task_master_legacy_meta_and_two_files_that_disagree(tmp_path: Path) -> None:
    [unit] = _one("eyaltoledano/claude-task-master", "0eec9532", "task-master", tmp_path)
    assert unit.tasks and unit.next is not None
    need_corpus()
    pair = [e for e in entries("task-master") if e["repo"] == "BlakeDanielson/eventapp"]
    for entry in pair:
        lay_out(entry, tmp_path / "ev")
    units = adapter_for("tasks/tasks.json").load(Source(str(tmp_path / "ev")), "tasks/tasks.json")
    assert "task-files-disagree" in [f.code for f in units[0].findings]


def test_the_lookalike_tasks_json_is_refused(tmp_path: Path) -> None:
    need_corpus()
    [entry] = entries("lookalike")
    relpath = lay_out(entry, tmp_path)
    with pytest.raises(DataError, match="not a Task Master tasks file"):
        resume_unit(str(tmp_path), relpath, None, Options())


def test_beads_statuses_agents_invent_are_findings(tmp_path: Path) -> None:
    [unit] = _one("jlevy/tbd", "c75ea54f", "beads", tmp_path)
    unknown = [f for f in unit.findings if f.code == "unknown-status"]
    assert len(unknown) == 125 and "'done'" in unknown[0].message


@pytest.mark.slow
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_torn_and_garbled_real_files_never_give_a_traceback(convention: str,
                                                            tmp_path: Path) -> None:
    """Every real file cut at five places, and with bytes garbled: units or a clear
    DataError, never another exception (a torn write, a bad merge, a binary paste)."""
    from storyd.core.errors import StorydError

    need_corpus()
    files = [e for e in entries(convention) if not str(e["path"]).endswith("state.json")]
    outcomes = {"units": 0, "refused": 0}
    for index, entry in enumerate(files[:12]):
        ws = tmp_path / str(index)
        relpath = lay_out(entry, ws)
        data = (ws / relpath).read_bytes()
        variants = [data[: len(data) * k // 6] for k in range(1, 6)]
        variants.append(data.replace(b'"', b"\xff", 3).replace(b"[", b"{", 2))
        for variant in variants:
            (ws / relpath).write_bytes(variant)
            try:
                units = adapter_for(relpath).load(Source(str(ws)), relpath)
            except StorydError as exc:
                assert str(relpath) in exc.message
                outcomes["refused"] += 1
                continue
            for unit in units:
                assert unit.error is None or relpath in unit.error
                if unit.error is None:
                    resume_unit(str(ws), relpath, unit.key, Options())
            outcomes["units"] += 1
    if convention == "task-master":  # a cut or garbled JSON file is refused, not half-read
        assert outcomes == {"units": 0, "refused": 6 * min(12, len(files))}
    else:  # a cut list or JSONL file reads what it still holds
        assert outcomes["units"] > 0
