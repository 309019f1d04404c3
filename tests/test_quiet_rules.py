"""Issue 40, item 3: quiet when nothing is wrong. Each convention's own rules decide what
is a warning (task-order is one only where the producer is sequential), and one cause is
one line per unit (storyd.core.causes), held on the real files of
../shared/corpus/realworld3 (read at run time, skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from quiet_figures import CONVENTIONS, files, findings
from realworld3 import need_corpus

from storyd.core.causes import one_line_each
from storyd.core.model import Finding, Task, Unit
from storyd.detectors.task_order import DETECTOR as TASK_ORDER
from storyd.detectors.task_order import SEQUENTIAL, severity

SEEDS = ("epic", "session", "issue-plan", "autodev", "checkpoint")


def _unit(format: str, pattern: str) -> Unit:
    tasks = tuple(Task(f"T{i}", "DONE" if c == "D" else "PENDING", "done" if c == "D"
                       else "pending") for i, c in enumerate(pattern, 1))  # fmt: skip
    return Unit(format, "state.json", "u", tasks)


def _unknown(task: str, status: str) -> Finding:
    message = f"unknown status {status!r} for task {task}; treated as PENDING"
    return Finding("format", "unknown-status", "warning", message, task)


class TestTaskOrderPerConvention:
    """Out of order: a warning for the seeds' sequential producers, a note elsewhere."""

    @pytest.mark.parametrize("format", SEEDS)
    def test_the_seeds_are_sequential(self, format: str) -> None:
        (found,) = TASK_ORDER.check(_unit(format, "DPDD"), None)  # type: ignore[arg-type]
        assert found.severity == "warning"

    @pytest.mark.parametrize("format", ["spec-kit", "kiro"])
    def test_any_order_producers_get_a_note(self, format: str) -> None:
        (found,) = TASK_ORDER.check(_unit(format, "DPDD"), None)  # type: ignore[arg-type]
        assert found.severity == "info"

    @pytest.mark.parametrize("format", ["task-master", "beads"])
    def test_unordered_files_are_not_checked(self, format: str) -> None:
        assert TASK_ORDER.check(_unit(format, "DPDD"), None) == []  # type: ignore[arg-type]

    def test_every_builtin_format_has_a_rule(self) -> None:
        from storyd.core.formats import all_adapters

        for adapter in all_adapters(plugins=False):
            assert adapter.name in SEQUENTIAL or not adapter.ordered, adapter.name

    def test_one_line_per_unit(self) -> None:
        (found,) = TASK_ORDER.check(_unit("epic", "DP" + "D" * 14), None)  # type: ignore[arg-type]
        assert found.message == (
            "14 tasks are DONE after task T2, which is PENDING: "
            "T3, T4, T5, T6, T7, T8, T9, T10, T11, T12 and 4 more"
        )
        assert found.task == "T3" and found.evidence["count"] == "14"
        assert found.evidence["tasks"].split(",") == [f"T{n}" for n in range(3, 17)]

    def test_a_plugin_says_with_sequential(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A format not in the table: its adapter's `sequential` (format_says)."""
        from storyd.detectors import task_order

        monkeypatch.setattr(task_order, "format_says", lambda format, what: format == "strict")
        assert severity("lenient") == "info" and severity("strict") == "warning"
        assert severity("spec-kit") == "info" and severity("epic") == "warning"


class TestOneCauseOneLine:
    """Findings that say the same of many tasks become one, the ids in its evidence."""

    def test_one_invented_status_on_many_tasks_is_one_warning(self) -> None:
        found = tuple(_unknown(f"bd-{n}", "done") for n in range(125))
        (one,) = one_line_each(found)
        assert one.severity == "warning" and one.task is None
        assert "'done'" in one.message and "125 tasks" in one.message
        assert one.evidence["count"] == "125"
        assert one.evidence["tasks"].split(",") == [f"bd-{n}" for n in range(125)]

    def test_two_statuses_are_two_causes(self) -> None:
        found = (_unknown("a-1", "done"), _unknown("a-2", "frozen"), _unknown("a-3", "done"))
        assert [f.evidence.get("tasks") for f in one_line_each(found)] == ["a-1,a-3", None]

    def test_the_same_line_twice_is_one(self) -> None:
        twice = Finding("format", "duplicate-task-id", "warning", "task id 4.2 appears again",
                        "4.2")
        assert one_line_each((twice, twice, twice)) == (twice,)

    def test_an_id_inside_a_longer_id_is_not_the_task(self) -> None:
        a = Finding("format", "x", "warning", "task 7 waits on 7.7", "7")
        b = Finding("format", "x", "warning", "task 8 waits on 7.7", "8")
        c = Finding("format", "x", "warning", "task 9 waits on 9.1", "9")
        (ab, kept) = one_line_each((a, b, c))
        assert ab.message == "task 7 (and 1 other: 2 tasks) waits on 7.7" and kept == c

    def test_repaired_codes_stay_one_per_task(self) -> None:
        """reconcile repairs per task: two tasks recording one lost commit stay two."""
        evidence = {"commit": "f" * 40}
        found = tuple(Finding("commit-in-history", "missing", "error", f"commit gone for {t}",
                              t, evidence) for t in ("T1", "T2"))  # fmt: skip
        assert one_line_each(found) == found

    def test_different_evidence_is_different_causes(self) -> None:
        pairs = ((1, "a1"), (2, "b2"))
        found = tuple(Finding("task-named", "named-in-commit", "info", f"{c} names T{n}",
                              f"T{n}", {"commit": c}) for n, c in pairs)  # fmt: skip
        assert one_line_each(found) == found

    def test_nothing_repeated_is_the_same_tuple(self) -> None:
        found = (_unknown("a", "x"), Finding("format", "other", "info", "y"))
        assert one_line_each(found) is found


# the real files ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_real_files_follow_their_conventions_rules(convention: str, tmp_path: Path) -> None:
    """No task-order warning where the producer lets tasks be done in any order; in no
    unit does a code repeat for one cause."""
    need_corpus()
    for index, entry in enumerate(files(convention)):
        for unit, found in findings(entry, tmp_path / str(index)):
            where = (entry["file"], unit.key)
            order = [f for f in found if f.code == "out-of-order"]
            assert all(f.severity == "info" for f in order), where
            assert len(order) <= 1, where
            assert one_line_each(found) == found, where  # each cause said once
            if convention in ("task-master", "beads"):
                assert not order, where  # not the order of the work: not checked


@pytest.mark.slow
def test_an_invented_beads_status_is_one_warning(tmp_path: Path) -> None:
    """jlevy/tbd: 125 issues `done` (beads says `closed`): one warning, the ids in its
    evidence."""
    need_corpus()
    [entry] = [e for e in files("beads") if e["repo"] == "jlevy/tbd"
               and str(e["commit"]).startswith("c75ea54f")]  # fmt: skip
    [(unit, found)] = findings(entry, tmp_path)
    [one] = [f for f in found if f.code == "unknown-status"]
    assert "'done'" in one.message and "125 tasks" in one.message
    assert one.evidence["count"] == "125"
    assert sorted(one.evidence["tasks"].split(",")) == sorted(
        t.id for t in unit.tasks if t.status == "done")
    assert [f.severity for f in found].count("warning") == 1


@pytest.mark.slow
def test_the_figures_in_docs(tmp_path: Path) -> None:
    """docs/formats.md's "after" column: warnings per convention on realworld3."""
    need_corpus()
    from quiet_figures import figures

    measured = figures()
    warnings = {name: row["warnings"] for name, row in measured.items()}
    # spec-kit: duplicate ids only; kiro: one ticked parent with open children; beads: one
    # invented status; task-master: its own rules' warnings, one per cause
    assert warnings["spec-kit"] <= 9 and warnings["kiro"] <= 1 and warnings["beads"] == 1
    assert all("warning:task-order/out-of-order" not in row["codes"]  # type: ignore[operator]
               for row in measured.values())
