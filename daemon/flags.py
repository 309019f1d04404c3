"""A small flag parser with the seed's rules: `--key value` and `--key=value`.

argparse is not used: it exits 2 on errors where the seed exits 64, and its import
costs start-up time on `storyd resume`'s path.
"""

from __future__ import annotations

from daemon.errors import UsageError

__all__ = ["VALUE", "parse"]

VALUE = "value"
SWITCH = "switch"
MANY = "many"


def parse(argv: list[str], spec: dict[str, str], usage: str) -> dict[str, object]:
    """Flags by name (without dashes); SWITCH flags give True, MANY flags give a list.

    Unknown flags, missing values and positional words raise UsageError whose message
    ends with the `usage:` line.
    """
    values: dict[str, object] = {}
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if not word.startswith("--") or word == "--":
            raise UsageError(f"unexpected argument {word!r}\n{usage}")
        name, eq, inline = word[2:].partition("=")
        kind = spec.get(name)
        if kind is None:
            raise UsageError(f"unknown flag --{name}\n{usage}")
        if kind == SWITCH:
            if eq:
                raise UsageError(f"flag --{name} takes no value\n{usage}")
            values[name] = True
            continue
        if eq:
            value = inline
        elif index < len(argv):
            value = argv[index]
            index += 1
        else:
            raise UsageError(f"flag --{name} needs a value\n{usage}")
        if kind == MANY:
            values.setdefault(name, [])
            values[name].append(value)  # type: ignore[attr-defined]
        else:
            values[name] = value
    return values
