"""yamlsubset.nested: one level of indented `key: value` lines under a key (BMAD's
`development_status:`, GSD's `progress:`), read by `parse` itself, refused the same way."""

from __future__ import annotations

import pytest

from storyd.core.formats.yamlsubset import YamlError, nested, parse


class TestWhatItReads:
    """The shapes of sprint-status.yaml and STATE.md's front matter."""

    def test_mappings_in_file_order_beside_scalars_and_lists(self) -> None:
        text = ("# header\ngenerated: 2026-02-24\nlist:\n  - a\ndevelopment_status:\n"
                "  # a comment\n  epic-1: done\n\n  1-1-a: review  # trailing\n"
                "  1-2-b: 'in-progress'\nlast: x\n")
        got = nested(text)
        assert list(got) == ["generated", "list", "development_status", "last"]
        assert got["development_status"] == {"epic-1": "done", "1-1-a": "review",
                                              "1-2-b": "in-progress"}
        assert got["list"] == ["a"] and got["last"] == "x"

    def test_what_parse_reads_nested_reads_the_same(self) -> None:
        text = "a: 1\nb: [x, 'y']\nc:\nd: >-\n  folded\n  text\n"
        assert nested(text) == parse(text)


class TestWhatItRefuses:
    """A second level, a key twice, an uneven indent: a YamlError with the line."""

    @pytest.mark.parametrize(("text", "line", "why"), [
        ("a:\n  b: 1\n    c: 2\n", 3, "nested mapping"),
        ("a:\n    b: 1\n  c: 2\n", 3, "indented unlike"),
        ("a:\n  b: 1\n  b: 2\n", 3, "given twice"),
        ("a:\n  b: 1\na:\n  c: 1\n", 3, "given twice"),
        ("a:\n  b:\n    c: 1\n", 3, "nested mapping"),
        ("a:\n  - {b: 1}\n", 2, "starts a value"),
    ])
    def test_refused_with_its_line(self, text: str, line: int, why: str) -> None:
        with pytest.raises(YamlError) as got:
            nested(text, 1)
        assert got.value.line == line, got.value
        assert why in got.value.why or why in str(got.value)
