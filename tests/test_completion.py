"""`storyd completion bash|zsh|fish`: the scripts, run by the real shells.

bash is always there; zsh and fish are tested where installed (CI may lack them, and
the test says so when it skips). zsh is driven through a pseudo-terminal (zpty) with
`compadd` wrapped to print each match, so the real `_arguments` and `_describe` run.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_harness import STORYD
from epic_state_harness import write_epic

from storyd.cli import COMMANDS, module_name

# zsh: an interactive zsh in a zpty, whose `compadd` prints each match it is given;
# the marks delimit one completion's output.
ZSH_CAPTURE = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z 'PS1=""; autoload -U compinit; compinit -u -D'
zpty -w z 'mark () { echo -E - "@@"MARK"@@" }; compprefuncs=( mark ); comppostfuncs=( mark exit )'
local wrap='compadd () { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then '
wrap+='builtin compadd "$@"; return $?; fi; typeset -a hits; builtin compadd -A hits "$@"; '
wrap+='local ret=$?; local h; for h in $hits; do echo -E - "HIT:$h"; done; return $ret; }'
zpty -w z "$wrap"
zpty -w z "source ${(q)1}"
zpty -w z "$2"$'\t'
local line
integer seen=0
while zpty -r z line; do
  [[ $line == *@@MARK@@* ]] && { (( seen++ )); (( seen == 2 )) && break; continue }
  (( seen == 1 )) && [[ $line == HIT:* ]] && print -r -- ${${line#HIT:}%$'\r'$'\n'}
done
zpty -d z
"""


def script(shell: str) -> str:
    done = subprocess.run([STORYD, "completion", shell], capture_output=True, timeout=60,
                          check=False)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    return done.stdout.decode()


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("completion")
    paths = {}
    for shell in ("bash", "zsh", "fish"):
        paths[shell] = folder / f"storyd.{shell}"
        paths[shell].write_text(script(shell), encoding="utf-8")
    (folder / "zsh-capture.zsh").write_text(ZSH_CAPTURE, encoding="utf-8")
    return paths


def bash_complete(path: Path, line: str, cwd: Path) -> list[str]:
    """What bash offers for the last word of `line` (an empty last word when it ends in
    a space), with COMP_WORDS split as readline would ("=" is a word of its own)."""
    words = line.replace("=", " = ").split()
    if line.endswith((" ", "=")):
        words.append("")
    program = (
        f"source {path}\n"
        "COMP_WORDS=(\"$@\"); COMP_CWORD=$(( $# - 1 )); _storyd\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program, "bash", *words], cwd=cwd,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return sorted(w for w in done.stdout.splitlines() if w)


def fish_complete(path: Path, line: str, cwd: Path) -> list[str]:
    done = subprocess.run(["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"],
                          cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return sorted(w.split("\t")[0] for w in done.stdout.splitlines() if w)


def zsh_complete(path: Path, line: str, cwd: Path) -> list[str]:
    capture = path.with_name("zsh-capture.zsh")
    done = subprocess.run(["zsh", "-f", str(capture), str(path), line], cwd=cwd,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return sorted(w for w in done.stdout.splitlines() if w)


COMPLETERS = {"bash": bash_complete, "zsh": zsh_complete, "fish": fish_complete}
SHELLS = [pytest.param(shell, marks=pytest.mark.skipif(
    shutil.which(shell) is None, reason=f"{shell} is not installed here")) for shell in COMPLETERS]


def flags_of(command: str, sub: str | None = None) -> list[str]:
    """The flags a command's module declares (older spellings left out), as --words."""
    module = importlib.import_module(module_name(command))
    spec = module.SUBCOMMANDS[sub] if sub else module.FLAGS
    aliases = getattr(module, "ALIASES", {})
    return sorted(f"--{name}" for name in spec if name not in aliases)


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS)
def test_commands_subcommands_and_values(shell: str, scripts: dict[str, Path],
                                         tmp_path: Path) -> None:
    complete = COMPLETERS[shell]
    path = scripts[shell]
    (tmp_path / "ws-one").mkdir()
    (tmp_path / "ws-file.toml").write_text("", encoding="utf-8")
    assert complete(path, "storyd ser", tmp_path) == ["serve"]
    assert complete(path, "storyd sta", tmp_path) == ["stats", "status"]
    assert complete(path, "storyd config ", tmp_path) == ["check", "show"]
    assert complete(path, "storyd completion ", tmp_path) == ["bash", "fish", "zsh"]
    assert complete(path, "storyd help do", tmp_path) == ["doctor"]
    assert complete(path, "storyd serve --staleness ", tmp_path) == ["git", "mtime"]
    assert complete(path, "storyd serve --log-level w", tmp_path) == ["warning"]
    # fish offers the whole word, `--staleness=mtime`
    assert complete(path, "storyd status --staleness=m", tmp_path) in (
        ["mtime"], ["--staleness=mtime"])
    assert complete(path, "storyd config check --c", tmp_path) == ["--config"]
    assert complete(path, "storyd resume --story-id ", tmp_path) == []
    directories = complete(path, "storyd status --workspace ws-", tmp_path)
    files = complete(path, "storyd serve --config ws-", tmp_path)
    if shell == "zsh":  # the capture sees zsh's own passes: compare with its own commands
        assert directories == complete(path, "rmdir ws-", tmp_path)
        assert files == complete(path, "cat ws-", tmp_path)
        assert files != directories
    else:
        assert [d.rstrip("/") for d in directories] == ["ws-one"]
        assert sorted(f.rstrip("/") for f in files) == ["ws-file.toml", "ws-one"]


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS)
def test_every_command_offers_its_flags(shell: str, scripts: dict[str, Path],
                                        tmp_path: Path) -> None:
    """Generated from the table: each command's (and subcommand's) declared flags."""
    complete = COMPLETERS[shell]
    for command in COMMANDS:
        module = importlib.import_module(module_name(command))
        subs = list(getattr(module, "SUBCOMMANDS", {})) or [None]
        for sub in subs:
            line = f"storyd {command} {sub + ' ' if sub else ''}--"
            offered = complete(scripts[shell], line, tmp_path)
            assert offered == sorted([*flags_of(command, sub), "--help"]), line


def test_every_command_declares_its_flags() -> None:
    """A command in daemon/cli/__init__.py's table gets completion through FLAGS or SUBCOMMANDS."""
    for command in COMMANDS:
        module = importlib.import_module(module_name(command))
        assert hasattr(module, "FLAGS") or hasattr(module, "SUBCOMMANDS"), command
        assert isinstance(getattr(module, "USAGE", None), str), command


@pytest.mark.parametrize("args", [(), ("tcsh",), ("bash", "zsh")])
def test_completion_needs_one_known_shell(args: tuple[str, ...]) -> None:
    done = subprocess.run([STORYD, "completion", *args], capture_output=True, timeout=60,
                          check=False)
    assert done.returncode == 64
    assert b"usage: storyd completion bash|zsh|fish" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS)
def test_epic_and_story_ids_and_repair_codes(shell: str, scripts: dict[str, Path],
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20: ids come from the workspace's epic state files when TAB is pressed; the
    repair codes of `reconcile --only` from the repairs' table."""
    complete = COMPLETERS[shell]
    path = scripts[shell]
    write_epic(tmp_path, "0049", {"story-0049-0001": {"tasks": {}},
                                  "story-0049-0002": {"tasks": {}}})
    write_epic(tmp_path, "0051", {"story-0051-0007": {"tasks": {}}})
    # zsh and fish call `storyd` by name
    monkeypatch.setenv("PATH", f"{Path(STORYD).parent}{os.pathsep}{os.environ['PATH']}")
    assert complete(path, "storyd resume --epic-id ", tmp_path) == ["0049", "0051"]
    assert complete(path, "storyd epic --epic-id 00", tmp_path) == ["0049", "0051"]
    assert complete(path, "storyd reconcile --story-id story-0049", tmp_path) == [
        "story-0049-0001", "story-0049-0002"]
    assert complete(path, "storyd reconcile --only un", tmp_path) == [
        "unreachable", "unrecorded"]
