"""Claude Code's committed task lists beyond one file: the list's own `tasks.md` checklist
(a second ledger), git's evidence from commit messages (`(Task 10)`, a subject's `F02`
key), and the ready view (`ready`, `blocked` with what each waits for), on the real
files (realworld3, read at run time) and on fixtures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest
from cli_harness import Run
from format_harness import codes
from git_harness import GitRepo
from realworld3 import CORPUS, entries, gitlog, need_corpus

from storyd.core.formats import builtin
from storyd.core.formats.base import Source
from storyd.core.formats.claude_checklist import checked
from storyd.detectors.mentions import claims_done, named_ids, subject_keys

ROOT = ".claude/tasks"


def _real(repo: str, commit: str) -> dict[str, bytes]:
    """One committed list of the corpus: file name -> bytes (task files and tasks.md)."""
    need_corpus()
    found = {}
    for path in sorted((CORPUS / "claude-tasks").glob(f"{repo}@{commit}*")):
        found[path.name.rsplit("__", 1)[1]] = path.read_bytes()
    assert found, (repo, commit)
    return found


def _lay_out(files: dict[str, bytes], ws: Path) -> None:
    (ws / ROOT).mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (ws / ROOT / name).write_bytes(data)


def _unit(ws: Path) -> object:
    [unit] = builtin("claude-tasks").load(Source(str(ws)), f"{ROOT}/1.json")
    return unit


def _task(ident: str, status: str = "pending", blocked_by: tuple[str, ...] = (),
          subject: str = "") -> bytes:
    return orjson.dumps({"id": ident, "subject": subject or f"task {ident}", "status": status,
                         "blocks": [], "blockedBy": list(blocked_by)})


class TestChecklist:
    """`.claude/tasks/tasks.md` beside the JSON: where they disagree, a finding naming
    both files and saying which Claude Code trusts."""

    @pytest.mark.parametrize("commit", ["d132c16e", "fe43505e"])
    def test_haystack_the_checklist_against_the_json(self, tmp_path: Path, commit: str) -> None:
        files = _real("andres-monge__haystack", commit)
        _lay_out(files, tmp_path)
        boxes = checked(files["tasks.md"].decode())
        assert sorted(boxes, key=int) == [str(n) for n in range(1, 12)]
        done = {n[:-5]: json.loads(d)["status"] == "completed"
                for n, d in files.items() if n.endswith(".json")}
        expected = {i for i in done if boxes[i] != done[i]}
        unit = _unit(tmp_path)
        found = {f.task: f for f in unit.findings  # type: ignore[attr-defined]
                 if f.code == "checklist-disagrees"}
        assert set(found) == expected and expected  # the corpus's drift, as the files say
        one = found[min(expected, key=int)]
        assert f"{ROOT}/tasks.md" in one.message and f"{ROOT}/{one.task}.json" in one.message
        assert "trust the JSON" in one.message and one.severity == "warning"
        assert one.evidence["checklist"] == f"{ROOT}/tasks.md"

    def test_the_later_version_drifted_further(self, tmp_path: Path) -> None:
        """CONVENTIONS.md: the checklist ticks #1-#11; the JSON says `done` (a word Claude
        Code does not write) for #1, #5, #11 and `pending` for the rest: all 11 disagree."""
        _lay_out(_real("andres-monge__haystack", "fe43505e"), tmp_path)
        unit = _unit(tmp_path)
        found = {f.task: f.message for f in unit.findings  # type: ignore[attr-defined]
                 if f.code == "checklist-disagrees"}
        assert sorted(found, key=int) == [str(n) for n in range(1, 12)]
        assert [i for i, m in found.items() if "not a status Claude Code writes" in m] == [
            "1", "5", "11"]

    def test_agreeing_ledgers_say_nothing_and_an_unticked_done_task_is_named(
            self, tmp_path: Path) -> None:
        files = {"1.json": _task("1", "completed"), "2.json": _task("2", blocked_by=("1",)),
                 "tasks.md": b"- [x] **#1 One**\n- [ ] **#2 Two**\n- [ ] #9 not a task file\n"}
        _lay_out(files, tmp_path)
        assert "checklist-disagrees" not in codes(_unit(tmp_path))  # type: ignore[arg-type]
        (tmp_path / ROOT / "tasks.md").write_bytes(b"* [ ] #1 One\n- [ ] #2 Two\n")
        [one] = [f for f in _unit(tmp_path).findings  # type: ignore[attr-defined]
                 if f.code == "checklist-disagrees"]
        assert one.task == "1" and "unchecked" in one.message

    def test_the_checklist_is_a_dependency_of_the_unit(self, tmp_path: Path) -> None:
        _lay_out({"1.json": _task("1"), "tasks.md": b"- [ ] #1 One\n"}, tmp_path)
        source = Source(str(tmp_path))
        builtin("claude-tasks").load(source, f"{ROOT}/1.json")
        assert source.seen[f"{ROOT}/tasks.md"] is not None

    def test_a_linked_checklist_is_not_read(self, tmp_path: Path) -> None:
        outside = tmp_path / "outside.md"
        outside.write_bytes(b"- [x] #1 One\n")
        _lay_out({"1.json": _task("1")}, tmp_path / "ws")
        (tmp_path / "ws" / ROOT / "tasks.md").symlink_to(outside)
        assert "checklist-disagrees" not in codes(_unit(tmp_path / "ws"))  # type: ignore[arg-type]


class TestGitEvidence:
    """task-named reads Claude Code's lists: `(Task 10)` and a subject's key (`F02`)."""

    def test_named_ids_on_the_corpus_subjects(self) -> None:
        need_corpus()
        [entry] = [e for e in entries("claude-tasks")
                   if e["repo"] == "andres-monge/haystack" and e["path"] == f"{ROOT}/1.json"
                   and str(e["commit"]).startswith("fe43505e")]
        known = {str(n) for n in range(1, 12)}
        named, claimed = set(), set()
        for _sha, subject, body in gitlog(entry):
            ids = named_ids("claude-tasks", f"{subject}\n{body}", known)
            named |= ids
            if claims_done(f"{subject}\n{body}"):
                claimed |= ids
        # `(Task #1)` (a merge's body), `(Task 2)` ... `(Task 10)`: every task the checklist
        # ticked but the last (#11, verification); `Type definitions (Task 2)` claims nothing
        assert named == {str(n) for n in range(1, 11)}
        assert claimed == {"4", "6", "7", "8", "9", "10"}
        assert named_ids("claude-tasks", "Merge pull request #1 from x/feat", known) == set()

    def test_a_subjects_key(self, tmp_path: Path) -> None:
        files = _real("FabianSperrle__time-tracker", "4ae62f12")
        _lay_out(files, tmp_path)
        unit = _unit(tmp_path)
        keys = subject_keys(unit.tasks)  # type: ignore[attr-defined]
        assert keys["F02"] == "2" and keys["F16"] == "16" and len(keys) == 16
        [(_sha, subject, _body)] = [c for c in gitlog(
            next(e for e in entries("claude-tasks") if e["repo"] == "FabianSperrle/time-tracker"))
            if "Welle 2" in c[1]]
        assert named_ids("claude-tasks", subject, {"2", "5", "16", "3"}, keys) == {
            "2", "5", "16"}
        assert named_ids("claude-tasks", "F99 and F020 and XF02", {"2"}, keys) == set()

    @pytest.mark.slow
    def test_resume_detail_in_a_real_repository(self, tmp_path: Path, run_storyd: Run) -> None:
        """haystack's list as committed at d132c16e, then its own later commit subjects."""
        files = _real("andres-monge__haystack", "d132c16e")
        repo = GitRepo(tmp_path / "ws").init()
        repo.commit("Tasks for Phase A1 created",
                    {f"{ROOT}/{n}": d.decode() for n, d in files.items()})
        [entry] = [e for e in entries("claude-tasks")
                   if e["repo"] == "andres-monge/haystack" and e["path"] == f"{ROOT}/1.json"
                   and str(e["commit"]).startswith("d132c16e")]
        later = []
        for sha, subject, _body in gitlog(entry):
            if sha.startswith("d132c16e"):
                break
            later.append(subject)
        shas = {}
        for index, subject in enumerate(reversed(later)):
            shas[subject] = repo.commit(subject, {f"src/{index}.txt": subject + "\n"})
        done = run_storyd("resume", "--state-file", f"{ROOT}/1.json", "--detail", "--direct",
                          cwd=repo.path)
        assert done.returncode == 0, done.stderr
        found = [f for f in json.loads(done.stdout)["findings"] if f["detector"] == "task-named"]
        by_code: dict[str, set[str]] = {}
        for f in found:
            ids = f["evidence"]["tasks"].split(",") if "tasks" in f["evidence"] else [f["task"]]
            by_code.setdefault(f["code"], set()).update(ids)
        assert by_code == {"claimed-in-commit": {"4", "6", "7", "8", "9", "10"},
                           "named-in-commit": {"2", "3", "5"}}  # 11 was never committed for
        [task10] = [f for f in found if f["task"] == "10"]
        assert task10["evidence"]["commit"] == shas[
            "feat(examples): add basic-edit example script (Task 10)"]


class TestReadyView:
    """The ready view the other dependency formats give (Backlog.md, Task Master, beads):
    `ready` in the labels, `ready`, `inProgress` and `blocked` (with `waitingFor`) in next."""

    def test_fixture(self, tmp_path: Path) -> None:
        _lay_out({"1.json": _task("1", "completed"), "2.json": _task("2", blocked_by=("1",)),
                  "3.json": _task("3", blocked_by=("2",)),
                  "4.json": _task("4", blocked_by=("2", "3", "gone")),
                  "5.json": _task("5")}, tmp_path)
        unit = _unit(tmp_path)
        assert unit.labels["ready"] == "2"  # type: ignore[attr-defined]
        assert unit.next["ready"] == ["2", "5"]  # type: ignore[attr-defined]
        assert unit.next["blocked"] == [  # type: ignore[attr-defined]
            {"id": "3", "waitingFor": ["2"]}, {"id": "4", "waitingFor": ["2", "3"]}]
        assert unit.labels["waiting"] == "3 on 2; 4 on 2, 3"  # type: ignore[attr-defined]

    def test_the_real_lists(self, tmp_path: Path) -> None:
        need_corpus()
        lists: dict[str, dict[str, bytes]] = {}
        for path in sorted((CORPUS / "claude-tasks").glob("*.json")):
            key = path.name.rsplit("@", 1)[0]
            lists.setdefault(key, {})[path.name.rsplit("__", 1)[1]] = path.read_bytes()
        for key, files in lists.items():
            ws = tmp_path / key
            _lay_out(files, ws)
            nodes = {n[:-5]: json.loads(d) for n, d in files.items()}
            status = {i: n["status"] for i, n in nodes.items()}
            waits = {i: [b for b in n["blockedBy"] if status.get(b, "completed") != "completed"]
                     for i, n in nodes.items() if n["status"] != "completed"}
            ready = sorted((i for i, n in nodes.items()
                            if n["status"] == "pending" and not waits[i]), key=int)
            unit = _unit(ws)
            assert unit.labels["ready"] == str(len(ready)), key  # type: ignore[attr-defined]
            if unit.next is not None:  # type: ignore[attr-defined]
                assert unit.next["ready"] == ready[:20], key  # type: ignore[attr-defined]
                blocked = [{"id": i, "waitingFor": w} for i, w in
                           sorted(waits.items(), key=lambda iw: int(iw[0])) if w][:20]
                assert unit.next["blocked"] == blocked, key  # type: ignore[attr-defined]

    @pytest.mark.slow
    def test_through_resume_detail(self, tmp_path: Path, run_storyd: Run) -> None:
        """The view travels as the other formats' does: `next` in `storyd resume --detail`."""
        repo = GitRepo(tmp_path / "ws").init()
        repo.commit("tasks", {f"{ROOT}/1.json": _task("1", "in_progress").decode(),
                              f"{ROOT}/2.json": _task("2", blocked_by=("1",)).decode(),
                              f"{ROOT}/3.json": _task("3").decode()})
        done = run_storyd("resume", "--state-file", f"{ROOT}/1.json", "--detail", "--direct",
                          cwd=repo.path)
        assert done.returncode == 0, done.stderr
        nxt = json.loads(done.stdout)["next"]
        assert (nxt["task"], nxt["ready"], nxt["inProgress"]) == ("1", ["3"], ["1"])
        assert nxt["blocked"] == [{"id": "2", "waitingFor": ["1"]}]


class TestFolderOnItsWay:
    """The list folder is opened from the workspace one folder at a time without following
    a link; a link on the way goes to containment's whole rule, as before."""

    def test_a_folder_linked_out_of_the_workspace_is_refused(self, tmp_path: Path) -> None:
        from storyd.core.containment import Refused

        outside = tmp_path / "outside"
        _lay_out({"1.json": _task("1")}, outside)
        (tmp_path / "ws" / ".claude").mkdir(parents=True)
        (tmp_path / "ws" / ROOT).symlink_to(outside / ROOT)
        with pytest.raises(Refused, match="outside the workspace"):
            builtin("claude-tasks").load(Source(str(tmp_path / "ws")), f"{ROOT}/1.json")

    def test_a_link_inside_the_workspace_is_read(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        _lay_out({"1.json": _task("1"), "2.json": _task("2")}, ws / "config")
        (ws / ".claude").symlink_to(ws / "config" / ".claude")
        source = Source(str(ws))
        [unit] = builtin("claude-tasks").load(source, f"{ROOT}/1.json")
        assert [t.id for t in unit.tasks] == ["1", "2"]  # type: ignore[attr-defined]
        assert source.seen[ROOT] is not None

    def test_the_folder_is_a_dependency_and_a_missing_one_answers_nothing(
            self, tmp_path: Path) -> None:
        _lay_out({"1.json": _task("1")}, tmp_path)
        source = Source(str(tmp_path))
        builtin("claude-tasks").load(source, f"{ROOT}/1.json")
        folder = os.stat(tmp_path / ROOT)
        assert source.seen[ROOT] == (folder.st_dev, folder.st_ino, folder.st_size,
                                     folder.st_mtime_ns, folder.st_ctime_ns)
        gone = Source(str(tmp_path / "nothing"))
        assert builtin("claude-tasks").load(gone, f"{ROOT}/1.json") == []
        assert gone.seen[ROOT] is None
