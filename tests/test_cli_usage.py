"""The command line as people expect it: `-h`/`--help` everywhere, `--version`,
`storyd help COMMAND`, and one `--config FILE` on every command that reads the
configuration. Every case runs the installed `storyd` as a process."""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, daemon_env
from epic_state_harness import write_epic

from storyd import __version__
from storyd.cli import COMMANDS, module_name

Spawn = Callable[..., DaemonProcess]


def _module(command: str) -> object:
    return importlib.import_module(module_name(command))


def _invocations() -> Iterator[tuple[str, ...]]:
    """Every command, and every `command subcommand`."""
    for command in COMMANDS:
        yield (command,)
        for sub in getattr(_module(command), "SUBCOMMANDS", {}):
            yield (command, sub)


INVOCATIONS = list(_invocations())


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A private config home and socket (no daemon answers there)."""
    return daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")


def storyd(env: dict[str, str], *args: str, cwd: Path | str = ".",
           ) -> subprocess.CompletedProcess[bytes]:
    """`storyd ARGS`, failing the test on a traceback."""
    done = run_storyd_cli(*args, env=env, cwd=cwd, timeout=60)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    return done


@pytest.mark.slow
@pytest.mark.parametrize("words", INVOCATIONS, ids=" ".join)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_every_command_answers_help(env: dict[str, str], tmp_path: Path,
                                    words: tuple[str, ...], flag: str) -> None:
    """Usage on stdout, exit 0, nothing done (install writes no unit, serve binds nothing)."""
    done = storyd(env, *words, flag, "--unit-dir", str(tmp_path / "units"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    out = done.stdout.decode()
    assert out.startswith("usage: "), out
    if words[0] != "resume":  # resume's usage is the seed's: it does not name the command
        assert f"storyd {words[0]}" in out.splitlines()[0]
    assert not (tmp_path / "units").exists()
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_command_is_the_help_flag(env: dict[str, str], command: str) -> None:
    """`storyd help X` prints what `storyd X --help` prints: the usage, then the module's
    account of the command."""
    flag = storyd(env, command, "--help")
    word = storyd(env, "help", command)
    assert word.returncode == 0 and word.stdout == flag.stdout
    assert flag.stdout.count(b"\n\n") >= 1, "no description below the usage"


def test_help_wins_over_other_flags(env: dict[str, str]) -> None:
    done = storyd(env, "serve", "--bogus", "--help")
    assert done.returncode == 0 and done.stdout.startswith(b"usage: storyd serve")


def test_top_level_help_version_and_unknowns(env: dict[str, str]) -> None:
    for args in (("--help",), ("-h",), ("help",)):
        done = storyd(env, *args)
        assert done.returncode == 0 and b"commands:" in done.stdout
        assert all(name.encode() in done.stdout for name in COMMANDS)
    version = storyd(env, "--version")
    assert (version.returncode, version.stdout) == (0, f"storyd {__version__}\n".encode())
    bare = storyd(env)
    assert bare.returncode == 64 and b"usage: storyd" in bare.stderr
    for words in (("nope",), ("help", "nope")):
        done = storyd(env, *words)
        assert done.returncode == 64 and b"unknown command 'nope'" in done.stderr


@pytest.mark.parametrize("words", INVOCATIONS, ids=" ".join)
def test_every_flag_is_in_the_usage(words: tuple[str, ...]) -> None:
    """A flag the parser accepts is one the usage (and so --help and completion) shows;
    an older spelling listed in ALIASES is the exception."""
    module = _module(words[0])
    if len(words) == 1 and hasattr(module, "SUBCOMMANDS"):
        return
    spec = module.SUBCOMMANDS[words[1]] if len(words) > 1 else module.FLAGS  # type: ignore[attr-defined]
    usage = module.USAGE  # type: ignore[attr-defined]
    aliases = getattr(module, "ALIASES", {})
    missing = [name for name in spec if f"--{name}" not in usage and name not in aliases]
    assert missing == [], f"storyd {' '.join(words)}: flags missing from USAGE"


# -- one --config FILE ---------------------------------------------------------------------

BROKEN = 'stalenes = "git"\n'  # an unknown key: the loader refuses the file, naming it


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    write_epic(path, "0049", {"story-0049-0001": {"tasks": {"T1": {"status": "pending"}}}})
    return path


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "broken.toml"
    path.parent.mkdir()
    path.write_text(BROKEN, encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["status", "list", "check"])
def test_report_commands_read_the_named_config(env: dict[str, str], ws: Path, broken: Path,
                                               command: str) -> None:
    """The direct read loads the file --config names (the default one is absent)."""
    done = storyd(env, command, "--direct", "--workspace", str(ws), "--config", str(broken))
    assert done.returncode == 78, done.stderr
    assert f"{broken}:1: stalenes" in done.stderr.decode()
    fine = storyd(env, command, "--direct", "--workspace", str(ws))
    assert fine.returncode == 0, fine.stderr


@pytest.mark.parametrize("command", ["status", "serve", "doctor"])
def test_a_missing_config_file_is_an_error(env: dict[str, str], tmp_path: Path, ws: Path,
                                           command: str) -> None:
    """A file named but absent is not silently replaced by the defaults."""
    missing = tmp_path / "typo.toml"
    args = ["--workspace", str(ws), "--config", str(missing)]
    if command == "status":
        args.append("--direct")
    done = storyd(env, command, *args)
    assert done.returncode == 78, done.stderr
    assert f"--config {missing}: no such file" in done.stderr.decode()


def test_serve_refuses_the_named_broken_config(env: dict[str, str], ws: Path,
                                               broken: Path) -> None:
    done = storyd(env, "serve", "--workspace", str(ws), "--config", str(broken))
    assert done.returncode == 78
    assert f"{broken}:1: stalenes" in done.stderr.decode()


@pytest.mark.slow
def test_reconcile_reads_the_named_config(env: dict[str, str], ws: Path, broken: Path) -> None:
    done = storyd(env, "reconcile", "--workspace", str(ws), "--config", str(broken))
    assert done.returncode == 78, done.stderr
    assert f"{broken}:1: stalenes" in done.stderr.decode()
    assert storyd(env, "reconcile", "--workspace", str(ws)).returncode == 0


def test_doctor_checks_the_named_config(env: dict[str, str], ws: Path, broken: Path) -> None:
    done = storyd(env, "doctor", "--workspace", str(ws), "--config", str(broken))
    assert done.returncode == 1
    assert f"fail config: {broken}:1: stalenes" in done.stdout.decode()


def test_resume_direct_reads_the_named_config(env: dict[str, str], ws: Path,
                                              tmp_path: Path) -> None:
    """A bad file named by --config warns and keeps the seed's contract (exit 0)."""
    bad = tmp_path / "bad.toml"
    bad.write_text('staleness = "sometimes"\n', encoding="utf-8")
    args = ("resume", "--story-id", "story-0049-0001", "--epic-id", "49", "--direct")
    done = storyd(env, *args, "--config", str(bad), cwd=ws)
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().startswith(f"warn: {bad}:1: staleness"), done.stderr
    assert storyd(env, *args, cwd=ws).stderr == b""


@pytest.mark.parametrize("sub", ["check", "show"])
def test_config_file_is_an_alias_of_config(env: dict[str, str], broken: Path,
                                           tmp_path: Path, sub: str) -> None:
    new = storyd(env, "config", sub, "--config", str(broken))
    old = storyd(env, "config", sub, "--file", str(broken))
    assert new.returncode == old.returncode == 78
    assert new.stdout == old.stdout and str(broken).encode() in new.stdout
    other = tmp_path / "other.toml"
    other.write_text("", encoding="utf-8")
    both = storyd(env, "config", sub, "--config", str(broken), "--file", str(other))
    assert both.returncode == 64 and b"another spelling of --config" in both.stderr


# -- the shell fast path's op ----------------------------------------------------------------


@pytest.mark.slow
def test_resume_cli_op_answers_help_like_the_cli(spawn_daemon: Spawn, ws: Path) -> None:
    """`storyd-resume --help` through the daemon prints what `storyd resume --help` does."""
    proc = spawn_daemon([ws])
    with proc.connect() as line:
        line.send({"op": "resume-cli", "argv": ["--story-id", "x", "--help"], "cwd": str(ws)})
        framed = line.read_all()
    cli = storyd(proc.env, "resume", "--story-id", "x", "--help", cwd=ws)
    assert cli.returncode == 0
    assert framed == cli.stdout + f"=0 {__version__}\n".encode()
    assert "handler_error" not in proc.log_text()

