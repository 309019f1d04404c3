"""A small flag parser with the seed's rules: `--key value` and `--key=value`.

argparse is not used: it exits 2 on errors where the seed exits 64, and its import
costs start-up time on `storyd resume`'s path.

`-h` or `--help` anywhere raises HelpRequested (not an error): daemon/cli/__init__.py prints the
usage, then what the command is about, on stdout and exits 0.
"""

from __future__ import annotations

from storyd.core.errors import FlagError

__all__ = ["HELP", "MANY", "SWITCH", "VALUE", "HelpRequested", "parse", "text"]

VALUE = "value"
SWITCH = "switch"
MANY = "many"
HELP = ("-h", "--help")


class HelpRequested(Exception):
    """`-h`/`--help` was given: show `usage` and `about` (None: the command's docstring)."""

    def __init__(self, usage: str, about: str | None = None) -> None:
        super().__init__(usage)
        self.usage = usage
        self.about = about

    def text(self, about: str | None = None) -> str:
        """The help screen: the usage lines, a blank line, what the command does."""
        more = (self.about if self.about is not None else about or "").strip("\n")
        return self.usage + "\n" + (f"\n{more}\n" if more else "")


def parse(
    argv: list[str], spec: dict[str, str], usage: str, about: str | None = None
) -> dict[str, object]:
    """Flags by name (without dashes); SWITCH flags give True, MANY flags give a list.

    Unknown flags, missing values and positional words raise FlagError (a UsageError)
    whose message ends with the `usage:` line; `-h`/`--help` anywhere raises
    HelpRequested(usage, about) first.
    """
    for word in argv:
        if word in HELP:
            raise HelpRequested(usage, about)
    values: dict[str, object] = {}
    lists: dict[str, list[str]] = {}
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if not word.startswith("--") or word == "--":
            raise FlagError(f"unexpected argument {word!r}\n{usage}")
        name, eq, inline = word[2:].partition("=")
        kind = spec.get(name)
        if kind is None:
            raise FlagError(f"unknown flag --{name}{_closest(name, spec)}\n{usage}")
        if kind == SWITCH:
            if eq:
                raise FlagError(f"flag --{name} takes no value\n{usage}")
            values[name] = True
            continue
        if eq:
            value = inline
        elif index < len(argv):
            value = argv[index]
            index += 1
        else:
            raise FlagError(f"flag --{name} needs a value\n{usage}")
        if kind == MANY:
            values[name] = lists.setdefault(name, [])
            lists[name].append(value)
        else:
            values[name] = value
    return values


def _closest(name: str, spec: dict[str, str]) -> str:
    """` (did you mean --x?)` for a mistyped flag (difflib only on this error path)."""
    import difflib

    close = difflib.get_close_matches(name, list(spec), n=1, cutoff=0.6)
    return f" (did you mean --{close[0]}?)" if close else ""


def text(values: dict[str, object], name: str) -> str | None:
    """A VALUE flag's text, None when it was not given."""
    value = values.get(name)
    return None if value is None else str(value)
