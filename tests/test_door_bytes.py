"""The early door without orjson (issue 43): what it reads and writes is orjson's in
value, and the door opens before orjson, asyncio or structlog are imported (and, on a
socket systemd hands over, before fasteners and typing).

The door answers while the daemon imports; orjson's own import (uuid, dataclasses,
datetime, json) is about 9 ms of that, fasteners' (logging, typing, pathlib) as much.
So the door parses a request line with the C scanner every read uses
(early._request), handing the daemon any line the two parsers could read apart, and
renders with jsonio.dumps_like_orjson until the daemon installs orjson
(server/protocol.py, switches `fast_dump`). Both are checked here against orjson
itself over generated values, and the imports in a real `storyd serve`'s start.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from daemon_harness import daemon_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storyd.core import jsonio, switches
from storyd.server import protocol
from storyd.server.early import _request

LONE = st.sampled_from(["\ud800", "\udfff", "a\udc00b"])  # lone surrogates
TEXT = st.one_of(st.text(), st.text(alphabet=st.characters(max_codepoint=0x9F)), LONE)
INTS = st.one_of(st.integers(-(1 << 70), 1 << 70),
                 st.sampled_from([-(1 << 63), -(1 << 63) - 1, (1 << 64) - 1, 1 << 64]))
FLOATS = st.one_of(st.floats(), st.sampled_from([1.0, -0.0, 1e16, 1e-7, 1e308, 5e-324]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)


KEYS = ['"op"', '"id"', '"workspace"', '"x"', '"\\u00e9"']
RAW = ['"ping"', '"resume"', '"a\\ud800"', '"\\udfff"', '"\\ud83d\\ude00"', "1", "-0", "1.5",
       "1e400", "-1e400", "18446744073709551615", "18446744073709551616",
       "-9223372036854775809", "9" * 400, "true", "null", "NaN", '["x",1]', '["\\udc00"]',
       '{"y":1e400,"y":1}', '{"y":"\\ud800"}', '{"y":2}', '"\u00e9"', '"\\u0000"', "[]",
       "[[[[1]]]]"]  # fragments of request lines, written as a client might


def typed(value: object) -> object:
    """A value with every number's type kept, for comparison (1 and 1.0 differ)."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [typed(item) for item in value]
    return (type(value).__name__, value)


@pytest.fixture(autouse=True)
def lean_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The door's renderer: orjson not installed (a test's daemon may have)."""
    monkeypatch.setattr(switches.CONFIG, "fast_dump", None)


class TestRenderedAsOrjson:
    @settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
    @given(VALUES)
    def test_what_orjson_renders_reads_back_the_same_and_what_it_refuses_is_refused(
            self, value: object) -> None:
        try:
            want = orjson.loads(orjson.dumps(value))
        except (orjson.JSONEncodeError, TypeError):
            with pytest.raises((ValueError, TypeError)):
                jsonio.dumps_like_orjson(value)
            return
        assert typed(orjson.loads(jsonio.dumps_like_orjson(value))) == typed(want)

    @pytest.mark.parametrize("value", [
        {"float": 1.0, "int": 1, "big": 1e16, "tiny": 5e-324, "nan": float("nan")},
        ["\x7f\u2028\x00\x1f\"\\", "é", "\U0001f600"],
        [(1 << 64) - 1, -(1 << 63)],
    ])
    def test_edges_read_back_as_orjsons(self, value: object) -> None:
        lean = orjson.loads(jsonio.dumps_like_orjson(value))
        assert typed(lean) == typed(orjson.loads(orjson.dumps(value)))

    @pytest.mark.parametrize("value", [1 << 64, -(1 << 63) - 1, "\ud800", {"k": ["\udfff"]}])
    def test_what_orjson_refuses_is_refused(self, value: object) -> None:
        with pytest.raises(orjson.JSONEncodeError):
            orjson.dumps(value)
        with pytest.raises(ValueError):
            jsonio.dumps_like_orjson(value)

    def test_a_door_answer_reads_as_the_daemons(self) -> None:
        """The bytes protocol.py writes for a ping and an id are orjson's in value."""
        body = protocol.ping_body("abcd")
        lean = protocol.reply(body, b"abcd:0", protocol.id_suffix({"id": "x\x7f"}))
        switches.configure(fast_dump=orjson.dumps)
        try:
            fast = protocol.reply(body, b"abcd:0", protocol.id_suffix({"id": "x\x7f"}))
        finally:
            switches.configure(fast_dump=None)
        assert lean != fast  # DEL: escaped by jsonio, raw in orjson
        assert orjson.loads(lean) == orjson.loads(fast)


class TestRequestsReadAsOrjson:
    @settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(TEXT, VALUES, max_size=5), st.booleans())
    def test_a_request_the_door_reads_is_what_orjson_reads(
            self, request_: dict[str, object], ascii_only: bool) -> None:
        try:
            line = json.dumps(request_, ensure_ascii=ascii_only).encode("utf-8",
                                                                      "surrogatepass")
        except ValueError:
            return
        assert self._agrees(line), line

    @settings(max_examples=600)
    @given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(RAW)), max_size=6),
           st.sampled_from(["", " ", "\r", "\t\n", " x", "{}"]))
    def test_a_line_of_raw_pairs_the_door_reads_is_what_orjson_reads(
            self, pairs: list[tuple[str, str]], tail: str) -> None:
        """Lines written by hand, keys repeated: a value the scanner drops for a later
        one is still one orjson refuses the whole line for."""
        line = "{" + ",".join(f"{key}:{raw}" for key, raw in pairs) + "}" + tail
        assert self._agrees(line.encode("utf-8", "surrogatepass")), line

    @settings(max_examples=300)
    @given(st.binary(max_size=64))
    def test_any_bytes_the_door_reads_are_what_orjson_reads(self, line: bytes) -> None:
        assert self._agrees(b"{" + line)

    @pytest.mark.parametrize("line", [
        b'{"op":"nope\\ud800","op":"ping","id":1}', b'{"op":"ping","id":1e400,"id":2}',
        b'{"op":"ping","id":["\\udfff"],"id":7}', b'{"op":"ping","id":' + b"9" * 400
        + b',"id":7}', b'{"op":"ping","x":{"y":1e400,"y":1},"x":2}',
    ])
    def test_a_value_dropped_for_a_repeated_key_still_counts(self, line: bytes) -> None:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(line)
        assert _request(line) is None

    @pytest.mark.parametrize("line", [
        b'{"op":"ping","id":1e400}', b'{"op":"ping","id":NaN}', b'{"id":"\\ud800"}',
        b'{"id":18446744073709551616}', b'{"id":-9223372036854775809}', b'{"id":1.5}',
        b'\xef\xbb\xbf{"op":"ping"}', b' {"op":"ping"}', b'{"op":"ping"} x',
        b'{"op":"ping"}{}', b'["ping"]', b'{"op":"\xff"}', b"{" * 3000 + b"}" * 3000,
    ])
    def test_lines_the_two_could_read_apart_go_to_the_daemon(self, line: bytes) -> None:
        assert _request(line) is None

    @pytest.mark.parametrize("line", [
        b'{"op":"ping"}', b'{"op":"ping"} \r', b'{"id":18446744073709551615,"op":"ping"}',
        '{"workspace":"/home/jos\u00e9/ws","argv":["--x"],"detail":true}'.encode(),
        b'{"op":"ping","op":"resume"}',
    ])
    def test_plain_lines_are_read(self, line: bytes) -> None:
        assert typed(_request(line)) == typed(orjson.loads(line))

    @pytest.mark.parametrize("depth", [10, 500, 900, 990, 1100, 5000])
    def test_deep_nesting_is_read_as_orjson_reads_it_or_handed_over(self, depth: int) -> None:
        assert self._agrees(b'{"a":' + b"[" * depth + b"]" * depth + b"}")

    @staticmethod
    def _agrees(line: bytes) -> bool:
        """Whether the door hands the line over, or reads it as orjson does (orjson
        refusing a line the door read raises: the test fails)."""
        got = _request(line)
        return got is None or typed(got) == typed(orjson.loads(line))


HEAVY = ("orjson", "fasteners", "typing", "asyncio", "structlog", "logging", "watchdog",
         "git", "dataclasses")
OPEN_AND_LIST = """
import sys
before = set(sys.modules)
from storyd import config
from storyd.cli.commands import serve
from storyd.core.flags import parse
flags = parse(sys.argv[1:], serve.FLAGS, serve.USAGE)
bound, door, early = serve.opened(flags, config.load(None))
loaded = set(sys.modules) - before
door.close(lambda sock, data: sock.close())
bound.close()
print(" ".join(sorted(name for name in HEAVY if name in loaded)))
"""
ACTIVATE = 'export LISTEN_PID=$$; exec "$0" "$@" 3<&0 0</dev/null'


@pytest.mark.parametrize("activated", [True, False], ids=["activated", "bound"])
def test_the_door_opens_before_the_heavy_imports(tmp_path: Path, activated: bool) -> None:
    """What `storyd serve` imports up to its open door: a socket systemd hands over
    needs none of HEAVY; one bound here takes fasteners' lock (and its typing, logging)."""
    path = tmp_path / "run" / "storyd.sock"
    path.parent.mkdir(mode=0o700)
    env = daemon_env(tmp_path, path)
    script = f"HEAVY = {HEAVY!r}\n{OPEN_AND_LIST}"
    argv = [sys.executable, "-c", script]
    listener = None
    if activated:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(4)
        env.update(LISTEN_FDS="1", LISTEN_FDNAMES="storyd.socket")
        argv = ["sh", "-c", ACTIVATE, *argv]
    else:
        argv += ["--socket", str(path)]
    try:
        done = subprocess.run(argv, stdin=listener, capture_output=True, text=True, env=env,
                              timeout=60, check=False)
    finally:
        if listener is not None:
            listener.close()
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    if activated:
        assert loaded == []
    else:
        assert "fasteners" in loaded, loaded  # the single-instance lock: the check bites
        assert not {"orjson", "asyncio", "structlog", "watchdog", "git"} & set(loaded)
    assert not os.path.exists(str(path) + ".lock") or not activated
