"""`storyd completion bash|zsh|fish`: print the shell completion script.

The script is generated from the one table of commands: daemon/cli/__init__.py's COMMANDS (names
and summaries) and, for each, its module's FLAGS (or SUBCOMMANDS: name -> flags) and
USAGE. A new command gets completion by being added there. What a flag's value
completes to is read from its usage text: `--x DIR` or `<dir>` completes directories,
`FILE`, `PATH`, `<file>` or `<path>` files, `--x a|b` the words a and b; anything else
(an id, a number) completes nothing. Older spellings a module lists in ALIASES are
accepted by the command but not offered.

Install (see README.md):
  bash  storyd completion bash > ~/.local/share/bash-completion/completions/storyd
  zsh   storyd completion zsh > ~/.zfunc/_storyd   (with ~/.zfunc on $fpath, before compinit)
  fish  storyd completion fish > ~/.config/fish/completions/storyd.fish
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable

from storyd.core.errors import UsageError
from storyd.core.flags import HELP, MANY, SWITCH, HelpRequested

__all__ = ["SHELLS", "SUBCOMMANDS", "Command", "Flag", "main", "render", "table"]

USAGE = "usage: storyd completion bash|zsh|fish"
SUBCOMMANDS: dict[str, dict[str, str]] = {"bash": {}, "zsh": {}, "fish": {}}
DIRS = "dirs"
FILES = "files"
EPIC_IDS = "epic-ids"  # asked at completion time: `storyd completion --ids epic`
STORY_IDS = "story-ids"
_IDS = {"epic-id": EPIC_IDS, "story-id": STORY_IDS}
_DIR_WORDS = frozenset(("DIR", "<dir>"))
_FILE_WORDS = frozenset(("FILE", "PATH", "<file>", "<path>"))


class Flag:
    """One flag of one command: its name (no dashes), its kind (storyd.core.flags VALUE, SWITCH
    or MANY), and what its value completes to (DIRS, FILES, a tuple of words, or None)."""

    __slots__ = ("kind", "name", "values")

    def __init__(self, name: str, kind: str, values: str | tuple[str, ...] | None) -> None:
        self.name = name
        self.kind = kind
        self.values = values

    @property
    def takes_value(self) -> bool:
        """VALUE and MANY flags take a value."""
        return self.kind != SWITCH

    def describe(self) -> str:
        """A short description: the name in words and its placeholder."""
        if isinstance(self.values, tuple):
            return f"{self.name.replace('-', ' ')}: {', '.join(self.values)}"
        placeholder = {DIRS: " DIR", FILES: " FILE"}.get(self.values or "", "")
        return self.name.replace("-", " ") + placeholder


class Command:
    """A command (or `command sub`) with its summary and flags."""

    __slots__ = ("flags", "name", "subcommands", "summary")

    def __init__(self, name: str, summary: str, flags: list[Flag],
                 subcommands: dict[str, list[Flag]] | None = None) -> None:
        self.name = name
        self.summary = summary
        self.flags = flags
        self.subcommands = subcommands or {}


def _values(name: str, usage: str) -> str | tuple[str, ...] | None:
    """What `--name`'s value completes to, as its usage line spells the placeholder."""
    if name in _IDS:
        return _IDS[name]
    found = re.search(rf"--{re.escape(name)}[ =](\S+)", usage)
    if found is None:
        return None
    word = found.group(1).rstrip("]")
    if word in _DIR_WORDS:
        return DIRS
    if word in _FILE_WORDS:
        return FILES
    choices = tuple(word.split("|"))
    if len(choices) > 1 and all(re.fullmatch(r"[\w.-]+", c) for c in choices):
        return choices  # plain words only: each shell's script quotes them as they are
    return None


def _flags(
    spec: dict[str, str],
    usage: str,
    aliases: dict[str, str],
    words: dict[str, tuple[str, ...]] | None = None,
) -> list[Flag]:
    """`words`: a module's COMPLETE_WORDS(), value words its usage cannot spell
    (reconcile's `--only` repair codes)."""
    words = words or {}
    return [
        Flag(name, kind, words.get(name) or (_values(name, usage) if kind != SWITCH else None))
        for name, kind in spec.items()
        if name not in aliases
    ]


def table() -> list[Command]:
    """Every command of daemon/cli/__init__.py's COMMANDS, with its flags (imports every module)."""
    from storyd.cli import COMMANDS, module_name

    commands = []
    for name, summary in COMMANDS.items():
        module = importlib.import_module(module_name(name))
        usage = str(getattr(module, "USAGE", ""))
        aliases = getattr(module, "ALIASES", {})
        words: dict[str, tuple[str, ...]] = getattr(module, "COMPLETE_WORDS", dict)()
        subs = getattr(module, "SUBCOMMANDS", None)
        if subs is not None:
            parts = {sub: _flags(spec, usage, aliases, words) for sub, spec in subs.items()}
            commands.append(Command(name, summary, [], parts))
        else:
            spec = getattr(module, "FLAGS", {})
            commands.append(Command(name, summary, _flags(spec, usage, aliases, words)))
    helped: dict[str, list[Flag]] = {c.name: [] for c in commands}
    commands.append(Command("help", "show a command's usage", [], helped))
    return commands


def _value_action(
    flag: Flag, dirs: str, files: str, words: str, free: str, ids: str | None = None
) -> str:
    """One shell's way to complete a flag's value: `words` is a format for the choices
    joined by spaces (they are plain words: the usage spells them `a|b`); `ids` one for
    the command that lists epic or story ids (`{}`: `epic` or `story`)."""
    if flag.values in (EPIC_IDS, STORY_IDS):
        kind = "epic" if flag.values == EPIC_IDS else "story"
        return ids.format(kind) if ids is not None else free
    if flag.values == DIRS:
        return dirs
    if flag.values == FILES:
        return files
    if isinstance(flag.values, tuple):
        return words.format(" ".join(flag.values))
    return free


def _dispatch(
    commands: list[Command],
    word: str,
    offer_subcommands: Callable[[Command], list[str]],
    sub_word: str,
    reply: Callable[[list[Flag], str], list[str]],
) -> list[str]:
    """`case WORD in (command) …;; esac` over every command, as bash and zsh both read it:
    a command with subcommands offers them, then cases on `sub_word`; `reply` completes
    one flag list."""
    out = [f"    case {word} in"]
    for command in commands:
        out.append(f"    ({command.name})")
        if command.subcommands:
            out.extend(offer_subcommands(command))
            out.append(f"        case {sub_word} in")
            for sub, flags in command.subcommands.items():
                out.append(f"        ({sub})")
                out.extend(reply(flags, " " * 12))
                out.append("            ;;")
            out.append("        esac")
        else:
            out.extend(reply(command.flags, " " * 8))
        out.append("        ;;")
    out.append("    esac")
    return out


# -- bash ----------------------------------------------------------------------------------


def _bash_reply(flags: list[Flag], indent: str) -> list[str]:
    """`case $prev` for the value flags, then the flag words for $cur."""
    lines = [f"{indent}case $prev in"]
    for flag in flags:
        if not flag.takes_value:
            continue
        action = _value_action(flag, "_storyd_reply -d", "_storyd_reply -f",
                               '_storyd_reply -W "{}"', "COMPREPLY=()",
                               '_storyd_reply -W "$("${{COMP_WORDS[0]}}" completion --ids {} '
                               '2>/dev/null)"')
        lines.append(f"{indent}    --{flag.name}) {action}; return ;;")
    lines.append(f"{indent}esac")
    words = [f"--{f.name}" for f in flags] + ["--help"]
    lines.append(f'{indent}_storyd_reply -W "{" ".join(words)}"')
    return lines


def _bash(commands: list[Command]) -> str:
    names = [c.name for c in commands]
    out = [
        "# storyd completion for bash, generated by `storyd completion bash`.",
        "# Install: storyd completion bash > ~/.local/share/bash-completion/completions/storyd",
        "_storyd_reply() {",
        '    [ "$1" != -W ] && compopt -o filenames 2>/dev/null',
        '    mapfile -t COMPREPLY < <(compgen "$@" -- "$cur")',
        "}",
        "",
        "_storyd() {",
        "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} at=$COMP_CWORD",
        '    if [ "$cur" = = ]; then cur=; elif [ "$prev" = = ]; then',
        "        prev=${COMP_WORDS[COMP_CWORD-2]}",  # `--flag=value`: "=" is a word of its own
        "    fi",
        "    if [ $at -eq 1 ]; then",
        f'        _storyd_reply -W "{" ".join([*names, "--help", "--version"])}"',
        "        return",
        "    fi",
    ]

    def offer_subcommands(command: Command) -> list[str]:
        subs = " ".join(command.subcommands)
        return [f'        if [ $at -eq 2 ]; then _storyd_reply -W "{subs}"; return; fi']

    out += _dispatch(commands, "${COMP_WORDS[1]}", offer_subcommands, "${COMP_WORDS[2]}",
                     _bash_reply)
    out += ["}", "", "complete -F _storyd storyd", ""]
    return "\n".join(out)


# -- zsh -----------------------------------------------------------------------------------


def _zsh_text(text: str) -> str:
    """Text safe inside a single-quoted _arguments spec or _describe item."""
    return re.sub(r"[\[\]:'\\]", "", text)


def _zsh_spec(flag: Flag) -> str:
    head = ("*" if flag.kind == MANY else "") + f"--{flag.name}"
    if not flag.takes_value:
        return f"'{head}[{_zsh_text(flag.describe())}]'"
    action = _value_action(flag, "_files -/", "_files", "({})", " ",
                           "{{compadd -- $(storyd completion --ids {} 2>/dev/null)}}")
    return f"'{head}=[{_zsh_text(flag.describe())}]:{flag.name}:{action}'"


def _zsh_arguments(flags: list[Flag], indent: str) -> list[str]:
    specs = [_zsh_spec(f) for f in flags]
    specs.append("'(- *)'{-h,--help}'[show the usage]'")
    return [f"{indent}_arguments -S \\"] + [f"{indent}    {s} \\" for s in specs[:-1]] + [
        f"{indent}    {specs[-1]}"
    ]


def _zsh(commands: list[Command]) -> str:
    out = [
        "#compdef storyd",
        "# storyd completion for zsh, generated by `storyd completion zsh`.",
        "# Install: storyd completion zsh > ~/.zfunc/_storyd  (~/.zfunc on $fpath before",
        "# compinit), or after compinit: source <(storyd completion zsh)",
        "_storyd() {",
        "    local -a commands",
        "    commands=(",
    ]
    out += [f"        '{c.name}:{_zsh_text(c.summary)}'" for c in commands]
    out += [
        "    )",
        "    if (( CURRENT == 2 )); then",
        "        if [[ $PREFIX == -* ]]; then compadd -- --help --version",
        "        else _describe -t commands 'storyd command' commands; fi",
        "        return",
        "    fi",
        "    local cmd=$words[2]",
        "    shift words; (( CURRENT-- ))",
    ]

    def offer_subcommands(command: Command) -> list[str]:
        if command.name == "help":
            offer = "_describe -t commands 'command' commands"
        else:
            offer = "compadd -- " + " ".join(command.subcommands)
        return [f"        if (( CURRENT == 2 )); then {offer}; return; fi",
                "        shift words; (( CURRENT-- ))"]

    out += _dispatch(commands, "$cmd", offer_subcommands, "$words[1]", _zsh_arguments)
    out += [
        "}",
        'if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then _storyd "$@"',
        "else compdef _storyd storyd; fi",
        "",
    ]
    return "\n".join(out)


# -- fish ----------------------------------------------------------------------------------


def _fish_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_flag(flag: Flag, condition: str) -> str:
    head = f"complete -c storyd -n {_fish_text(condition)} -l {flag.name}"
    if not flag.takes_value:
        action = ""
    else:
        action = _value_action(flag, " -x -a '(__fish_complete_directories (commandline -ct))'",
                               " -r -F", " -x -a '{}'", " -x",
                               # fish says "Unknown command" itself when storyd is not
                               # on PATH (no redirect silences that): ask only if it is
                               " -x -a '(command -q storyd; and storyd completion --ids {}"
                               " 2>/dev/null)'")
    return f"{head}{action} -d {_fish_text(flag.describe())}"


def _fish(commands: list[Command]) -> str:
    out = [
        "# storyd completion for fish, generated by `storyd completion fish`.",
        "# Install: storyd completion fish > ~/.config/fish/completions/storyd.fish",
        "function __storyd_at --description 'the words after storyd start with argv'",
        "    set -l words (commandline -opc)",
        "    test (count $words) -gt (count $argv); or return 1",
        "    for i in (seq (count $argv))",
        "        set -l at (math $i + 1)",
        '        test "$words[$at]" = "$argv[$i]"; or return 1',
        "    end",
        "end",
        "function __storyd_next --description 'the next word is the first after storyd argv'",
        "    test (count (commandline -opc)) -eq (math (count $argv) + 1); and __storyd_at $argv",
        "end",
        "complete -c storyd -f",
        "complete -c storyd -n __storyd_next -s h -l help -d 'show the usage'",
        "complete -c storyd -n __storyd_next -l version -d 'print the version'",
    ]
    for command in commands:
        out.append(f"complete -c storyd -n __storyd_next -a {command.name} "
                   f"-d {_fish_text(command.summary)}")
    for command in commands:
        if command.subcommands:
            for sub in command.subcommands:
                out.append(f"complete -c storyd -n {_fish_text('__storyd_next ' + command.name)} "
                           f"-a {sub}")
            for sub, flags in command.subcommands.items():
                condition = f"__storyd_at {command.name} {sub}"
                out.extend(_fish_flag(f, condition) for f in flags)
                if command.name != "help":
                    out.append(f"complete -c storyd -n {_fish_text(condition)} -s h -l help "
                               "-d 'show the usage'")
        else:
            condition = f"__storyd_at {command.name}"
            out.extend(_fish_flag(f, condition) for f in command.flags)
            out.append(f"complete -c storyd -n {_fish_text(condition)} -s h -l help "
                       "-d 'show the usage'")
    return "\n".join(out) + "\n"


# -- the command ---------------------------------------------------------------------------


def render(shell: str) -> str:
    """The completion script for `shell` (bash, zsh or fish)."""
    commands = table()
    if shell == "bash":
        return _bash(commands)
    if shell == "zsh":
        return _zsh(commands)
    if shell == "fish":
        return _fish(commands)
    from storyd.cli import did_you_mean

    hint = did_you_mean(shell, list(SUBCOMMANDS)) or ": expected bash, zsh or fish"
    raise UsageError(f"unknown shell {shell!r}{hint}\n{USAGE}")


SHELLS = tuple(SUBCOMMANDS)


def ids(kind: str, workspace: str) -> list[str]:
    """The epic ids (`epic`) or story ids (`story`) of the workspace's epic state files,
    for the scripts to offer after --epic-id and --story-id (nothing when none)."""
    import json

    from storyd.core.containment import Refused, resolve
    from storyd.core.formats.epic import ROOT, epic_of_folder, epic_state_files
    from storyd.core.regular import read_regular
    from storyd.core.switches import CONFIG

    try:
        names = os.listdir(os.path.join(workspace, ROOT))
    except OSError:
        return []
    epics = sorted({e for n in names if (e := epic_of_folder(n)) is not None})
    if kind == "epic":
        return epics
    found: list[str] = []
    for epic in epics:
        for relpath in epic_state_files(workspace, epic):
            try:  # a repository's file: contained, non-blocking, bounded (issue 39)
                resolve(workspace, relpath)
                data = read_regular(os.path.join(workspace, relpath), CONFIG.max_state_bytes)
                stories = json.loads(data).get("stories")
            except (OSError, ValueError, AttributeError, Refused):
                continue
            if isinstance(stories, dict):
                found.extend(str(k) for k in stories)
            elif isinstance(stories, list):
                found.extend(str(s["id"]) for s in stories if isinstance(s, dict) and "id" in s)
    return sorted(set(found))


def main(argv: list[str]) -> int:
    """Print the script for the one shell named."""
    if argv[:1] == ["--ids"] and len(argv) == 2 and argv[1] in ("epic", "story"):
        sys.stdout.write("".join(f"{i}\n" for i in ids(argv[1], os.getcwd())))
        return 0
    if any(word in HELP for word in argv):
        raise HelpRequested(USAGE)
    if len(argv) != 1:
        raise UsageError(f"name one shell\n{USAGE}")
    sys.stdout.write(render(argv[0]))
    return 0
