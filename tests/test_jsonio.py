"""storyd.core.jsonio: jq-identical rendering, and parse errors with a line and column."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from storyd.core.jsonio import JSONError, dumps, loads

JQ = shutil.which("jq")
needs_jq = pytest.mark.skipif(JQ is None, reason="needs jq on PATH")


def jq_compact(document: bytes) -> bytes:
    """What `jq -c .` prints for a JSON document."""
    assert JQ is not None
    done = subprocess.run(
        [JQ, "-c", "."], input=document, capture_output=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


TRICKY = [
    *[chr(c) for c in range(0x20)],
    "\x7f",
    '"',
    "\\",
    "/",
    "'",
    "\\u0041",
    "é",
    "ü",
    "中文",
    "😀",
    "👩\u200d💻",
    "\u0080",
    "\u009f",
    "\u00a0",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\uffff",
    "\U0010ffff",
    'mixed "q" \\ \t\n\x00\x1f\x7f é 😀 end',
    "",
]


@needs_jq
class TestDumpsMatchesJq:
    """`dumps` writes what `jq -c` writes, byte for byte."""

    @pytest.mark.slow
    @pytest.mark.parametrize(
        "text", TRICKY, ids=[f"U+{ord(t[0]):04X}" if len(t) == 1 else repr(t) for t in TRICKY]
    )
    @pytest.mark.parametrize("ascii_input", [True, False])
    def test_strings(self, text: str, ascii_input: bool) -> None:
        document = json.dumps(text, ensure_ascii=ascii_input).encode("utf-8")
        assert dumps(text) + b"\n" == jq_compact(document)

    @pytest.mark.parametrize(
        "value",
        [
            {
                "resumePoint": "all-done",
                "tasksCompleted": [{"id": "T\x7f", "commitSha": None}],
                "tasksPending": [],
                "lastCommitSha": None,
                "staleWarnings": ["é\n😀"],
            },
            {'k\x01"\\é': {"": [[], {}, [None, True, False]]}},
            [0, -1, 1, 42, 10**15, -(10**15), "x"],
            {},
            [],
            None,
            True,
            False,
            "plain",
        ],
    )
    def test_containers(self, value: object) -> None:
        assert dumps(value) + b"\n" == jq_compact(json.dumps(value).encode())

    def test_every_code_point_of_the_first_planes(self) -> None:
        chars = [chr(c) for c in range(0x3000) if not 0xD800 <= c <= 0xDFFF]
        chars += [chr(c) for c in range(0xE000, 0x10000, 7)] + [
            chr(c) for c in range(0x10000, 0x110000, 997)
        ]
        assert dumps(chars) + b"\n" == jq_compact(json.dumps(chars).encode())

    @pytest.mark.parametrize(
        "document",
        [
            b'{"a":1,"b":2,"a":3}',
            b'{"z": {"y": 1, "x": 2}, "a": [3, 2, 1]}',
            b'"\\u00e9\\/\\ud83d\\ude00\\u007f\\u0000"',
            '{"é": "ü", "😀": ["\u2028"]}'.encode(),
            b'\n\t {"spaced" : [ 1 , 2 ] }\r\n',
        ],
    )
    def test_parse_then_render(self, document: bytes) -> None:
        assert dumps(loads(document)) + b"\n" == jq_compact(document)


class TestDumpsRules:
    """The rendering rules that hold without jq."""

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("\x7f", b'"\\u007f"'),
            ("\x00", b'"\\u0000"'),
            ("\x1f", b'"\\u001f"'),
            ("\b\t\n\f\r", b'"\\b\\t\\n\\f\\r"'),
            ("é😀", '"é😀"'.encode()),
            ("\ud800", '"\ufffd"'.encode()),
            ("a\udfffb", '"a\ufffdb"'.encode()),
            ({"a": [1, None]}, b'{"a":[1,null]}'),
            ((1, "x"), b'[1,"x"]'),
        ],
    )
    def test_rendering(self, value: object, expected: bytes) -> None:
        assert dumps(value) == expected

    def test_key_order_is_insertion_order(self) -> None:
        assert dumps({"b": 1, "a": 2, "c": 3}) == b'{"b":1,"a":2,"c":3}'

    def test_one_line(self) -> None:
        assert b"\n" not in dumps({"x": ["\n" * 3, {"y": "\r\n"}]})


class TestLoads:
    """`loads` parses like `json`, keeps key order, and refuses what is not JSON."""

    @pytest.mark.parametrize(
        "document",
        [
            b'{"b": 1, "a": {"d": [1, 2.5, -3e2, true, false, null], "c": "\\u00e9"}}',
            b"[]",
            b'"x"',
            b"0",
            b'{"a":1,"a":2}',
            '{"ключ": "значение"}'.encode(),
        ],
    )
    def test_same_as_json_module(self, document: bytes) -> None:
        value = loads(document)
        assert value == json.loads(document)
        if isinstance(value, dict):
            assert list(value) == list(json.loads(document))

    def test_bom_and_whitespace_ignored(self) -> None:
        assert loads(b'\xef\xbb\xbf \n{"a": 1}\n\n') == {"a": 1}

    @pytest.mark.parametrize(
        ("document", "reason", "line", "column"),
        [
            (b"", "empty document", 1, 1),
            (b"   \n  ", "empty document", 2, 3),
            (b"{", "expecting property name enclosed in double quotes", 1, 2),
            (b"[1,]", "a trailing comma before ']'", 1, 3),
            (b'{"a": 1}x', "extra data after the document", 1, 9),
            (b'{"a": 1}\n\n  {}', "extra data after the document", 3, 3),
            (b'\n\n  {"a": tru}', "expecting a value", 3, 9),
            (b'{"a" 1}', "expecting ':' delimiter", 1, 6),
            (b'{"a": "x\ty"}', "invalid control character", 1, 9),
            (b'["\\q"]', "invalid \\escape", 1, 3),
            (b"\xff", "invalid UTF-8", 1, 1),
            (b'{\n"a": "\xc3"}', "invalid UTF-8", 2, 7),
            (b"NaN", "NaN is not valid JSON", 1, 1),
            (b"-Infinity", "-Infinity is not valid JSON", 1, 1),
            (b"[" * 100_000, "nesting too deep", 1, 1),
            # The causes writers produce, named (the failure path only).
            (b'{"a": 1,\n}', "a trailing comma before '}'", 1, 8),
            (b'{"a": [1, 2 ,  ]}', "a trailing comma before ']'", 1, 13),
            (b'{"a": 1 // one\n}', "a '//' comment (JSON has no comments)", 1, 9),
            (b'{\n  /* x */ "a": 1}', "a '/*' comment (JSON has no comments)", 2, 3),
            (
                b'{"a": 1}\n<<<<<<< ours',
                "git merge-conflict marker '<<<<<<<' (an unresolved merge)",
                2,
                1,
            ),
            (b"{\n|||||||\n}", "git merge-conflict marker '|||||||' (an unresolved merge)", 2, 1),
            (
                '["x"]'.encode("utf-16-le"),
                "UTF-16LE text without a byte-order mark (save it as UTF-8, or with a BOM)",
                1,
                1,
            ),
        ],
    )
    def test_error_positions(self, document: bytes, reason: str, line: int, column: int) -> None:
        with pytest.raises(JSONError) as raised:
            loads(document)
        err = raised.value
        assert (err.reason, err.line, err.column) == (reason, line, column)
        assert str(err) == f"{reason} at line {line} column {column}"
        assert isinstance(err, ValueError)

    @pytest.mark.parametrize(
        "text",
        [
            '{\n  "stories": {\n    "s": ,\n  }\n}',
            '{"a": [1, 2,\n\n 3,, 4]}',
            '{"a":\n  "unterminated',
            '{"a": 1,\n "b": 2\n "c": 3}',
            "[1, 2] [3]",
        ],
    )
    def test_position_agrees_with_json_module(self, text: str) -> None:
        with pytest.raises(json.JSONDecodeError) as expected:
            json.loads(text)
        with pytest.raises(JSONError) as raised:
            loads(text.encode())
        assert (raised.value.line, raised.value.column) == (
            expected.value.lineno,
            expected.value.colno,
        )

    def test_position_counts_characters_not_bytes(self) -> None:
        with pytest.raises(JSONError) as raised:
            loads('{"é😀": 1,}'.encode())
        assert (raised.value.line, raised.value.column) == (1, 9)  # the comma, in characters

    def test_parse_after_error_still_works(self) -> None:
        with pytest.raises(JSONError):
            loads(b'{"k": "v", oops}')
        assert loads(b'{"k": "v"}') == {"k": "v"}


class TestEncodingsAndCauses:
    """Byte-order marks decode; a failure names the cause writers actually produce."""

    @pytest.mark.parametrize("codec", ["utf-8-sig", "utf-16", "utf-16-le", "utf-32"])
    def test_bom_decodes(self, codec: str) -> None:
        text = '{"a": "Concluída", "b": [1, 2]}'
        data = text.encode(codec)
        if codec == "utf-16-le":
            data = b"\xff\xfe" + data
        assert loads(data) == {"a": "Concluída", "b": [1, 2]}

    def test_odd_bytes_after_a_utf16_bom(self) -> None:
        with pytest.raises(JSONError) as raised:
            loads(b"\xff\xfe{\x00}")
        assert raised.value.reason == "invalid UTF-16-LE after its byte-order mark"

    def test_seven_equals_inside_a_string_is_not_a_marker(self) -> None:
        with pytest.raises(JSONError) as raised:
            loads(b'{"a": "=======", }')
        assert raised.value.reason == "a trailing comma before '}'"


def test_exact_floats_stay_floats_when_read_back() -> None:
    """storyd's own records (the hooks' session records) keep a float a float: 1.0 is
    written `1.0`, not jq's `1`; not-finite values are null either way."""
    value = {"at": 1764000000.0, "seen": 2.5, "n": 3, "bad": float("nan")}
    assert dumps(value) == b'{"at":1764000000,"seen":2.5,"n":3,"bad":null}'
    exact = dumps(value, exact_floats=True)
    assert exact == b'{"at":1764000000.0,"seen":2.5,"n":3,"bad":null}'
    assert isinstance(loads(exact)["at"], float)  # type: ignore[index]
