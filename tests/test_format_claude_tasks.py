"""The claude-tasks format: Claude Code's task lists, on the real files (realworld3,
read at run time) and on fixtures written here for every rule."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import orjson
import pytest
from format_harness import codes, direct_envelope
from realworld3 import CORPUS, need_corpus

from storyd.core.formats import builtin, claude_tasks
from storyd.core.formats.base import Source
from storyd.core.formats.claude_lists import list_folder, read_list

ROOT = ".claude/tasks"


def _task(ident: object, status: str = "pending", blocked_by: list[str] | None = None,
          owner: str | None = None) -> dict[str, object]:
    node: dict[str, object] = {"id": ident, "subject": f"task {ident}", "description": "",
                               "activeForm": "", "status": status, "blocks": [],
                               "blockedBy": blocked_by or []}
    if owner is not None:
        node["owner"] = owner
    return node


def _write(folder: Path, *tasks: dict[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        (folder / f"{task['id']}.json").write_bytes(orjson.dumps(task))


def _unit(ws: Path, folder: str = ROOT) -> object:
    adapter = builtin("claude-tasks")
    units = [u for rel in adapter.find(Source(str(ws)))
             if rel.startswith(folder + "/") and "/" not in rel[len(folder) + 1:]
             for u in adapter.load(Source(str(ws)), rel)]
    [unit] = units
    return unit


def _real_lists() -> dict[tuple[str, str], list[Path]]:
    lists: dict[tuple[str, str], list[Path]] = {}
    for path in sorted((CORPUS / "claude-tasks").glob("*.json")):
        repo, commit, _ = path.name.split("@", 2)
        lists.setdefault((repo, commit), []).append(path)
    return lists


def _lay_out(paths: list[Path], ws: Path) -> None:
    folder = ws / ROOT
    folder.mkdir(parents=True)
    for path in paths:
        name = path.name.rsplit("__", 1)[1]
        (folder / name).write_bytes(path.read_bytes())


class TestRealFiles:
    """Every committed list of the corpus reads as one unit, as its files say."""

    def test_each_real_list_is_one_unit_with_every_task(self, tmp_path: Path) -> None:
        need_corpus()
        lists = _real_lists()
        assert len(lists) == 5 and sum(map(len, lists.values())) == 101 - 2  # 2 tasks.md
        for (repo, _commit), paths in lists.items():
            ws = tmp_path / f"{repo}@{_commit}"
            _lay_out(paths, ws)
            unit = _unit(ws)
            statuses = [orjson.loads(p.read_bytes())["status"] for p in paths]
            assert len(unit.tasks) == len(paths), repo  # type: ignore[attr-defined]
            done = sum(s == "completed" for s in statuses)
            assert unit.labels["progress"].startswith(f"{done}/{len(paths)} "), repo  # type: ignore[attr-defined]
            # haystack wrote `done` (not Claude Code's): its blockers never count as met
            assert unit.next is not None or "unknown-status" in codes(unit), repo  # type: ignore[arg-type, attr-defined]

    def test_what_the_real_files_show(self, tmp_path: Path) -> None:
        need_corpus()
        by_repo = {repo: paths for (repo, _), paths in _real_lists().items()}
        _lay_out(by_repo["andres-monge__haystack"], tmp_path / "haystack")
        haystack = _unit(tmp_path / "haystack")
        assert "unknown-status" in codes(haystack)  # type: ignore[arg-type]  # `done`
        _lay_out(by_repo["Kubudak90__perfect-dex-reports"], tmp_path / "dex")
        dex = _unit(tmp_path / "dex")
        assert "Backend Senior: 13" in dex.labels["owners"]  # type: ignore[attr-defined]
        assert dex.next["owner"]  # type: ignore[attr-defined]
        _lay_out(by_repo["FabianSperrle__time-tracker"], tmp_path / "tt")
        tt = _unit(tmp_path / "tt")
        working = [t.id for t in tt.tasks if t.status == "in_progress"]  # type: ignore[attr-defined]
        assert tt.next["task"] == (working[0] if working else tt.next["task"])  # type: ignore[attr-defined]

    @pytest.mark.slow
    def test_direct_read_of_the_largest_list_within_2x_of_parsing_it(self, tmp_path: Path) -> None:
        need_corpus()
        paths = max(_real_lists().values(), key=len)
        _lay_out(paths, tmp_path)
        first = min((p.name.rsplit("__", 1)[1] for p in paths), key=lambda n: int(n[:-5]))
        blobs = [p.read_bytes() for p in paths]
        adapter = builtin("claude-tasks")
        # parsing alone as bench/bench_md_formats.py defines it: json.loads of every file;
        # the direct read lists the folder, opens, fstats and reads each file (4 system
        # calls, about as long as its parse), then parses: measured 2.7x-3x on a shared
        # machine (docs/formats.md); the bound catches a return of the per-task Python
        parse = min(_timed(lambda: [json.loads(b) for b in blobs]) for _ in range(60))
        direct = min(_timed(lambda: adapter.load(Source(str(tmp_path)), f"{ROOT}/{first}"))
                     for _ in range(60))
        assert direct < 4 * parse, (direct, parse)
        envelope = direct_envelope(tmp_path, f"{ROOT}/{first}", "mtime")  # the whole answer
        listed = [*envelope["tasksCompleted"], *envelope["tasksPending"]]  # type: ignore[misc]
        assert len(listed) == len(paths)


def _timed(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


class TestRules:
    """Next, done, owners and the findings, on lists written here."""

    def test_in_progress_comes_first(self, tmp_path: Path) -> None:
        _write(tmp_path / ROOT, _task("1", "completed"), _task("2"), _task("3", "in_progress"))
        unit = _unit(tmp_path)
        assert unit.next["task"] == "3"  # type: ignore[attr-defined]
        assert unit.resume_point == "task-3"  # type: ignore[attr-defined]

    def test_first_pending_whose_blockers_are_completed_in_id_order(self, tmp_path: Path) -> None:
        _write(tmp_path / ROOT, _task("1", "completed"), _task("2", blocked_by=["10"]),
               _task("10"), _task("9", blocked_by=["1"]))
        unit = _unit(tmp_path)
        assert unit.next["task"] == "9"  # type: ignore[attr-defined]  # 2 waits on 10
        assert unit.next["ready"] == ["9", "10"]  # type: ignore[attr-defined]

    def test_a_deleted_blocker_blocks_nothing(self, tmp_path: Path) -> None:
        _write(tmp_path / ROOT, _task("2", blocked_by=["1"]))
        assert _unit(tmp_path).next["task"] == "2"  # type: ignore[attr-defined]

    def test_all_blocked_and_all_done(self, tmp_path: Path) -> None:
        _write(tmp_path / ROOT, _task("1", blocked_by=["2"]), _task("2", blocked_by=["1"]))
        unit = _unit(tmp_path)
        assert unit.resume_point == "blocked" and "no-next-task" in codes(unit)  # type: ignore[arg-type, attr-defined]
        _write(tmp_path / "b" / ROOT, _task("1", "completed"), _task("2", "completed"))
        assert _unit(tmp_path / "b").resume_point == "all-done"  # type: ignore[attr-defined]

    def test_blocked_by_of_other_shapes_and_the_labels(self, tmp_path: Path) -> None:
        """A `blockedBy` Claude Code does not write (a string, numbers among the ids) is
        read for its ids; the counts, owners and waits are the labels."""
        _write(tmp_path / ROOT, _task("1", "completed", owner="ann"), _task("2", owner=" bo "),
               {**_task("3", owner="ann"), "blockedBy": "2"},
               {**_task("4"), "blockedBy": [2, "1", True, None]},
               _task("5", "in_progress", ["4"]), {**_task("6"), "status": "Blocked"})
        unit = _unit(tmp_path)
        assert unit.next["task"] == "5"  # type: ignore[attr-defined]
        assert unit.next["ready"] == ["2", "3"]  # type: ignore[attr-defined]  # "2": not a list
        assert unit.next["blocked"] == [{"id": "4", "waitingFor": ["2"]},  # type: ignore[attr-defined]
                                        {"id": "5", "waitingFor": ["4"]}]
        assert unit.labels == {"progress": "1/6 (16%)", "completed": "1", "pending": "3",  # type: ignore[attr-defined]
                               "in_progress": "1", "other": "1", "ready": "2",
                               "owners": "ann: 2, bo: 1", "waiting": "4 on 2; 5 on 4"}
        assert codes(unit) == ["unknown-status"]  # type: ignore[arg-type]

    def test_findings_torn_numeric_id_unknown_status_early_done(self, tmp_path: Path) -> None:
        _write(tmp_path / ROOT, _task("1"), _task("2", "done"), _task("3", "completed", ["1"]))
        (tmp_path / ROOT / "4.json").write_bytes(b'{"id": "4", "sta')
        (tmp_path / ROOT / "5.json").write_bytes(orjson.dumps(_task(5)))
        (tmp_path / ROOT / "6.json").write_bytes(b'{"subject": "no id"}')
        unit = _unit(tmp_path)
        assert codes(unit) == ["done-before-blocker", "missing-task-id", "non-string-id",  # type: ignore[arg-type]
                               "torn-task-file", "unknown-status"]

    def test_one_unit_per_folder_answered_by_its_first_file(self, tmp_path: Path) -> None:
        _write(tmp_path / ROOT, _task("2"), _task("10"))
        _write(tmp_path / ROOT / "team-a", _task("1", owner="lead"))
        adapter = builtin("claude-tasks")
        found = adapter.find(Source(str(tmp_path)))
        assert found == [f"{ROOT}/10.json", f"{ROOT}/2.json", f"{ROOT}/team-a/1.json"]
        got = {rel: adapter.load(Source(str(tmp_path)), rel) for rel in found}
        assert got[f"{ROOT}/10.json"] == []
        assert [u.state_file for u in got[f"{ROOT}/2.json"]] == [f"{ROOT}/2.json"]
        assert got[f"{ROOT}/team-a/1.json"][0].labels["owners"] == "lead: 1"
        assert not adapter.matches(f"{ROOT}/tasks.md") and not adapter.matches("tasks/1.json")

    def test_a_new_task_file_is_seen_through_the_folder(self, tmp_path: Path) -> None:
        _write(tmp_path / ROOT, _task("1"))
        source = Source(str(tmp_path))
        builtin("claude-tasks").load(source, f"{ROOT}/1.json")
        assert ROOT in source.seen  # the folder's signature: a file added changes it


class TestOutsideLists:
    """A list under ~/.claude/tasks/<id>/ is read by the same rules, never through a link."""

    def test_list_folder_names_and_refusals(self, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
        monkeypatch.delenv("CLAUDE_CODE_TASK_LIST_ID", raising=False)
        assert list_folder("abc") == str(tmp_path / "tasks" / "abc")
        assert list_folder("../x") is None and list_folder(".hidden") is None
        assert list_folder(None) is None
        monkeypatch.setenv("CLAUDE_CODE_TASK_LIST_ID", "shared")
        assert list_folder("abc") == str(tmp_path / "tasks" / "shared")

    def test_links_are_not_followed(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
        secret = tmp_path / "secret.json"
        secret.write_bytes(orjson.dumps(_task("9", "completed")))
        folder = tmp_path / "tasks" / "s1"
        _write(folder, _task("1"))
        os.symlink(secret, folder / "9.json")
        unit = read_list(str(folder))
        assert unit is not None and [t.id for t in unit.tasks] == ["1"]
        os.symlink(folder, tmp_path / "tasks" / "s2")
        assert read_list(str(tmp_path / "tasks" / "s2")) is None
        os.mkfifo(folder / "3.json")
        assert [t.id for t in read_list(str(folder)).tasks] == ["1"]  # type: ignore[union-attr]

    def test_a_teams_list_names_its_team(self, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
        _write(tmp_path / "tasks" / "red", _task("1", owner="researcher"))
        (tmp_path / "teams" / "red").mkdir(parents=True)
        (tmp_path / "teams" / "red" / "config.json").write_text("{}")
        unit = read_list(str(tmp_path / "tasks" / "red"))
        assert unit is not None and unit.labels["team"] == "red"
        assert unit.labels["owners"] == "researcher: 1"


@pytest.mark.parametrize(("names", "order"), [
    (["10.json", "2.json", "1.json"], ["1.json", "2.json", "10.json"]),  # number order
    ([".lock", ".highwatermark", "3.json", "1.json"], ["1.json", "3.json"]),  # Claude's own
    (["1.json", ".json", "x.json", "3.json"], ["1.json", "3.json", "x.json"]),  # hidden
    (["-a.json", ".lock", "2.json"], ["2.json", "-a.json"]),  # a name before the dots
    (["01.json", "1.json", "b.json", "a.json"], ["01.json", "1.json", "a.json", "b.json"]),
    (["notes.md", "2.json", "tasks.md"], ["2.json"]),
    ([".lock"], []),
    ([], []),
])  # fmt: skip
def test_task_files_are_named_ids_in_id_order(names: list[str], order: list[str]) -> None:
    """The fast way (every name `<number>.json` once the hidden ones are set aside) and
    the slow one give the same order, whatever order the folder lists them in."""
    assert claude_tasks.task_names(names) == order
    assert claude_tasks.task_names(list(reversed(names))) == order
