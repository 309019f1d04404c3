"""A small, strict reader for the YAML that Backlog.md writes: front matter and config.

Backlog.md writes its task files' front matter and `backlog/config.yml` with js-yaml,
in a narrow shape: one mapping whose values are

    scalars         plain (`status: In Progress`, `ordinal: 2000`), 'single' or "double"
                    quoted; folded or literal block scalars (`title: >-` and indented lines)
    lists           inline (`labels: []`, `['@claude']`, `["To Do", "Done"]`) or block
                    (`- task-66`, `- >-` with indented lines)

Comments (whole lines, or ` # ...` after a value) are skipped. Anything else (a nested
mapping, a list of mappings, a flow mapping, anchors, aliases, tags, a tab indent, a key
given twice, a quoted string over several lines) is refused with a `YamlError` naming
the line: this reader never guesses. Values come back as `str`, `list[str]` or None (an
empty value, `null`, `~`); numbers stay text (the caller reads them as it needs).

    parse(text, first_line)   the mapping of a YAML text
    front_matter(text)        a markdown file's front matter (the lines between the
                              first `---` and the next `---`) and the line the body
                              starts on; None when the file has none
    nested(text, first_line)  `parse`, but a key may hold one level of `key: value`
                              lines indented below it (BMAD's `development_status:`,
                              GSD's `progress:`): a mapping of its own, in file order
"""

from __future__ import annotations

__all__ = ["YamlError", "front_matter", "nested", "parse"]

Value = str | list[str] | None
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_BLOCK = frozenset((">", ">-", ">+", "|", "|-", "|+"))
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t", "r": "\r", "0": "\0",
            " ": " ", "b": "\b", "e": "\x1b", "f": "\f"}  # fmt: skip


class YamlError(ValueError):
    """A YAML text this reader does not understand: its line (1-based) and why."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line
        self.why = why


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _uncomment(text: str) -> str:
    """A plain value without its trailing ` # comment`."""
    at = text.find(" #")
    return (text[:at] if at >= 0 else text).rstrip()


def _quoted(text: str, line: int) -> tuple[str, str]:
    """A quoted scalar at the start of `text`: its value and what follows it."""
    quote = text[0]
    out: list[str] = []
    i = 1
    while i < len(text):
        c = text[i]
        if quote == "'" and c == "'":
            if text[i + 1 : i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), text[i + 1 :]
        if quote == '"' and c == '"':
            return "".join(out), text[i + 1 :]
        if quote == '"' and c == "\\":
            code = text[i + 1 : i + 2]
            if code == "u" and len(text) >= i + 6:
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                except ValueError:
                    raise YamlError(line, "a bad \\u escape in a quoted string") from None
                i += 6
                continue
            if code not in _ESCAPES:
                raise YamlError(line, f"an escape this reader does not know: \\{code}")
            out.append(_ESCAPES[code])
            i += 2
            continue
        out.append(c)
        i += 1
    raise YamlError(line, "a quoted string not closed on its line")


def _scalar(text: str, line: int) -> str | None:
    """One scalar written on one line (a list item, a value): plain or quoted."""
    text = text.strip()
    if not text:
        return None
    if text[0] in "'\"":
        value, rest = _quoted(text, line)
        rest = rest.strip()
        if rest and not rest.startswith("#"):
            raise YamlError(line, f"text after a quoted string: {rest[:20]!r}")
        return value
    if text[0] in "{&*!%@`|>[":
        raise YamlError(line, f"{text[0]!r} starts a value this reader does not read")
    plain = _uncomment(text)
    if ": " in plain or plain.endswith(":"):
        raise YamlError(line, "a nested mapping (`key: value` inside a value)")
    return None if plain in _NULLS else plain


def _inline(text: str, line: int) -> list[str]:
    """An inline list, `[a, 'b', "c"]`, of scalars."""
    items: list[str] = []
    rest = text[1:].strip()
    while True:
        if rest.startswith("]"):
            tail = rest[1:].strip()
            if tail and not tail.startswith("#"):
                raise YamlError(line, f"text after an inline list: {tail[:20]!r}")
            return items
        if not rest:
            raise YamlError(line, "an inline list not closed on its line")
        if rest[0] in "'\"":
            value, rest = _quoted(rest, line)
        else:
            end = min((i for i in (rest.find(","), rest.find("]")) if i >= 0), default=-1)
            if end < 0:
                raise YamlError(line, "an inline list not closed on its line")
            value, rest = rest[:end].strip(), rest[end:]
            if not value or value[0] in "[{&*!":
                raise YamlError(line, "an inline list item this reader does not read")
        items.append(value)
        rest = rest.strip()
        if rest.startswith(","):
            rest = rest[1:].strip()
            if rest.startswith("]"):
                raise YamlError(line, "a trailing comma in an inline list")
        elif not rest.startswith("]"):
            raise YamlError(line, "an inline list item is not followed by `,` or `]`")


class _Lines:
    """The text's lines with a cursor; comment and blank lines are skipped by `peek`."""

    def __init__(self, text: str, first: int) -> None:
        self.lines = text.split("\n")
        self.first = first
        self.at = 0

    def number(self, index: int | None = None) -> int:
        return self.first + (self.at if index is None else index)

    def peek(self) -> int | None:
        """The index of the next line that holds something, or None at the end."""
        while self.at < len(self.lines):
            line = self.lines[self.at].rstrip("\r")
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                if line.startswith("\t") or line.lstrip(" ").startswith("\t"):
                    raise YamlError(self.number(), "a tab in the indentation")
                return self.at
            self.at += 1
        return None

    def text(self, index: int) -> str:
        return self.lines[index].rstrip("\r")


def _block(lines: _Lines, style: str, parent: int) -> str:
    """The lines of a folded (`>`) or literal (`|`) block scalar, indented past `parent`."""
    body: list[str] = []
    indent: int | None = None
    while lines.at < len(lines.lines):
        raw = lines.text(lines.at)
        if raw.strip() == "":
            body.append("")
            lines.at += 1
            continue
        here = _indent(raw)
        if here <= parent or (indent is not None and here < indent):
            break
        if indent is None:
            indent = here
        body.append(raw[indent:])
        lines.at += 1
    while body and body[-1] == "":
        body.pop()
    if style[0] == "|":
        text = "\n".join(body)
    else:  # folded: lines of a paragraph join with a space, a blank line is a newline
        paragraphs: list[str] = []
        current: list[str] = []
        for item in body:
            if item == "":
                paragraphs.append(" ".join(current))
                current = []
            else:
                current.append(item)
        paragraphs.append(" ".join(current))
        text = "\n".join(paragraphs)
    return text + ("\n" if style[1:] in ("", "+") and text else "")


def _value(lines: _Lines, raw: str, indent: int, line: int) -> str | None:
    """A value written after `key:` or `- `: one line, or a block scalar below it."""
    text = raw.strip()
    if _uncomment(text) in _BLOCK:
        lines.at += 1
        return _block(lines, _uncomment(text), indent)
    value = _scalar(text, line)
    lines.at += 1
    # a plain scalar may go on over more-indented lines (YAML folds them with spaces)
    if value is not None and text[0] not in "'\"":
        while (index := lines.peek()) is not None and _indent(lines.text(index)) > indent:
            more = lines.text(index).strip()
            if more.startswith("- "):
                break
            value += " " + (_scalar(more, lines.number(index)) or "")
            lines.at += 1
    return value


def _block_list(lines: _Lines, indent: int) -> list[str]:
    """The items of a block list whose dashes are at column `indent`."""
    items: list[str] = []
    while (index := lines.peek()) is not None:
        raw = lines.text(index)
        here = _indent(raw)
        if here != indent or not (raw[here:].startswith("- ") or raw[here:].rstrip() == "-"):
            if here > indent:
                raise YamlError(lines.number(index), "a list item indented unlike the others")
            break
        item = raw[here + 1 :]
        if item.strip()[:1] == "-":
            raise YamlError(lines.number(index), "a list inside a list")
        value = _value(lines, item, here, lines.number(index))
        items.append("" if value is None else value)
    return items


def parse(text: str, first_line: int = 1) -> dict[str, Value]:
    """The top-level mapping of a YAML text; YamlError for anything outside the subset.
    `first_line` is the text's first line in its file (for the errors' line numbers)."""
    lines = _Lines(text, first_line)
    found: dict[str, Value] = {}
    while (index := lines.peek()) is not None:
        raw = lines.text(index)
        line = lines.number(index)
        if _indent(raw) != 0:
            raise YamlError(line, "an indented line where a `key:` was expected")
        if raw.startswith(("- ", "---", "...")) or raw == "-":
            raise YamlError(line, "not a `key: value` line")
        if raw[0] in "'\"":
            key, rest = _quoted(raw, line)
            if not rest.startswith(":"):
                raise YamlError(line, "a quoted key without `:` after it")
            rest = rest[1:]
        else:
            key, colon, rest = raw.partition(":")
            if not colon or (rest and not rest.startswith((" ", "\t"))):
                raise YamlError(line, "not a `key: value` line")
            if key[:1] in "{[&*!%@`?|>" or key != key.strip():
                raise YamlError(line, f"a key this reader does not read: {key[:20]!r}")
        if key in found:
            raise YamlError(line, f"the key {key!r} is given twice")
        value = rest.strip()
        if value.startswith("["):
            found[key] = _inline(value, line)
            lines.at += 1
        elif _uncomment(value) in ("", "~", "null"):
            lines.at += 1
            nxt = lines.peek()
            below = lines.text(nxt) if nxt is not None else ""
            if nxt is not None and (below.lstrip(" ").startswith("- ") or below.strip() == "-"):
                found[key] = _block_list(lines, _indent(below))
            elif nxt is not None and _indent(below) > 0:
                raise YamlError(lines.number(nxt), f"a nested mapping under {key!r}")
            else:
                found[key] = None
        else:
            found[key] = _value(lines, rest, 0, line)
    return found


def front_matter(text: str) -> tuple[dict[str, Value], int] | None:
    """The front matter of a markdown text and the 1-based line its body starts on;
    None when the text does not open with a `---` line. YamlError when it is not closed
    or not in the subset."""
    body = text[1:] if text.startswith("\ufeff") else text
    first, _, rest = body.partition("\n")
    if first.rstrip("\r").rstrip() != "---":
        return None
    lines = rest.split("\n")
    for index, raw in enumerate(lines):
        if raw.rstrip("\r").rstrip() in ("---", "..."):
            return parse("\n".join(lines[:index]), 2), index + 3
    raise YamlError(1, "front matter opened with `---` is never closed")


def _top_level(raw: str) -> bool:
    """Whether a line starts a top-level entry (not blank, a comment, or indented)."""
    stripped = raw.strip()
    return bool(stripped) and not stripped.startswith("#") and _indent(raw) == 0


def nested(text: str, first_line: int = 1) -> dict[str, Value | dict[str, Value]]:
    """`parse`, but a key with an empty value whose next line is an indented `key: value`
    holds a mapping of those lines, read by `parse` itself (so a second level, a list of
    mappings, anything outside the subset there, is refused the same way, with its line).
    A key given twice, at either level, is refused."""
    lines = text.split("\n")
    found: dict[str, Value | dict[str, Value]] = {}
    flat: list[str] = []  # the lines of the plain entries, blanked where a block was
    at = 0
    while at < len(lines):
        raw = lines[at].rstrip("\r")
        key, colon, rest = raw.partition(":")
        if not (_top_level(raw) and colon and key == key.strip() and key[:1] not in "'\"-"
                and _uncomment(rest.strip()) == ""):
            flat.append(lines[at])
            at += 1
            continue
        below = at + 1
        while below < len(lines) and (not lines[below].strip()
                                      or lines[below].strip().startswith("#")):
            below += 1
        head = lines[below].rstrip("\r") if below < len(lines) else ""
        if _indent(head) == 0 or head.lstrip(" ").startswith("-"):
            flat.append(lines[at])  # a null, or a block list: `parse` reads it
            at += 1
            continue
        end = below
        while end < len(lines) and not _top_level(lines[end].rstrip("\r")):
            end += 1
        block = lines[at + 1 : end]
        depth = _indent(head)
        for offset, line in enumerate(block):
            if line.strip() and not line.lstrip().startswith("#") and _indent(line) < depth:
                raise YamlError(first_line + at + 1 + offset, "a line indented unlike the "
                                f"others under {key!r}")
        if key in found:
            raise YamlError(first_line + at, f"the key {key!r} is given twice")
        found[key] = parse("\n".join(ln[depth:] for ln in block), first_line + at + 1)
        flat.append("")
        flat.extend("" for _ in block)
        at = end
    for key, value in parse("\n".join(flat), first_line).items():
        if key in found:
            msg = f"the key {key!r} is given twice"
            raise YamlError(first_line, msg)
        found[key] = value
    return dict(sorted(found.items(), key=lambda item: _order(text, item[0])))


def _order(text: str, key: str) -> int:
    """Where a top-level key is first written (to keep the mapping in file order)."""
    at = text.find("\n" + key + ":")
    return 0 if text.startswith(key + ":") else (at if at >= 0 else len(text))
