"""beads on Dolt: the database's truth read through `bd` (a fake one on PATH, printing
bd's real JSON shapes), the JSONL as the fallback with one line saying why, an absent
JSONL as one clear line, and a repository that cannot choose the program storyd runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import Run, run_storyd_cli
from daemon_harness import DaemonProcess
from format_harness import codes, load_one
from realworld3 import entries, lay_out, need_corpus

from storyd.core.formats import beads_bd, builtin
from storyd.core.formats.base import Source
from storyd.core.model import DONE, Unit

BEADS = ".beads/issues.jsonl"
OLD = 1_767_225_600  # 2026-01-01T00:00:00Z
META = {"database": "dolt", "backend": "dolt", "dolt_mode": "embedded",
        "project_id": "6f2c1e9a-0b1d-4c55-9a8e-2f1f0c1a7d11"}  # fmt: skip

# `bd list --json` prints beads' IssueWithCounts (internal/types/types.go): the issue's
# fields, the counts, the computed `parent`; no `dependencies`
LISTED = [
    {"id": "bd-1", "title": "Set up the schema", "description": "", "status": "closed",
     "priority": 1, "issue_type": "task", "created_at": "2026-01-02T10:00:00Z",
     "updated_at": "2026-01-03T09:00:00Z", "closed_at": "2026-01-03T09:00:00Z",
     "close_reason": "done", "labels": ["db"], "dependency_count": 0, "dependent_count": 1,
     "comment_count": 0},
    {"id": "bd-2", "title": "Write the API", "status": "open", "priority": 2,
     "issue_type": "feature", "created_at": "2026-01-02T11:00:00Z",
     "updated_at": "2026-01-02T11:00:00Z", "dependency_count": 1, "dependent_count": 0,
     "comment_count": 2},
    {"id": "bd-3", "title": "Document it", "status": "open", "priority": 1,
     "issue_type": "task", "created_at": "2026-01-02T12:00:00Z",
     "updated_at": "2026-01-02T12:00:00Z", "dependency_count": 1, "dependent_count": 0,
     "comment_count": 0, "parent": "bd-2"},
]
READY = [dict(LISTED[2]), dict(LISTED[1])]  # `bd ready --json`: bd's own order
# the export, taken before bd-1 was closed: it lags
EXPORTED = [{"id": "bd-1", "title": "Set up the schema", "status": "in_progress",
             "priority": 1, "created_at": "2026-01-02T10:00:00Z"}]  # fmt: skip

FAKE_BD = """#!{python} -IS
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid(),
                          "env": dict(os.environ)}}) + "\\n")
mode = open(os.path.join(here, "mode")).read().strip()
command = next(a for a in sys.argv[1:] if not a.startswith("-"))
if mode == "slow":
    time.sleep(30)
if mode == "fail":
    sys.stderr.write("Error: no beads database found\\nhint: run bd init\\n")
    sys.exit(1)
if mode == "junk":  # bd 0.59.0's `list --json` (steveyegge/beads #2395)
    print("\\u25cb bd-2 \\u25cf P2 Write the API")
    sys.exit(0)
if mode == "huge":
    sys.stdout.write("[" + ",".join(['{{"id": "x"}}'] * 200000) + "]")
    sys.exit(0)
with open(os.path.join(here, command + ".json")) as answer:
    sys.stdout.write(answer.read())
"""


def _fake_bd(folder: Path, mode: str = "ok", listed: list[dict[str, object]] | None = None,
             ready: list[dict[str, object]] | None = None) -> Path:  # fmt: skip
    """A `bd` in `folder` that logs its calls and answers as `mode` says."""
    folder.mkdir(parents=True, exist_ok=True)
    bd = folder / "bd"
    bd.write_text(FAKE_BD.format(python=sys.executable))
    bd.chmod(0o755)
    (folder / "mode").write_text(mode)
    (folder / "list.json").write_text(json.dumps(LISTED if listed is None else listed))
    (folder / "ready.json").write_text(json.dumps(READY if ready is None else ready))
    return bd


def _calls(folder: Path) -> list[dict[str, object]]:
    log = folder / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _workspace(ws: Path, *, meta: object = META, jsonl: list[dict[str, object]] | None = None,
               database: bool = True) -> Path:  # fmt: skip
    """A Dolt-era `.beads/`: metadata.json, the Dolt folder (changed at OLD + 1 h) and,
    given `jsonl`, an export taken at OLD."""
    (ws / ".beads").mkdir(parents=True)
    if meta is not None:
        (ws / ".beads" / "metadata.json").write_text(json.dumps(meta))
    if database:
        manifest = ws / ".beads" / "dolt" / "beads" / ".dolt" / "noms" / "manifest"
        manifest.parent.mkdir(parents=True)
        manifest.write_bytes(b"5:__DOLT__:...")
        os.utime(manifest, (OLD + 3600, OLD + 3600))
        for folder in manifest.parents:  # the folders as old as the export
            if folder == ws / ".beads":
                break
            os.utime(folder, (OLD, OLD))
    if jsonl is not None:
        (ws / BEADS).write_text("".join(json.dumps(n) + "\n" for n in jsonl))
        os.utime(ws / BEADS, (OLD, OLD))
    return ws


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on PATH (no `bd` in it until a test writes one)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return folder


def _load(ws: Path) -> Unit:
    """The issues' unit: the JSONL's, or metadata.json's when the JSONL is absent."""
    relpath = BEADS if (ws / BEADS).exists() else ".beads/metadata.json"
    return load_one(builtin("beads"), ws, relpath)


class TestTheDatabaseThroughBd:
    """With bd on PATH, the database's truth, never the lagging export's."""

    @pytest.mark.slow
    def test_bd_s_issues_and_ready_list_not_the_export(self, tmp_path: Path,
                                                       bin_dir: Path) -> None:  # fmt: skip
        _fake_bd(bin_dir)
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        unit = load_one(builtin("beads"), ws, BEADS)
        assert [(t.id, t.status) for t in unit.tasks] == [
            ("bd-1", "closed"), ("bd-2", "open"), ("bd-3", "open")]
        assert unit.tasks[0].bucket == DONE
        assert unit.resume_point == "task-bd-3"  # bd's ready order, not recomputed
        assert unit.next is not None and unit.next["ready"] == ["bd-3", "bd-2"]
        assert "bd asked" in str(unit.next["why"])
        assert unit.labels["source"] == "bd (the database)"
        assert "export-lags" not in codes(unit) and "export" not in unit.labels

    @pytest.mark.slow
    def test_bd_runs_read_only_in_the_workspace_with_a_stripped_environment(
        self, tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _fake_bd(bin_dir)
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        for name, value in (("BEADS_DOLT_SERVER_MODE", "1"), ("BEADS_DOLT_PASSWORD", "pw"),
                            ("BD_EXPORT_AUTO", "true"), ("BEADS_DB", "/elsewhere"),
                            ("BD_DOLT_AUTO_COMMIT", "on"), ("PYTHONPATH", "/x")):
            monkeypatch.setenv(name, value)
        _load(ws)
        calls = _calls(bin_dir)
        assert [c["argv"] for c in calls] == [
            ["--readonly", "--sandbox", "list", "--json", "--all", "--limit", "0"],
            ["--readonly", "--sandbox", "ready", "--json", "--limit", "0"]]
        for call in calls:
            env = call["env"]
            assert isinstance(env, dict)
            assert call["cwd"] == os.path.realpath(ws)
            assert env["BEADS_DIR"] == os.path.join(os.path.realpath(ws), ".beads")
            assert {k: env[k] for k in ("BD_READONLY", "BD_DOLT_AUTO_COMMIT",
                                        "BD_EXPORT_AUTO", "BD_BACKUP_ENABLED",
                                        "BEADS_DOLT_AUTO_START", "BD_GIT_HOOK")} == {
                "BD_READONLY": "true", "BD_DOLT_AUTO_COMMIT": "off", "BD_EXPORT_AUTO": "false",
                "BD_BACKUP_ENABLED": "false", "BEADS_DOLT_AUTO_START": "0", "BD_GIT_HOOK": "1"}
            for gone in ("BEADS_DOLT_SERVER_MODE", "BEADS_DOLT_PASSWORD", "BEADS_DB",
                         "PYTHONPATH"):
                assert gone not in env

    @pytest.mark.slow
    def test_an_absent_export_is_no_matter_with_bd(self, tmp_path: Path, bin_dir: Path) -> None:
        _fake_bd(bin_dir)
        ws = _workspace(tmp_path / "ws")
        assert builtin("beads").find(Source(str(ws))) == [".beads/metadata.json"]
        [unit] = builtin("beads").load(Source(str(ws)), ".beads/metadata.json")
        assert unit.error is None and len(unit.tasks) == 3

    def test_a_metadata_file_alone_does_not_ask_bd(self, tmp_path: Path, bin_dir: Path) -> None:
        """A clone without the (uncommitted) Dolt folder: bd has nothing to read."""
        _fake_bd(bin_dir)
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED, database=False)
        assert [t.id for t in _load(ws).tasks] == ["bd-1"]
        assert _calls(bin_dir) == []


class TestBdThatDoesNotAnswer:
    """A bd that fails, overruns or prints junk: the JSONL, and one line saying why."""

    @pytest.mark.parametrize(("mode", "said"), [
        ("fail", "exited with 1: Error: no beads database found"),
        ("junk", "printed no JSON (it began '\u25cb bd-2 \u25cf P2 Write the API')"),
    ])  # fmt: skip
    def test_the_export_is_read_and_the_finding_says_why(
        self, tmp_path: Path, bin_dir: Path, mode: str, said: str
    ) -> None:
        _fake_bd(bin_dir, mode)
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        unit = _load(ws)
        assert [(t.id, t.status) for t in unit.tasks] == [("bd-1", "in_progress")]
        [why] = [f for f in unit.findings if f.code == "bd-unreadable"]
        assert said in why.message and "\n" not in why.message
        assert why.severity == "warning"
        assert "export-lags" in codes(unit)  # never current

    @pytest.mark.slow
    def test_a_slow_bd_is_killed_at_the_deadline(
        self, tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(beads_bd, "TIMEOUT", 0.5)
        _fake_bd(bin_dir, "slow")
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        started = time.monotonic()
        unit = _load(ws)
        assert time.monotonic() - started < 5
        [why] = [f for f in unit.findings if f.code == "bd-unreadable"]
        assert "did not answer within 0.5 s" in why.message
        [call] = _calls(bin_dir)
        with pytest.raises(ProcessLookupError):  # killed and reaped: nothing left running
            os.kill(int(call["pid"]), 0)  # type: ignore[call-overload]

    def test_a_huge_answer_is_cut_at_the_bound(
        self, tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(beads_bd, "LIMIT", 1 << 20)
        _fake_bd(bin_dir, "huge")
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        unit = _load(ws)
        [why] = [f for f in unit.findings if f.code == "bd-unreadable"]
        assert "printed more than 1,048,576 bytes" in why.message

    def test_no_export_and_no_answer_is_one_line(self, tmp_path: Path, bin_dir: Path) -> None:
        _fake_bd(bin_dir, "fail")
        unit = _load(_workspace(tmp_path / "ws"))
        assert unit.error == (
            f"{BEADS} is absent and `bd` could not read beads' database .beads/dolt: "
            "no issue can be shown")


class TestWithoutBd:
    """No bd: the JSONL, never reported as current when it lags; absent, one line."""

    def test_an_export_older_than_the_metadata_s_database_lags(
        self, tmp_path: Path, bin_dir: Path
    ) -> None:
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        unit = _load(ws)
        [lag] = [f for f in unit.findings if f.code == "export-lags"]
        assert "2026-01-01T00:00:00Z" in lag.message and "2026-01-01T01:00:00Z" in lag.message
        assert unit.labels["export"] == "lags the database"

    def test_the_database_the_metadata_names_is_the_one_compared(
        self, tmp_path: Path, bin_dir: Path
    ) -> None:
        """SQLite era: `database: beads.db` names the file (relative to `.beads/`)."""
        ws = _workspace(tmp_path / "ws", meta={"database": "custom.db", "backend": "sqlite",
                                               "jsonl_export": "issues.jsonl"},
                        jsonl=EXPORTED, database=False)  # fmt: skip
        db = ws / ".beads" / "custom.db"
        db.write_bytes(b"SQLite format 3\0")
        os.utime(db, (OLD + 60, OLD + 60))
        [lag] = [f for f in _load(ws).findings if f.code == "export-lags"]
        assert lag.evidence == {"exported": "2026-01-01T00:00:00Z",
                                "database": ".beads/custom.db",
                                "changed": "2026-01-01T00:01:00Z"}  # fmt: skip

    @pytest.mark.slow
    def test_an_absent_export_is_one_clear_line_not_no_format(
        self, tmp_path: Path, bin_dir: Path, run_storyd: Run
    ) -> None:
        ws = _workspace(tmp_path / "ws")
        env = dict(os.environ, PATH=str(bin_dir) + os.pathsep + str(Path(sys.executable).parent)
                   + os.pathsep + "/usr/bin:/bin")  # fmt: skip
        done = run_storyd("status", "--direct", cwd=ws, env=env)
        out = done.stdout.decode()
        line = (f"{BEADS} is absent and beads keeps its issues in its database .beads/dolt: "
                f"put `bd` on PATH (storyd reads the database through it) or run "
                f"`bd export -o {BEADS}`")
        assert out.count(line) == 1, out
        assert "no units found" not in out

    def test_a_clone_without_the_database_says_so(self, tmp_path: Path, bin_dir: Path) -> None:
        unit = _load(_workspace(tmp_path / "ws", database=False))
        assert "so is beads' database" in str(unit.error)
        assert unit.tasks == ()

    def test_the_jsonl_era_s_export_name_is_read(self, tmp_path: Path, bin_dir: Path) -> None:
        """Before 2025-11-21 beads exported `.beads/beads.jsonl` (metadata's jsonl_export)."""
        ws = _workspace(tmp_path / "ws", meta={"database": "beads.db",
                                               "jsonl_export": "beads.jsonl"},
                        database=False)  # fmt: skip
        (ws / ".beads" / "beads.jsonl").write_text(json.dumps(EXPORTED[0]) + "\n")
        unit = _load(ws)
        assert unit.error is None and [t.id for t in unit.tasks] == ["bd-1"]
        (ws / ".beads" / "metadata.json").write_text(
            json.dumps({"jsonl_export": "../../secret.jsonl"}))
        assert str(_load(ws).error).startswith(f"{BEADS} is absent")  # never followed

    def test_a_workspace_without_beads_metadata_is_not_beads(self, tmp_path: Path) -> None:
        (tmp_path / ".beads").mkdir()
        (tmp_path / ".beads" / "config.yaml").write_text("issue-prefix: x\n")
        assert builtin("beads").find(Source(str(tmp_path))) == []

    def test_with_an_export_the_metadata_file_holds_no_second_unit(self, tmp_path: Path) -> None:
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        assert builtin("beads").find(Source(str(ws))) == [BEADS, ".beads/metadata.json"]
        assert builtin("beads").load(Source(str(ws)), ".beads/metadata.json") == []


class TestTheRepositoryCannotChooseTheProgram:
    """bd is found in PATH's absolute folders outside the workspace; nothing else runs."""

    EVIL = "#!/bin/sh\ntouch \"$(dirname \"$0\")/RAN\"\necho '[]'\n"

    def _evil(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.EVIL)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    def test_relative_and_empty_path_entries_never_find_the_workspace_s_bd(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        planted = [self._evil(ws / "bd"), self._evil(ws / "bin" / "bd"),
                   self._evil(ws / ".beads" / "bd")]  # fmt: skip
        empty = tmp_path / "empty"
        empty.mkdir()
        monkeypatch.chdir(ws)
        monkeypatch.setenv("PATH", os.pathsep.join(("", ".", "bin", ".beads", str(empty))))
        assert beads_bd.bd_path(str(ws)) is None
        unit = _load(ws)
        assert "export-lags" in codes(unit)  # the JSONL, lagging
        assert not any((p.parent / "RAN").exists() for p in planted)

    def test_a_path_folder_inside_the_workspace_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """direnv's `PATH_add bin`: an absolute folder of the repository's own."""
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        evil = self._evil(ws / "tools" / "bd")
        link_dir = tmp_path / "linked"
        link_dir.mkdir()
        (link_dir / "bd").symlink_to(evil)  # a link from outside into the workspace
        monkeypatch.setenv("PATH", os.pathsep.join((str(ws / "tools"), str(link_dir))))
        assert beads_bd.bd_path(str(ws)) is None
        _load(ws)
        assert not (evil.parent / "RAN").exists()

    def test_metadata_cannot_name_a_program_or_a_path_outside(
        self, tmp_path: Path, bin_dir: Path
    ) -> None:
        outside = tmp_path / "outside.db"
        outside.write_bytes(b"SQLite format 3\0")
        os.utime(outside, (OLD + 7200, OLD + 7200))
        evil = self._evil(tmp_path / "evil" / "bd")
        ws = _workspace(tmp_path / "ws", meta={"database": str(outside), "bd": str(evil),
                                               "dolt_data_dir": "../../outside.db"},
                        jsonl=EXPORTED, database=False)  # fmt: skip
        unit = _load(ws)
        assert not (evil.parent / "RAN").exists()
        assert [f.code for f in unit.findings].count("metadata-unreadable") >= 1
        assert "export-lags" not in codes(unit)  # not compared

    def test_a_remote_dolt_server_is_never_contacted(self, tmp_path: Path, bin_dir: Path) -> None:
        _fake_bd(bin_dir)
        meta = dict(META, dolt_mode="server", dolt_server_host="db.attacker.example")
        ws = _workspace(tmp_path / "ws", meta=meta, jsonl=EXPORTED)
        unit = _load(ws)
        assert _calls(bin_dir) == []
        assert any("db.attacker.example" in f.message for f in unit.findings)

    @pytest.mark.parametrize("kind", ["fifo", "huge", "link-out", "not-json"])
    def test_a_hostile_metadata_file_is_one_finding(
        self, tmp_path: Path, bin_dir: Path, kind: str
    ) -> None:
        ws = _workspace(tmp_path / "ws", meta=None, jsonl=EXPORTED)
        meta = ws / ".beads" / "metadata.json"
        if kind == "fifo":
            os.mkfifo(meta)
        elif kind == "huge":
            meta.write_text(json.dumps({"database": "dolt", "pad": "x" * (1 << 17)}))
        elif kind == "link-out":
            target = tmp_path / "elsewhere.json"
            target.write_text(json.dumps(META))
            meta.symlink_to(target)
        else:
            meta.write_text("{database: dolt")
        unit = _load(ws)
        [bad] = [f for f in unit.findings if f.code == "metadata-unreadable"]
        assert "\n" not in bad.message and "metadata.json" in bad.message
        # the default database is still compared: the export is not reported as current
        assert "export-lags" in codes(unit)


@pytest.mark.slow
def test_the_real_files_through_bd_agree_with_their_export(tmp_path: Path,
                                                           bin_dir: Path) -> None:  # fmt: skip
    """The largest real JSONL, printed by a fake bd as `bd list --json` would (its
    objects without dependencies): the same issues and statuses as reading the file."""
    need_corpus()
    from realworld3 import size

    entry = max(entries("beads"), key=size)
    plain = tmp_path / "plain"
    relpath = lay_out(entry, plain)
    from_file = load_one(builtin("beads"), plain, relpath)
    nodes = [json.loads(line) for line in (plain / relpath).read_text().splitlines()
             if line.strip()]  # fmt: skip
    listed = [{k: v for k, v in n.items() if k != "dependencies"} for n in nodes]
    ready = [{"id": i} for i in (from_file.next or {}).get("ready", [])]  # type: ignore[union-attr]
    _fake_bd(bin_dir, listed=listed, ready=ready)
    ws = _workspace(tmp_path / "ws")
    from_bd = load_one(builtin("beads"), ws, BEADS)
    assert [(t.id, t.status, t.bucket) for t in from_bd.tasks] == [
        (t.id, t.status, t.bucket) for t in from_file.tasks]
    assert from_bd.resume_point == from_file.resume_point
    assert len(from_bd.tasks) > 100


@pytest.mark.slow
def test_the_bd_reader_is_imported_only_when_asked(tmp_path: Path) -> None:
    """A JSONL without beads' database never loads the bd reader (nor subprocess)."""
    ws = tmp_path / "ws"
    (ws / ".beads").mkdir(parents=True)
    (ws / BEADS).write_text(json.dumps(EXPORTED[0]) + "\n")
    code = ("import sys; from storyd.core.formats.beads import ADAPTER; "
            "from storyd.core.formats.base import Source; "
            f"ADAPTER.load(Source({str(ws)!r}), {BEADS!r}); "
            "print(sorted(m for m in ('storyd.core.formats.beads_bd', 'subprocess') "
            "if m in sys.modules))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]", done.stderr


def test_a_read_through_bd_depends_on_the_database_s_root_files(tmp_path: Path,
                                                                bin_dir: Path) -> None:  # fmt: skip
    """The daemon's cache re-checks what a read saw: Dolt's manifest and chunk journal
    (a write appends its new root there) are among them, so a write is never missed."""
    ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
    source = Source(str(ws))
    builtin("beads").load(source, BEADS)
    noms = ".beads/dolt/beads/.dolt/noms"
    assert source.seen[f"{noms}/manifest"] is not None
    assert f"{noms}/{'v' * 32}" in source.seen  # absent here, so None: its arrival counts
    assert source.seen[".beads/metadata.json"] is not None


@pytest.mark.slow
class TestBdIsAskedAgainOnlyWhenItsAnswerCanChange:
    """The daemon re-reads beads on every rescan (its readiness depends on the clock):
    bd starts again only when the database's files change, or a deferral falls due."""

    def test_an_unchanged_database_is_not_asked_twice(self, tmp_path: Path,
                                                      bin_dir: Path) -> None:  # fmt: skip
        _fake_bd(bin_dir)
        ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
        _load(ws)
        _load(ws)
        assert len(_calls(bin_dir)) == 2  # one list, one ready
        manifest = ws / ".beads" / "dolt" / "beads" / ".dolt" / "noms" / "manifest"
        os.utime(manifest, (OLD + 7200, OLD + 7200))  # a write: the root moved
        assert [t.id for t in _load(ws).tasks] == ["bd-1", "bd-2", "bd-3"]
        assert len(_calls(bin_dir)) == 4

    def test_a_deferral_falling_due_asks_again(self, tmp_path: Path, bin_dir: Path) -> None:
        due = 1_900_000_000
        listed = [dict(LISTED[1], defer_until="2030-03-17T17:46:40Z")]  # = due
        _fake_bd(bin_dir, listed=listed, ready=[])
        ws = _workspace(tmp_path / "ws")
        bd = beads_bd.bd_path(str(ws))
        assert bd is not None
        files = ((".beads/metadata.json", 1),)
        for now in (due - 100, due - 1, due + 1):
            beads_bd.answer(bd, str(ws), files, now)
        assert len(_calls(bin_dir)) == 4  # asked at due - 100 and again once due
        beads_bd.answer(bd, str(ws), (*files, ("x", 2)), due + 2)  # other files: asked
        assert len(_calls(bin_dir)) == 6


@pytest.mark.slow
def test_the_daemon_answers_from_bd_as_the_direct_read_does(
    spawn_daemon: Callable[..., DaemonProcess], tmp_path: Path, bin_dir: Path
) -> None:
    """A real daemon (bd started from its worker, in its children's group): the same
    envelope and `next` as --direct, both from bd, not from the lagging export."""
    _fake_bd(bin_dir)
    ws = _workspace(tmp_path / "ws", jsonl=EXPORTED)
    proc = spawn_daemon([ws])
    argv = ("resume", "--state-file", BEADS, "--detail")
    via = run_storyd_cli(*argv, "--timeout", "5000", env=proc.env, cwd=ws)
    direct = run_storyd_cli(*argv, "--direct", env=proc.env, cwd=ws)
    assert via.returncode == direct.returncode == 0, (via.stderr, direct.stderr)
    answers = [json.loads(done.stdout) for done in (via, direct)]
    assert [a["source"] for a in answers] == ["cache", "direct"]  # the daemon's own read
    for detail in answers:
        assert detail["envelope"]["resumePoint"] == "task-bd-3", detail
        assert "bd asked" in detail["next"]["why"]


def test_a_migrated_workspace_s_dolt_folder_beats_a_stale_sqlite_file(
    tmp_path: Path, bin_dir: Path
) -> None:
    """Dolt ignores a relative `database` (it still says beads.db after a migration)."""
    ws = _workspace(tmp_path / "ws", meta={"database": "beads.db", "backend": "dolt"},
                    jsonl=EXPORTED)  # fmt: skip
    (ws / ".beads" / "beads.db").write_bytes(b"SQLite format 3\0")
    os.utime(ws / ".beads" / "beads.db", (OLD - 60, OLD - 60))  # older than the export
    [lag] = [f for f in _load(ws).findings if f.code == "export-lags"]
    assert lag.evidence is not None and lag.evidence["database"] == ".beads/dolt"
