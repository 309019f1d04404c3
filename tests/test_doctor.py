"""`storyd doctor` as a process: real git repositories, a real shallow clone, a real socket."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from epic_state_harness import write_epic

from storyd import __version__

Run = Callable[..., subprocess.CompletedProcess[bytes]]
REPO = Path(__file__).resolve().parent.parent


def git(cwd: Path, *args: str) -> str:
    """Run git with a fixed identity and no user configuration."""
    env = {
        **os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git workspace with an epic state file and two commits."""
    path = tmp_path / "work"
    path.mkdir()
    git(path, "-c", "init.defaultBranch=main", "init", "-q")
    write_epic(path, "0001", tasks={"story-0001-0001": {"T1": {"status": "pending"}}})
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    (path / "README").write_text("two\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "second")
    return path


@pytest.fixture
def shallow(repo: Path, tmp_path: Path) -> Path:
    """A --depth 1 clone of `repo`."""
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", "shallow")
    return tmp_path / "shallow"


def lines(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    """stdout lines of a doctor run that did not crash."""
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    return done.stdout.decode().splitlines()


def find(report: list[str], level: str, *words: str) -> str:
    """The first line at `level` containing every word; fails naming the report."""
    for line in report:
        if line.startswith(f"{level} ") and all(w in line for w in words):
            return line
    pytest.fail(f"no {level!r} line with {words} in:\n" + "\n".join(report))


class TestWithoutDaemon:
    """With no daemon: the socket, inotify, each workspace and the desktop are reported."""

    def test_screen(self, run_storyd: Run, repo: Path, shallow: Path) -> None:
        """Git, shallow clone and state-file lines for each workspace; exit 0 with no fail."""
        done = run_storyd("doctor", "--workspace", str(repo), "--workspace", str(shallow))
        report = lines(done)
        assert done.returncode == 0, "\n".join(report)
        assert report[0].startswith(f"storyd {__version__}:")
        find(report, "warn", "socket:", "no daemon answers", "no socket")
        find(report, "ok", "inotify:", "max_user_watches", "storyd would watch about")
        find(report, "ok", "inotify:", "max_user_instances")
        find(report, "ok", f"workspace {repo}:", "git repository")
        find(report, "ok", f"workspace {repo}:", "full history")
        find(report, "ok", f"workspace {repo}:", "state files:", "epic 1")
        find(report, "warn", f"workspace {shallow}:", "shallow clone", "--unshallow")
        find(report, "ok", f"workspace {shallow}:", "epic 1")
        assert any(line.split(" ", 1)[1].startswith("desktop:") for line in report)
        assert report[-1].endswith(" 0 fail")

    def test_not_git_and_missing(self, run_storyd: Run, tmp_path: Path) -> None:
        """A plain directory warns (no git findings); a missing one fails, exit 1."""
        plain = tmp_path / "plain"
        plain.mkdir()
        gone = tmp_path / "gone"
        done = run_storyd("doctor", "--workspace", str(plain), "--workspace", str(gone))
        report = lines(done)
        assert done.returncode == 1
        find(report, "warn", f"workspace {plain}:", "not a git repository")
        find(report, "warn", f"workspace {plain}:", "no state files")
        find(report, "fail", f"workspace {tmp_path / 'gone'}:", "not a directory")

    def test_workspaces_from_config(self, run_storyd: Run, repo: Path,
                                    isolated_env: dict[str, str]) -> None:
        """Without --workspace, the configuration's workspaces are checked."""
        folder = Path(isolated_env["XDG_CONFIG_HOME"]) / "storyd"
        folder.mkdir()
        (folder / "config.toml").write_text(f'workspaces = ["{repo}"]\n')
        report = lines(run_storyd("doctor"))
        find(report, "ok", "config:", str(folder / "config.toml"))
        find(report, "ok", f"workspace {repo}:", "git repository")

    def test_bad_config_fails(self, run_storyd: Run, isolated_env: dict[str, str]) -> None:
        """A broken configuration file is a fail line with its problem, exit 1."""
        folder = Path(isolated_env["XDG_CONFIG_HOME"]) / "storyd"
        folder.mkdir()
        (folder / "config.toml").write_text("stalenes = 'git'\n")
        done = run_storyd("doctor")
        assert done.returncode == 1
        find(lines(done), "fail", "config:", "config.toml:1: stalenes: unknown key")

    def test_usage(self, run_storyd: Run) -> None:
        """A positional argument is a usage error."""
        done = run_storyd("doctor", "extra")
        assert done.returncode == 64
        assert b"usage: storyd doctor" in done.stderr


class FakeDaemon(threading.Thread):
    """A real NDJSON server on a Unix socket answering ping and stats, for one connection."""

    def __init__(self, path: str, stats: dict[str, object]) -> None:
        super().__init__(name="fake-storyd")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(1)
        self.sock.settimeout(60)
        self.stats = stats
        self.ops: list[str] = []

    def run(self) -> None:
        conn, _ = self.sock.accept()
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                op = json.loads(line)["op"]
                self.ops.append(op)
                if op == "ping":
                    answer: dict[str, object] = {"ok": True, "version": __version__, "pid": 4242}
                else:
                    answer = {"ok": True, **self.stats}
                stream.write(json.dumps(answer).encode() + b"\n")
                stream.flush()
        self.sock.close()


@pytest.fixture
def fake_daemon(tmp_path: Path, repo: Path) -> Iterator[tuple[str, FakeDaemon]]:
    path = str(tmp_path / "d.sock")
    server = FakeDaemon(path, {"watchedDirs": 7, "workspaces": [str(repo)]})
    server.start()
    yield path, server
    server.join(timeout=60)


class TestWithDaemon:
    """With a daemon answering: its version, pid, watched directories and workspaces."""

    def test_screen(self, run_storyd: Run, repo: Path,
                    fake_daemon: tuple[str, FakeDaemon]) -> None:
        """ping and stats are asked; the daemon's workspace list is used when none is given."""
        path, server = fake_daemon
        done = run_storyd("doctor", "--socket", path)
        report = lines(done)
        server.join(timeout=60)
        assert server.ops == ["ping", "stats"]
        find(report, "ok", "socket:", path, f"daemon {__version__} answers (pid 4242)")
        find(report, "ok", "inotify:", "the daemon watches 7 directories")
        find(report, "ok", f"workspace {repo}:", "git repository")


class TestOtherPackagesNamedLikeItsFolders:
    """storyd's one import name is `storyd`: packages called `daemon` or `detectors` (the
    python-daemon distribution installs a `daemon`) first on the path change nothing."""

    def test_storyd_runs_beside_them(self, run_storyd: Run, tmp_path: Path, repo: Path,
                                     isolated_env: dict[str, str]) -> None:
        fakes = tmp_path / "fake"
        for name in ("daemon", "detectors"):
            (fakes / name).mkdir(parents=True)
            (fakes / name / "__init__.py").write_text('raise ImportError("not storyd")\n')
        env = {**isolated_env, "PYTHONPATH": str(fakes)}
        done = run_storyd("doctor", "--workspace", str(repo), env=env)
        report = lines(done)
        assert done.returncode == 0, "\n".join(report)
        assert not [line for line in report if "imports:" in line]
        find(report, "ok", f"workspace {repo}:", "state files:", "epic 1")
        status = run_storyd("status", "--direct", "--workspace", str(repo), env=env)
        assert status.returncode == 0, status.stderr
        assert b"story-" in status.stdout
