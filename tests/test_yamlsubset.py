"""The YAML subset Backlog.md writes (storyd.core.formats.yamlsubset): what it reads, by
example and by property (a mapping written in every style the subset has reads back the
same), and what it refuses, always as a YamlError naming the line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.core.formats.yamlsubset import YamlError, front_matter, parse


class TestWhatItReads:
    """The shapes in the real task files and configs."""

    def test_scalars_quotes_and_lists(self) -> None:
        text = (
            "id: task-67\n"
            "title: 'It''s done: mostly'\n"
            'status: "In Progress"\n'
            "assignee: ['@claude']\n"
            "labels: []\n"
            "ordinal: 2000\n"
            "statuses: [\"To Do\", In Progress, 'Done']\n"
            "priority:\n"
            "# a comment line\n"
            "dependencies:\n"
            "  - task-66\n"
            "  - TASK-038  # (partial) a trailing comment\n"
        )
        assert parse(text) == {
            "id": "task-67", "title": "It's done: mostly", "status": "In Progress",
            "assignee": ["@claude"], "labels": [], "ordinal": "2000",
            "statuses": ["To Do", "In Progress", "Done"], "priority": None,
            "dependencies": ["task-66", "TASK-038"],
        }

    def test_folded_and_literal_blocks(self) -> None:
        text = (
            "title: >-\n  write the vis in webgl (or use the current package, but a\n"
            "  few different styles)\n"
            "notes: |\n  line one\n  line two\n"
            "references:\n  - >-\n    backlog/tasks/nas-14 -\n    Move-backups.md\n  - plain.nix\n"
        )
        assert parse(text) == {
            "title": "write the vis in webgl (or use the current package, but a few "
                     "different styles)",
            "notes": "line one\nline two\n",
            "references": ["backlog/tasks/nas-14 - Move-backups.md", "plain.nix"],
        }

    def test_front_matter_and_the_body_line(self) -> None:
        got = front_matter("---\nid: task-1\nstatus: Done\n---\n\n## Description\n")
        assert got == ({"id": "task-1", "status": "Done"}, 5)
        assert front_matter("# README\n\nno front matter\n") is None
        assert front_matter("\ufeff---\r\nid: task-2\r\n---\r\n") == ({"id": "task-2"}, 4)


class TestWhatItRefuses:
    """Anything outside the subset is a YamlError with its line, never a guess."""

    @pytest.mark.parametrize(("text", "line", "why"), [
        ("a: 1\nb:\n  c: 2\n", 3, "nested mapping"),
        ("a: {b: 1}\n", 1, "'{'"),
        ("a: &x 1\n", 1, "'&'"),
        ("a: *x\n", 1, "'*'"),
        ("a: !tag 1\n", 1, "'!'"),
        ("a: 1\na: 2\n", 2, "given twice"),
        ("a:\n\t- b\n", 2, "tab"),
        ("a: 'open\n", 1, "not closed"),
        ("a: [b, [c]]\n", 1, "inline list item"),
        ("a: [b, c,]\n", 1, "trailing comma"),
        ("a:\n  - b: 1\n", 2, "nested mapping"),
        ("a:\n  - - b\n", 2, "list inside a list"),
        ("- a\n", 1, "not a `key: value`"),
        ("a: \"\\q\"\n", 1, "escape"),
        ("  a: 1\n", 1, "indented"),
    ])  # fmt: skip
    def test_refused_with_its_line(self, text: str, line: int, why: str) -> None:
        with pytest.raises(YamlError) as caught:
            parse(text)
        assert caught.value.line == line and why in caught.value.why

    def test_an_unclosed_front_matter(self) -> None:
        with pytest.raises(YamlError, match="never closed"):
            front_matter("---\nid: task-1\n")

    def test_front_matter_lines_count_from_the_file(self) -> None:
        with pytest.raises(YamlError) as caught:
            front_matter("---\nid: task-1\nx: {a: 1}\n---\n")
        assert caught.value.line == 3


_PLAIN = st.text(st.sampled_from("abcXYZ019 -_@./()"), min_size=1, max_size=12).filter(
    lambda s: s == s.strip() and s[0] not in "-@" and s not in ("null", "~")
    and " #" not in s and not s.endswith(":"))
_ANY = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x85\u2028\u2029"),
               max_size=15)
_KEY = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)


def _single(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _double(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")
    return '"' + escaped + '"'


@st.composite
def _document(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    """A mapping and one way of writing it in the subset."""
    keys = draw(st.lists(_KEY, min_size=1, max_size=6, unique=True))
    lines: list[str] = []
    expect: dict[str, object] = {}
    for key in keys:
        kind = draw(st.sampled_from(["plain", "single", "double", "inline", "block", "folded"]))
        if kind == "plain":
            value = draw(_PLAIN)
            lines.append(f"{key}: {value}")
            expect[key] = value
        elif kind in ("single", "double"):
            value = draw(_ANY)
            lines.append(f"{key}: {_single(value) if kind == 'single' else _double(value)}")
            expect[key] = value
        elif kind == "inline":
            items = draw(st.lists(_ANY, max_size=4))
            lines.append(f"{key}: [{', '.join(_single(i) for i in items)}]")
            expect[key] = items
        elif kind == "block":
            items = draw(st.lists(_PLAIN, min_size=1, max_size=4))
            indent = " " * draw(st.integers(0, 4))
            lines.append(f"{key}:")
            lines.extend(f"{indent}- {i}" for i in items)
            expect[key] = items
        else:
            words = draw(st.lists(_PLAIN, min_size=1, max_size=4))
            lines.append(f"{key}: >-")
            lines.extend(f"  {w}" for w in words)
            expect[key] = " ".join(words)
        if draw(st.booleans()):
            lines.append("# a comment")
    return "\n".join(lines) + "\n", expect


@pytest.mark.slow
class TestProperties:
    """Every mapping written in the subset's styles reads back; nothing else escapes."""

    @settings(max_examples=300, deadline=None)
    @given(_document())
    def test_what_is_written_reads_back(self, doc: tuple[str, dict[str, object]]) -> None:
        text, expect = doc
        assert parse(text) == expect
        assert front_matter(f"---\n{text}---\nbody\n") == (expect, text.count("\n") + 3)

    @settings(max_examples=400, deadline=None)
    @given(st.text(st.sampled_from("ab: -'\"[]{}#>|&*!\t\n "), max_size=60))
    def test_any_text_parses_or_is_refused(self, text: str) -> None:
        try:
            got = parse(text)
        except YamlError as exc:
            assert exc.line >= 1
            return
        assert all(isinstance(v, str | list | type(None)) for v in got.values())
