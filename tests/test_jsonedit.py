"""Minimal in-place JSON edits: only the changed values' bytes move, everything else stays."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.api.reconcile.jsonedit import MISSING, edit, lookup
from storyd.core.errors import DataError

MULTI = """{
    "b": 1,
    "a": {
        "x": "PENDING",
        "note": "Concluída \\u00e9 ✓"
    }
}
"""


def test_replacing_a_value_touches_only_its_bytes() -> None:
    out = edit(MULTI, [(("a", "x"), "DONE")])
    assert out == MULTI.replace('"PENDING"', '"DONE"')


def test_a_new_key_follows_the_objects_layout() -> None:
    out = edit(MULTI, [(("a", "sha"), "abc")])
    old_lines = MULTI.splitlines()
    assert out.splitlines() == [
        *old_lines[:4], old_lines[4] + ",", '        "sha": "abc"', *old_lines[5:]]
    assert out.endswith("}\n")
    assert list(json.loads(out)["a"]) == ["x", "note", "sha"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"s":"P"}', '{"s":"P","k":1}'),
        ('{"s": "P", "t": 2}', '{"s": "P", "t": 2, "k": 1}'),
        ("{}", '{"k": 1}'),
        ('{ "s" : "P" }\n', '{ "s" : "P", "k" : 1 }\n'),
    ],
)
def test_one_line_objects_keep_their_separators(text: str, expected: str) -> None:
    assert edit(text, [(("k",), 1)]) == expected


def test_a_bom_and_array_paths() -> None:
    text = '\ufeff[{"id": "1", "status": "running"}]'
    assert edit(text, [((0, "status"), "complete")]) == text.replace("running", "complete")


@pytest.mark.parametrize(
    ("text", "path"),
    [("[1]", (3,)), ('{"a": 1}', ("a", "b")), ("[1]", ("k",)), ("not json", ("a",))],
)
def test_impossible_edits_are_refused(text: str, path: tuple[str | int, ...]) -> None:
    with pytest.raises(DataError):
        edit(text, [(path, 1)])


def test_overlapping_changes_are_refused() -> None:
    with pytest.raises(DataError):
        edit('{"a": {"b": 1}}', [(("a",), 2), (("a", "b"), 3)])


def test_lookup() -> None:
    assert lookup({"a": [1, {"b": 2}]}, ("a", 1, "b")) == 2
    assert lookup({"a": []}, ("a", 0)) is MISSING


_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_documents = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=4),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    document=st.dictionaries(st.text(max_size=5), _documents, min_size=1, max_size=5),
    indent=st.sampled_from([None, 0, 2, 4, "\t"]),
    ascii_only=st.booleans(),
    new=_scalars,
    data=st.data(),
)
def test_any_document_edits_to_itself_plus_the_change(
    document: dict[str, object], indent: int | str | None, ascii_only: bool, new: object,
    data: st.DataObject,
) -> None:
    text = json.dumps(document, indent=indent, ensure_ascii=ascii_only)
    key = data.draw(st.sampled_from([*document, "fresh-key"]))
    out = edit(text, [((key,), new)])
    expected = dict(document)
    expected[key] = new
    assert json.loads(out) == expected
    assert list(json.loads(out)) == list(expected)
    if key in document:  # a replaced value: nothing before it moved
        start = text.index(json.dumps(key, ensure_ascii=ascii_only))
        assert out[:start] == text[:start]
