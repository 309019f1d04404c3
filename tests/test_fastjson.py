"""The daemon's orjson parse (daemon/server/fastjson.py) against the CLI's lean `_json` parse.

Whatever bytes a state file holds, `jsonio.loads` must give the same value (types, key
order, duplicate keys, floats) or the same error message with the fast parser installed
as without it; the rendered bytes then agree too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.core import jsonio, switches
from storyd.server import fastjson


@pytest.fixture(autouse=True)
def lean_afterwards() -> Iterator[None]:
    """Each test chooses its parser; the process is left as it was found."""
    before = switches.CONFIG.fast_parse
    yield
    switches.configure(fast_parse=before)


def parsed(data: bytes, *, fast: bool) -> tuple[str, str, bytes]:
    """("ok", repr, rendered bytes) or ("error", message, b"") through one parser."""
    switches.configure(fast_parse=fastjson.loads if fast else None)
    try:
        value = jsonio.loads(data)
    except jsonio.JSONError as exc:
        return "error", str(exc), b""
    return "ok", repr(value), jsonio.dumps(value)


def assert_same(data: bytes) -> None:
    assert parsed(data, fast=True) == parsed(data, fast=False), data


TRICKY = [
    b'{"a":1,"b":2,"a":3}',  # duplicate keys: the last value, at the first key's place
    b'{"a":{"x":1},"a":[]}',
    b"[1e400, -1e400]",  # overflow: orjson refuses, `_json` gives inf (rendered null)
    b"[1.0, -0.0, 0.1, 1E5, 1e-400, 2.2250738585072011e-308, 5e-324, 1.7976931348623157e308]",
    b"123456789012345678901234567890",  # beyond 64 bits: orjson would give a float
    b"[18446744073709551615, 18446744073709551616, -9223372036854775808, "
    b"-9223372036854775809]",
    b'{"id":"1234567890123456789012"}',  # a long digit run in a string
    b'{"id":"x 1234567890123456789012"}',
    b'{"n":\n\t-12345678901234567890}',
    b'[1,12345678901234567890.5,1234567890123456789012e-3]',
    b'"\\ud800"',  # lone surrogate: orjson refuses, `_json` keeps it (U+FFFD rendered)
    b'"\\udc00\\ud800"',
    b'"\\ud83d\\ude00"',  # a proper pair
    b'"\\u0000\\u001f\\u007f"',
    b"NaN", b"[Infinity]", b"-Infinity",
    b"\xef\xbb\xbf{}",  # UTF-8 BOM
    b'\xff\xfe{\x00}\x00',  # UTF-16 LE with BOM
    b'{\x00}\x00',  # UTF-16 without BOM
    b'{"a":"\xff"}',  # invalid UTF-8
    b"", b"   ", b'{"a":', b'{"a":1,}', b"[1,]", b'{"a":1} x', b"// c\n{}",
    b'{"a":"line\nbreak"}',  # a raw control character in a string
    b"<<<<<<< HEAD\n{}\n=======\n{}\n>>>>>>> other\n",
    b"[" * 1100 + b"]" * 1100,  # deeper than orjson's limit
    b'{"stories":{"s":{"tasks":{"T1":{"status":"DONE","commitSha":12345678901234567890}}}}}',
    b"\t\n\r {} \t\n\r",
    # a digit run inside a string first, then a long number: the second must be seen
    b'{"sha":"ab1234567890123456789012345678901234567890","n":123456789012345678901}',
    b'{"s":["12345678901234567890123abc"],"n":[-12345678901234567890123]}',
    b"-123456789012345678901234",
    b'{"a":1,"b":\x0c12345678901234567890}',

    b"[true,false,null,-0,0,-1]",
]


@pytest.mark.parametrize("data", TRICKY)
def test_tricky_inputs_parse_the_same(data: bytes) -> None:
    assert_same(data)


def test_the_fast_path_is_taken_for_plain_files() -> None:
    """The guard is not so wide that orjson never runs: a plain state file goes through it."""
    data = b'{"stories":{"s":{"tasks":{"T1":{"status":"DONE","completedAt":"2026-01-01"}}}}}'
    assert fastjson.loads(data) == json.loads(data)
    sha = b'{"commitSha":"a1234567890123456789012345678901234567bc"}'
    assert fastjson.loads(sha) == json.loads(sha)  # a digit run inside a string
    assert fastjson.loads(b"123456789012345678901") is jsonio.UNSURE
    assert fastjson.loads(b'{"n": -1234567890123456789}') is jsonio.UNSURE
    assert fastjson.loads(b'"\\ud800"') is jsonio.UNSURE
    assert fastjson.loads(b"{") is jsonio.UNSURE


json_numbers = st.from_regex(r"\A-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?\Z")
scalars = st.one_of(st.none(), st.booleans(), st.integers(),
                    st.integers(min_value=-(2**90), max_value=2**90),
                    st.floats(allow_nan=False), st.text())


def _containers(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Lists and objects of `inner` (a named function: hypothesis inspects a lambda's
    source to see that it recurses, and a lambda split over lines can defeat that)."""
    return st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)


documents = st.recursive(scalars, _containers, max_leaves=30)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(document=documents, ascii_only=st.booleans(), indent=st.sampled_from([None, 0, 2, "\t"]))
def test_generated_documents(document: object, ascii_only: bool, indent: int | str | None) -> None:
    text = json.dumps(document, ensure_ascii=ascii_only, indent=indent)
    assert_same(text.encode("utf-8", "surrogatepass"))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(number=json_numbers)
def test_number_spellings(number: str) -> None:
    assert_same(f'{{"n":{number},"l":[{number}]}}'.encode())


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('{}[],:"\\ u0123456789abcdefDd.eE-+ntrufalsNI\n'),
                    max_size=40))
def test_json_like_text(text: str) -> None:
    assert_same(text.encode())


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=40))
def test_arbitrary_bytes(data: bytes) -> None:
    assert_same(data)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8),
       values=st.lists(st.integers(-3, 3), min_size=8, max_size=8))
def test_duplicate_keys(keys: list[str], values: list[int]) -> None:
    body = ",".join(f'"{k}":{v}' for k, v in zip(keys, values, strict=False))
    assert_same(f"{{{body}}}".encode())
