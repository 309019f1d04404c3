"""Issue 20, the command line's rough edges, each through the real `storyd`: did you mean,
a closed pipe, NO_COLOR, the floored percentage, the epic id list, reconcile of a whole
epic, config show's [reconcile], doctor's D-Bus / fast path / PATH lines, and the
`UNREADABLE` lines of status, list and check."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from cli_harness import STORYD, run_in_pty
from epic_state_harness import story_id, task_id, write_epic
from git_harness import GitWorkspace

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def _tasks(story: str, done: int, total: int) -> dict[str, object]:
    return {"tasks": {task_id(story, n): {"status": "DONE" if n <= done else "PENDING"}
                      for n in range(1, total + 1)}}


class TestDidYouMean:
    @pytest.mark.parametrize(("args", "hint"), [
        (("stauts",), "storyd: unknown command 'stauts' (did you mean 'status' or 'stats'?)"),
        (("doctr",), "storyd: unknown command 'doctr' (did you mean 'doctor'?)"),
        (("config", "chek"),
         "storyd config: unknown subcommand 'chek' (did you mean 'check'?)"),
        (("completion", "bsh"), "storyd completion: unknown shell 'bsh' (did you mean 'bash'?)"),
        (("status", "--in-fligt"),
         "storyd status: unknown flag --in-fligt (did you mean --in-flight?)"),
        (("resume", "--story", "s"), "unknown flag --story (did you mean --story-id?)"),
    ])
    def test_a_typo_gets_the_closest_name(self, run_storyd: Run, args: tuple[str, ...],
                                          hint: str) -> None:
        done = run_storyd(*args)
        assert done.returncode == 64
        assert done.stderr.decode().splitlines()[0] == hint
        if len(args) > 1:  # a flag or a subcommand: its command's usage follows
            assert b"usage: " in done.stderr

    @pytest.mark.parametrize("word", ["stauts", "xyzzy"])
    def test_a_mistyped_command_gets_a_few_lines(self, run_storyd: Run, word: str) -> None:
        """As git: the error with the closest names, and where help is; not the usage."""
        done = run_storyd(word)
        assert done.returncode == 64
        assert done.stdout == b""
        lines = done.stderr.decode().splitlines()
        assert 2 <= len(lines) <= 4, lines
        assert lines[-1] == "see 'storyd --help' for the commands"
        assert b"usage: " not in done.stderr

    def test_nothing_close_gets_no_guess(self, run_storyd: Run) -> None:
        done = run_storyd("xyzzy")
        assert done.stderr.decode().splitlines()[0] == "storyd: unknown command 'xyzzy'"


def _buffered(env: dict[str, str]) -> dict[str, str]:
    """`env` without PYTHONUNBUFFERED: stdout buffered, as users have it (unbuffered, a
    closed pipe leaves nothing to flush at exit and the bug does not show)."""
    return {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}


class TestClosedPipe:
    @pytest.mark.slow
    def test_a_reader_that_goes_away_leaves_no_traceback(self, tmp_path: Path,
                                                         isolated_env: dict[str, str]) -> None:
        isolated_env = _buffered(isolated_env)
        write_epic(tmp_path, "0049", {story_id(n): _tasks(story_id(n), 1, 3)
                                      for n in range(1, 2000)})  # > a pipe's 64 KiB
        for command in ("list", "status"):
            proc = subprocess.Popen([STORYD, command, "--direct"], cwd=tmp_path,
                                    env=isolated_env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline()  # one line, then the reader leaves (`| head -1`)
            proc.stdout.close()
            err = proc.stderr.read()
            proc.stderr.close()
            # 141 (128 + SIGPIPE) when the closed pipe is noticed; one large write the
            # kernel cuts short may end without noticing it: either way, nothing printed
            assert proc.wait(30) in (0, 141), err
            assert err == b"", err.decode()

    def test_doctor_into_head(self, isolated_env: dict[str, str]) -> None:
        """The issue's own case: 0.2 printed "Exception ignored ... BrokenPipeError"."""
        done = subprocess.run(["sh", "-c", f"'{STORYD}' doctor | head -1"],
                              env=_buffered(isolated_env), capture_output=True, timeout=60,
                              check=False)
        assert done.stdout.startswith(b"storyd ")
        assert b"BrokenPipeError" not in done.stderr and b"Exception" not in done.stderr


class TestColourAndPercent:
    def _screen(self, ws: Path, env: dict[str, str], **extra: str) -> bytes:
        code, out = run_in_pty([STORYD, "status", "--direct"], env={**env, **extra}, cwd=ws)
        assert code == 0, out
        return out

    @pytest.mark.slow
    def test_an_empty_no_color_keeps_colour(self, tmp_path: Path,
                                            isolated_env: dict[str, str]) -> None:
        write_epic(tmp_path, "0049", {story_id(1): _tasks(story_id(1), 2, 2)})
        env = {k: v for k, v in isolated_env.items() if k != "NO_COLOR"}
        env["TERM"] = "xterm"
        assert b"\x1b[" in self._screen(tmp_path, env)
        assert b"\x1b[" in self._screen(tmp_path, env, NO_COLOR="")  # 0.2: plain
        assert b"\x1b[" not in self._screen(tmp_path, env, NO_COLOR="1")

    def test_the_percentage_is_floored_as_the_progress_label(self, run_storyd: Run,
                                                             tmp_path: Path) -> None:
        write_epic(tmp_path, "0049", {story_id(1): _tasks(story_id(1), 9, 17)})
        done = run_storyd("status", "--direct", cwd=tmp_path)
        (line,) = [x for x in done.stdout.decode().splitlines() if story_id(1) in x]
        assert "  9/17   52%" in line, line  # 0.2: 53%, where the formats say 52%
        assert "[" + "#" * 10 + "-" * 10 + "]" in line


class TestEpicAndReconcile:
    def test_a_long_executable_list_is_counted_and_cut(self, run_storyd: Run,
                                                       tmp_path: Path) -> None:
        stories = {story_id(n): _tasks(story_id(n), 0, 2) for n in range(1, 31)}
        write_epic(tmp_path, "0049", stories)
        done = run_storyd("epic", "--epic-id", "0049", "--direct", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        out = done.stdout.decode()
        assert "executable next: 30 stories, the first 20: story-0049-0001," in out
        assert "  ... and 10 more (`storyd epic --json` lists them all)" in out
        assert max(len(line) for line in out.splitlines()) <= 100
        assert "story-0049-0021," not in out.split("executable next")[1]

    @pytest.mark.slow
    def test_epic_id_alone_reconciles_every_story(self, run_storyd: Run,
                                                  tmp_path: Path) -> None:
        repo = GitWorkspace(tmp_path / "ws").init()
        repo.commit("base", {"README": "hello\n"})
        one, two = story_id(1), story_id(2)
        repo.tasks_commits(one, 1)
        repo.tasks_commits(two, 1)
        repo.record({one: [], two: []}, pending=2)  # both commits name a PENDING task
        done = run_storyd("reconcile", "--epic-id", "49", "--json", cwd=repo.path)
        assert done.returncode == 1, done.stderr  # changes proposed
        text = done.stdout.decode()
        assert task_id(one, 1) in text and task_id(two, 1) in text
        done = run_storyd("reconcile", "--story-id", one, cwd=repo.path)
        assert done.returncode == 64
        assert done.stderr.decode().startswith("storyd reconcile: --story-id needs --epic-id")


class TestConfigShow:
    def test_reconcile_is_shown(self, run_storyd: Run, tmp_path: Path) -> None:
        path = tmp_path / "c.toml"
        path.write_text('[reconcile]\nauto = ["unrecorded"]\n', encoding="utf-8")
        done = run_storyd("config", "show", "--config", str(path))
        assert done.returncode == 0, done.stderr
        assert '\n[reconcile]\nauto = ["unrecorded"]\n' in done.stdout.decode()
        again = tmp_path / "again.toml"
        again.write_bytes(done.stdout)
        shown = run_storyd("config", "show", "--json", "--config", str(again))
        assert orjson.loads(shown.stdout)["reconcile"] == {"auto": ["unrecorded"]}


    def test_config_check_names_a_bad_hook_filter(self, run_storyd: Run, tmp_path: Path) -> None:
        path = tmp_path / "c.toml"
        path.write_text("[notify]\nhook_severities = ['eror']\n", encoding="utf-8")
        done = run_storyd("config", "check", "--config", str(path))
        assert done.returncode == 78
        assert done.stdout.decode() == (
            f"{path}:2: notify.hook_severities[0]: unknown value 'eror' "
            "(did you mean 'error'?)\n")


@pytest.mark.slow
class TestDoctor:
    def test_desktop_without_a_session_bus_fast_path_and_path(
            self, tmp_path: Path, isolated_env: dict[str, str]) -> None:
        fake = tmp_path / "fakebin"
        fake.mkdir()
        notify = fake / "notify-send"
        notify.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        notify.chmod(0o755)
        env = {k: v for k, v in isolated_env.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
        env["PATH"] = str(fake)  # no nc, no socat, no storyd
        done = subprocess.run([STORYD, "doctor"], env=env, capture_output=True, timeout=60,
                              check=False)
        report = done.stdout.decode()
        runtime = env["XDG_RUNTIME_DIR"]
        assert (f"warn desktop: notify-send at {notify}, but no D-Bus session bus "
                f"(DBUS_SESSION_BUS_ADDRESS unset, no socket at {runtime}/bus)") in report
        assert ("warn fast path: neither nc nor socat is on PATH: storyd-resume always "
                "starts Python") in report
        assert f"warn path: storyd is not on PATH (this one is {STORYD})" in report

        bus = Path(runtime) / "bus"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(bus))
        try:
            env["PATH"] = f"{fake}{os.pathsep}{Path(STORYD).parent}{os.pathsep}/usr/bin:/bin"
            done = subprocess.run([STORYD, "doctor"], env=env, capture_output=True,
                                  timeout=60, check=False)
        finally:
            server.close()
        report = done.stdout.decode()
        assert f"ok   desktop: notify-send at {notify}, session bus {bus}" in report
        assert f"ok   path: storyd on PATH at {STORYD}" in report


# -- unreadable state files (issue 20 item 1, the display) ----------------------------------

BROKEN = {
    "workspace": "/w/a",
    "stateFile": "plans/epic-0049/execution-state.json",
    "format": "epic",
    "error": "plans/epic-0049/execution-state.json: invalid JSON at line 3, column 5: "
             "trailing comma",
    "since": "2026-11-25T01:00:00Z",
    "units": 0,
}
SERVING = {**BROKEN, "workspace": "/w/b", "units": 2}


@pytest.fixture
def answering(tmp_path: Path) -> Iterator[Path]:
    """A socket answering `list` as the daemon will once it reports unreadable files (the
    daemon's side is the lead's part of item 1): no units, two unreadable files."""
    path = tmp_path / "fake.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, conn.makefile("rb") as lines:
                for raw in lines:
                    op = orjson.loads(raw)["op"]
                    body = ({"ok": True, "units": [], "clock": "x:1",
                             "unreadable": [BROKEN, SERVING]}
                            if op == "list" else {"ok": False, "error": {"message": op}})
                    conn.sendall(orjson.dumps(body) + b"\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join(5)
    server.close()


@pytest.mark.slow
class TestUnreadable:
    def test_status_list_and_check_name_the_file(self, run_storyd: Run,
                                                 answering: Path) -> None:
        sock = ["--socket", str(answering)]
        line_a = f"UNREADABLE /w/a/{BROKEN['stateFile']}: {BROKEN['error']}"
        line_b = (f"UNREADABLE /w/b/{BROKEN['stateFile']}: {BROKEN['error']} "
                  "(serving 2 last good units since 2026-11-25T01:00:00Z)")

        status = run_storyd("status", *sock)
        assert (status.returncode, status.stdout.decode()) == (0, f"{line_a}\n{line_b}\n")
        shown = run_storyd("status", "--json", *sock)
        assert orjson.loads(shown.stdout)["unreadable"] == [BROKEN, SERVING]

        listed = run_storyd("list", *sock)
        assert (listed.returncode, listed.stdout) == (0, b"")
        assert listed.stderr.decode() == f"{line_a}\n{line_b}\n"

        check = run_storyd("check", *sock)
        assert check.returncode == 1  # 0.2: "0 units, 0 problems", exit 0
        assert check.stdout.decode() == (
            f"{line_a}\n{line_b}\n0 units, 2 problems (2 unreadable state files)\n")

