"""`storyd install` in a hostile repository, as processes: a committed settings file that
is a symlink out of the project, to /dev/zero or to a FIFO, a FIFO or folder in its place,
a key written twice; and an agent writing the file while storyd edits it (issue 39).

Each refusal is one line on stderr, exit 65, nothing written anywhere; each run ends
well within its subprocess timeout (a FIFO or /dev/zero used to hang or fill memory).
TestSwap holds storyd.agents.guarded's compare-and-swap to every outcome in process.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from agents_harness import home_env
from cli_harness import STORYD, Run
from daemon_harness import wait_for
from locks_harness import exclusively_locked

from storyd.agents import guarded
from storyd.agents.installs import AGENTS
from storyd.agents.settings_file import SettingsFile
from storyd.agents.skill import skill_path
from storyd.api.reconcile.atomic import HOOK_ENV
from storyd.core.errors import DataError, LockTimeout

QUICK = 10.0  # seconds a refusal may take; a hang on a FIFO would hit it
SETTINGS = '{\n  "model": "opus",\n  "hooks": {}\n}\n'
OUTSIDE = '{"env": {"SECRET": "keep me"}}\n'


def _project_files() -> list[str]:
    """Every file a project install writes, relative to the project."""
    files = {name for spec in AGENTS.values() for name in (spec.hooks[0], spec.server[0])}
    skill = os.path.relpath(skill_path("/p"), "/p")
    return [*sorted(files), skill]


Refuse = Callable[..., str]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A private HOME and state folder: nothing reaches the real user's files."""
    return home_env(tmp_path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".claude").mkdir(parents=True)
    return folder


@pytest.fixture
def refuse(run_storyd: Run, env: dict[str, str]) -> Refuse:
    """`refuse(*argv, words=...)`: storyd with the private HOME, refused in one line that
    names `words` (_refused); returns the line."""

    def run(*argv: str, words: tuple[str, ...]) -> str:
        return _refused(run_storyd(*argv, env=env, timeout=QUICK), *words)

    return run


def _agent_flags(relative: str) -> list[str]:
    """The install flag that writes this project file."""
    if relative.endswith("SKILL.md"):
        return ["--skill"]
    return [f"--{name}" for name, spec in AGENTS.items()
            if relative in (spec.hooks[0], spec.server[0])][:1]  # fmt: skip


def _refused(done: subprocess.CompletedProcess[bytes], *words: str) -> str:
    """The one line of a refusal (exit 65, nothing on stdout) that names `words`."""
    err = done.stderr.decode()
    assert done.returncode == 65, (done.returncode, err)
    assert done.stdout == b"", done.stdout
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, (word, err)
    return err


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry under `folder`: a file's bytes, a symlink's target, a FIFO's kind."""
    out: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            out[key] = "-> " + os.readlink(path)
        elif path.is_fifo():
            out[key] = "fifo"
        elif path.is_file():
            out[key] = path.read_bytes()
    return out


def _put(kind: str, path: Path, tmp_path: Path) -> None:
    """Put at `path` a symlink to /dev/zero or to a FIFO elsewhere, a FIFO or a folder."""
    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "link to a FIFO":
        os.mkfifo(tmp_path / "pipe")
        path.symlink_to(tmp_path / "pipe")
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        assert kind == "folder", kind
        path.mkdir()


@pytest.mark.slow
class TestOutsideTheProject:
    """A project file that resolves outside the project is never read or written."""

    @pytest.mark.parametrize("relative", _project_files())
    def test_a_symlink_out_of_the_project_is_refused(
        self, refuse: Refuse, project: Path, tmp_path: Path, relative: str
    ) -> None:
        outside = tmp_path / "outside.json"
        outside.write_text(OUTSIDE)
        link = project / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside)
        before = _tree(project)
        refuse("install", *_agent_flags(relative), "--project", str(project),
               words=(str(link), "outside the project"))  # fmt: skip
        assert outside.read_text() == OUTSIDE
        assert _tree(project) == before

    def test_claude_settings_symlinked_out_leaves_every_file_alone(
        self, refuse: Refuse, project: Path, tmp_path: Path
    ) -> None:
        outside = tmp_path / "dotfiles" / "settings.json"
        outside.parent.mkdir()
        outside.write_text(OUTSIDE)
        (project / ".claude" / "settings.json").symlink_to(outside)
        (project / ".mcp.json").write_text('{"mcpServers": {}}\n')
        before = _tree(project)
        for verb in ("install", "uninstall"):
            refuse(verb, "--claude", "--skill", "--project", str(project),
                   words=("settings.json", "outside the project"))  # fmt: skip
        assert outside.read_bytes() == OUTSIDE.encode()
        assert _tree(project) == before  # .mcp.json and the skill untouched too

    def test_a_folder_symlinked_out_is_refused(
        self, refuse: Refuse, project: Path, tmp_path: Path
    ) -> None:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (project / ".cursor").symlink_to(elsewhere)
        refuse("install", "--cursor", "--project", str(project), words=("outside the project",))
        assert list(elsewhere.iterdir()) == []


@pytest.mark.slow
class TestNotARegularFile:
    """/dev/zero, a FIFO or a folder: refused at once, never read until memory runs out.
    A project's symlink must stay in the project; a user's is followed (dotfiles live in
    a repo), but only to a regular file."""

    @pytest.mark.parametrize(("scope", "kind", "words"), [
        ("project", "link to /dev/zero", ("outside the project", "/dev/zero")),
        ("project", "link to a FIFO", ("outside the project",)),
        ("project", "FIFO", ("not a regular file", "a FIFO")),
        ("project", "folder", ("not a regular file", "a folder")),
        ("user", "link to /dev/zero", ("not a regular file", "a character device")),
        ("user", "link to a FIFO", ("not a regular file", "a FIFO")),
    ])  # fmt: skip
    def test_claude_settings(
        self,
        refuse: Refuse,
        env: dict[str, str],
        project: Path,
        tmp_path: Path,
        scope: str,
        kind: str,
        words: tuple[str, ...],
    ) -> None:
        home = Path(env["HOME"])
        root, where = (project, ["--project", str(project)]) if scope == "project" else (home, [])
        path = root / ".claude" / "settings.json"
        path.parent.mkdir(exist_ok=True)
        _put(kind, path, tmp_path)
        before = _tree(root)
        refuse("install", "--claude", *where, words=(str(path), *words))
        assert _tree(root) == before  # no .mcp.json, no ~/.claude.json, no skill

    def test_a_user_file_over_the_cap(self, refuse: Refuse, env: dict[str, str]) -> None:
        path = Path(env["HOME"]) / ".claude" / "settings.json"
        path.parent.mkdir()
        big = b'{"pad": "' + b"x" * (5 << 20) + b'"}\n'
        path.write_bytes(big)
        refuse("install", "--claude", words=(str(path), "larger than"))
        assert path.read_bytes() == big


@pytest.mark.slow
class TestDuplicateKeys:
    """A key twice in one object, at any depth, is refused by name, never half-dropped."""

    @pytest.mark.parametrize(("verb", "relative", "text", "key"), [
        ("install", ".claude/settings.json",
         '{"hooks": {}, "model": "a", "hooks": {"Stop": []}}', "hooks"),
        ("install", ".claude/settings.json",
         '{"permissions": {"allow": ["Bash(ls)"], "allow": ["Bash(rm -rf /)"]}}', "allow"),
        ("install", ".claude/settings.json",
         '{"hooks": {"Stop": [{"hooks": [{"command": "a", "command": "b"}]}]}}', "command"),
        ("uninstall", ".mcp.json", '{"mcpServers": {"x": {}, "x": {"command": "y"}}}', "x"),
    ])  # fmt: skip
    def test_refused_naming_the_key_and_file(
        self, refuse: Refuse, project: Path, verb: str, relative: str, text: str, key: str
    ) -> None:
        path = project / relative
        path.write_text(text)
        before = _tree(project)
        refuse(verb, "--claude", "--project", str(project), words=(str(path), f'"{key}"', "twice"))
        assert path.read_text() == text
        assert _tree(project) == before  # no .mcp.json written beside the settings


@pytest.mark.slow
class TestCompareAndSwap:
    """A write between storyd's read and its rename is kept: the edit is made again."""

    def test_a_writer_between_the_read_and_the_rename_keeps_its_key(
        self,
        env: dict[str, str],
        project: Path,
        tmp_path: Path,
    ) -> None:
        path = project / ".claude" / "settings.json"
        path.write_text(SETTINGS)
        path.chmod(0o600)
        flag = tmp_path / "go"
        installing = subprocess.Popen(
            [STORYD, "install", "--claude", "--project", str(project)],
            env={**env, HOOK_ENV: f"wait-before-write:{flag}"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        try:
            wait_for(lambda: exclusively_locked(path.parent), QUICK,
                     "storyd to lock .claude/ with its edit computed")  # fmt: skip
            data = json.loads(path.read_text())
            data["writer"] = "kept"  # the agent's edit, as it makes it: a whole new file
            data["hooks"]["Stop"] = [{"hooks": [{"type": "command", "command": "mine"}]}]
            temp = path.with_name("agent.tmp")
            temp.write_text(json.dumps(data, indent=2))
            temp.chmod(0o600)
            temp.replace(path)
            flag.touch()
            out, err = installing.communicate(timeout=QUICK)
        finally:
            flag.touch()
            installing.kill()
            installing.wait()
        assert installing.returncode == 0, err.decode()
        after = json.loads(path.read_text())
        assert after["writer"] == "kept", "the writer's edit was lost"
        stops = [h["command"] for g in after["hooks"]["Stop"] for h in g["hooks"]]
        assert stops[0] == "mine" and stops[1].endswith("storyd-hook stop")
        assert "SessionStart" in after["hooks"]
        assert (path.stat().st_mode & 0o777) == 0o600  # the file's mode bits stay
        assert not [p for p in path.parent.iterdir() if p.name != "settings.json"]
        assert b"added hooks.Stop" in out


class TestSwap:
    """storyd.agents.guarded in process: the compare-and-swap, and the refusals' words."""

    def test_an_edit_is_made_again_from_a_writers_bytes(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        path.write_bytes(b"A")
        seen: list[bytes | None] = []

        def compute(raw: bytes | None) -> tuple[bytes | None, int]:
            seen.append(raw)
            if len(seen) == 1:
                path.write_bytes(b"B")  # the agent writes between storyd's read and rename
            return (raw or b"") + b"+storyd", len(seen)

        assert guarded.swap(str(path), "settings.json", compute, b"A") == 2
        assert seen == [b"A", b"B"]
        assert path.read_bytes() == b"B+storyd"

    def test_a_file_that_keeps_changing_is_left_as_the_writer_made_it(
        self,
        tmp_path: Path,
    ) -> None:
        path = tmp_path / "settings.json"
        path.write_bytes(b"0")

        def compute(raw: bytes | None) -> tuple[bytes | None, None]:
            path.write_bytes(str(int(raw or b"0") + 1).encode())  # a writer every time
            return b"storyd", None

        with pytest.raises(LockTimeout, match="changed 5 times"):
            guarded.swap(str(path), "settings.json", compute, b"0")
        assert path.read_bytes() == b"5"

    def test_unchanged_bytes_are_not_written(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        path.write_bytes(b"{}")
        inode = path.stat().st_ino
        guarded.swap(str(path), "settings.json", lambda raw: (raw, None), b"{}")
        assert path.stat().st_ino == inode

    def test_a_planned_refusal_names_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "p" / ".mcp.json"
        path.parent.mkdir()
        path.write_text('{"a": {"b": 1, "b": 2}}')
        with pytest.raises(DataError, match=r'\.mcp\.json: the key "b" appears twice'):
            SettingsFile(str(path), str(path.parent)).load()
        with pytest.raises(DataError, match="resolves outside the project"):
            guarded.resolve(str(path.parent / ".." / "elsewhere.json"), str(path.parent))
