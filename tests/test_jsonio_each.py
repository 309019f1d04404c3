"""jsonio.loads_each: the documents of a folder parsed at once give what `loads` gives
one by one, None where `loads` fails; an unusual document (a byte-order mark, a NUL,
invalid UTF-8, leading or trailing space, extra data) does not change the others."""

from __future__ import annotations

import pytest

from storyd.core import jsonio, switches

TRICKY = [
    b'{"id": "1", "status": "pending"}',
    b'\xef\xbb\xbf{"id": "2"}',  # a UTF-8 byte-order mark
    b'\xff\xfe{\x00}\x00',  # UTF-16-LE with its mark
    b'{"id": "3\x00"}',  # a NUL inside: not JSON, and the joined parts shift
    b'{"x": 1}\x00{"y": 2}',  # two documents split by a NUL: not one document
    b'\xc3',  # half a character
    b'  \n{"id": "4"}\n\t',
    b'{"id": "5"} x',
    b'{"id": "6", "s": "\xc3\xa9"}',
    b"",
    b"null",
    b"12",
    b"1.",
    b'{"a": "',
    b'"}',
    b"[" * 100_000,
]


def _one(data: bytes) -> object:
    try:
        return jsonio.loads(data)
    except (ValueError, RecursionError):
        return None


USUAL = [b'{"id": "7", "blockedBy": ["6"]}', b'{"id": "8"}\n']


@pytest.mark.parametrize("tricky", TRICKY)
def test_each_document_parses_as_loads_parses_it(tricky: bytes) -> None:
    for datas in ([tricky, *USUAL], [USUAL[0], tricky, USUAL[1]], [*USUAL, tricky],
                  [tricky, tricky, *USUAL]):
        assert jsonio.loads_each(datas) == [_one(d) for d in datas]


def test_all_the_tricky_documents_together() -> None:
    for start in range(len(TRICKY)):
        datas = TRICKY[start:] + TRICKY[:start]
        assert jsonio.loads_each(datas) == [_one(d) for d in datas]


def test_the_usual_documents_parse_in_one_go() -> None:
    datas = [b'{"id": "%d", "blockedBy": ["%d"]}' % (n, n - 1) for n in range(1, 60)]
    assert jsonio.loads_each(datas) == [_one(d) for d in datas]
    assert jsonio.loads_each([]) == []


def test_a_fast_parser_is_asked_for_each_document() -> None:
    asked: list[bytes] = []

    def fast(data: bytes) -> object:
        asked.append(data)
        return jsonio.UNSURE

    before = switches.CONFIG.fast_parse
    switches.configure(fast_parse=fast)
    try:
        assert jsonio.loads_each([b"{}", b"[1]"]) == [{}, [1]]
    finally:
        switches.configure(fast_parse=before)
    assert asked == [b"{}", b"[1]"]
