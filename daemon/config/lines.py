"""Where a key is written in config.toml: the 1-based line for every problem and warning.

A line scanner over text that already parsed (tomllib gives no positions). `re` is
imported only when a file is checked.
"""

from __future__ import annotations

__all__ = ["Lines", "key_lines", "locate"]


class Lines:
    """A config file's text and the line of each dotted key and table in it."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self._keys: dict[str, int] | None = None

    @property
    def keys(self) -> dict[str, int]:
        """Each key's line, scanned when a line is first asked (a file with no problem
        is never scanned: a hook's start)."""
        if self._keys is None:
            self._keys = key_lines(self.lines)
        return self._keys

    def line(self, field: str) -> int:
        """The line of `field`, else of its nearest parent written in the file."""
        key = field.partition("[")[0]
        parts = key.split(".")
        while parts:
            found = self.keys.get(".".join(parts))
            if found:
                return found
            parts.pop()
        return 0

    def element_line(self, field: str, value: object) -> int:
        """The line of the index-th element of an array, when it is a string we can find."""
        start = self.line(field)
        if not start or isinstance(value, (list, dict)):
            return start
        import re

        if isinstance(value, str):
            pattern = re.compile("|".join(map(re.escape, (_toml_basic(value), f"'{value}'"))))
        else:
            token = str(value).lower() if isinstance(value, bool) else str(value)
            pattern = re.compile(rf"(?<![\w.+-]){re.escape(token)}(?![\w.])")
        stop = min((n for n in self.keys.values() if n > start), default=len(self.lines) + 1)
        for number in range(start, stop):
            text = self.lines[number - 1]
            if number == start:
                text = text.partition("=")[2]
            if pattern.search(text):
                return number
        return start


def locate(path: str, field: str) -> int:
    """The 1-based line where a dotted field (`limits.settle_ms`, `workspaces[2]`) is written.

    0 when the file cannot be read (as the loader reads it: a regular file, at most
    MAX_FILE_BYTES) or the field is not in it. For `storyd config check`'s warnings
    about values that are valid but suspicious.
    """
    from storyd.config.values import MAX_FILE_BYTES
    from storyd.core.regular import read_regular

    try:
        text = read_regular(path, MAX_FILE_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return 0
    found = Lines(text)
    key, bracket, index = field.partition("[")
    if not bracket:
        return found.line(field)
    return found.element_line(key, _nth(text, key, int(index.rstrip("]"))))


def _nth(text: str, key: str, index: int) -> object:
    import tomllib

    try:
        value: object = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value[index] if isinstance(value, list) and 0 <= index < len(value) else None


def _toml_basic(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'



def key_lines(lines: list[str]) -> dict[str, int]:
    """Each dotted key and table header in the text, with the 1-based line it is first on.

    A line scanner, not a parser: the file has already parsed, so it only has to follow
    table headers, `key = value` lines (keys bare, quoted or dotted) and skip the inside
    of multi-line strings. Keys inside inline tables resolve to the inline table's line.
    """
    import re

    key = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
    dotted = rf"{key}(?:\s*\.\s*{key})*"
    header = re.compile(rf"\[\[?\s*({dotted})\s*\]\]?")
    keyval = re.compile(rf"({dotted})\s*=")
    part = re.compile(key)

    def join(text: str) -> str:
        names = []
        for match in part.finditer(text):
            name = match.group(0)
            names.append(name[1:-1] if name[0] in "\"'" else name)
        return ".".join(names)

    found: dict[str, int] = {}
    table = ""
    closing = ""
    for number, raw in enumerate(lines, 1):
        if closing:
            if closing in raw:
                closing = ""
            continue
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        match = header.match(text)
        if match:
            table = join(match.group(1))
            found.setdefault(table, number)
            continue
        match = keyval.match(text)
        if not match:
            continue
        name = join(match.group(1))
        found.setdefault(f"{table}.{name}" if table else name, number)
        rest = text[match.end() :]
        for quotes in ('"""', "'''"):
            if rest.count(quotes) % 2 == 1:
                closing = quotes
    return found
