"""Every byte the socket writes: answers, errors, the resume-cli framing, request fields.

NDJSON: one JSON object per line each way (docs/protocol.md). Every answer carries
`ok` and a `clock`; an optional request `id` is echoed. Errors are
`{ok: false, error: {code, name, message}}` with the CLI's exit codes. Answers are
built as bytes from pre-rendered parts (the cache keeps each envelope line rendered),
then closed by `finish` with the clock and the id.

The JSON is orjson's once the daemon's assembly installs it (switches `fast_dump`).
Before that, the early door's answers (server/door.py) are rendered by
jsonio.dumps_like_orjson, equal in value, so that the socket answers without orjson's
import (about 9 ms of a start: uuid, dataclasses, datetime, json).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from storyd import __version__
from storyd.core.errors import StorydError, UsageError
from storyd.core.jsonio import dumps_like_orjson
from storyd.core.model import Finding, Unit
from storyd.core.switches import CONFIG

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.core.pipeline import Answer
    from storyd.core.query import Output

__all__ = [
    "EX_NOPERM",
    "answer_body",
    "cli_frame",
    "direct_body",
    "error_body",
    "error_of",
    "event_line",
    "field",
    "findings_json",
    "finish",
    "id_suffix",
    "next_json",
    "output_frame",
    "ping_body",
    "reply",
]

EX_NOPERM = 77
_TYPES = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    list: "a list",
    float: "a number",
    dict: "an object",
}


def _dumps(value: object) -> bytes:
    """The value's JSON: orjson's in the daemon, jsonio's (equal in value) before it."""
    dump = CONFIG.fast_dump
    return dump(value) if dump is not None else dumps_like_orjson(value)


def id_suffix(request: dict[str, object]) -> bytes:
    """`,"id":<id>` when the request carried one (a string or an integer)."""
    if "id" not in request:
        return b""
    rid = request["id"]
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int)):
        raise UsageError("field 'id' must be a string or an integer")
    return b',"id":' + _dumps(rid)


def finish(body: bytes, clock: bytes, suffix: bytes) -> bytes:
    """Close a pre-rendered answer body: add the clock and the id, end the line."""
    return body + b',"clock":"' + clock + b'"' + suffix + b"}\n"


def error_body(code: int, name: str, message: str) -> bytes:
    """The body of an error answer (pass it to finish)."""
    return b'{"ok":false,"error":' + _dumps({"code": code, "name": name, "message": message})


def error_of(exc: StorydError) -> bytes:
    """The body of an error answer for a storyd error."""
    return error_body(exc.code, exc.name, exc.message)


def reply(body: Mapping[str, object], clock: bytes, suffix: bytes) -> bytes:
    """A whole answer line from a JSON object whose first key is `ok`."""
    return finish(_dumps(body)[:-1], clock, suffix)


def event_line(event: Mapping[str, object]) -> bytes:
    """A subscriber's event line."""
    return _dumps(event) + b"\n"


def findings_json(findings: Iterable[Finding]) -> bytes:
    """The findings of an answer as a JSON array (the wire form of each)."""
    return _dumps([f.as_dict() for f in findings])


def next_json(unit: Unit) -> bytes:
    """A unit's `next` object (storyd.core.nextstep) as JSON; `null` when none."""
    from storyd.core.nextstep import next_of

    return _dumps(next_of(unit))


def answer_body(
    envelope_line: bytes, findings_json: bytes, source: bytes, generation: int | None,
    next_json: bytes = b"null",
) -> bytes:
    """The body of a `resume` answer from its rendered parts (pass it to finish).

    `envelope_line` is the seed's envelope as `storyd resume` prints it (newline
    included), `next_json` the unit's next task (storyd.core.nextstep, as JSON),
    `source` is `cache` or `direct`, `generation` None for a direct read.
    """
    return (
        b'{"ok":true,"envelope":'
        + envelope_line.rstrip(b"\n")
        + b',"findings":'
        + findings_json
        + b',"next":'
        + next_json
        + b',"source":"'
        + source
        + b'","generation":'
        + (b"null" if generation is None else str(generation).encode())
    )


def direct_body(answer: Answer, generation: int | None) -> bytes:
    """The body of a `resume` answer read from the files now (a cache miss, the early
    door): `generation` is the cache's when it holds the same line, else None."""
    return answer_body(answer.line, findings_json(answer.findings), b"direct", generation,
                       next_json(answer.unit))


def ping_body(instance: str) -> dict[str, object]:
    """The `ping` answer (pass it to reply): the daemon's version, pid and instance."""
    return {"ok": True, "version": __version__, "pid": os.getpid(), "instance": instance}


def output_frame(output: Output) -> bytes:
    """A `storyd resume` outcome as the `resume-cli` reply (cli_frame)."""
    return cli_frame(output.code, output.stdout, output.stderr)


def cli_frame(code: int, stdout: bytes, stderr: tuple[str, ...] | list[str] = ()) -> bytes:
    """The `resume-cli` reply: what `storyd resume` would print and its exit code.

    Each stderr line as `!line`, stdout as it is, then `=code version` (the shell fast
    path, bin/storyd-resume, turns this back into the two streams and the exit code).
    """
    err = "".join(f"!{part}\n" for line in stderr for part in line.split("\n"))
    return err.encode("utf-8", "replace") + stdout + f"={code} {__version__}\n".encode()


def field(
    request: dict[str, object],
    name: str,
    kind: type,
    *,
    required: bool = False,
    default: object = None,
) -> object:
    """A request field of the given type, or UsageError naming the field."""
    value = request.get(name)
    if value is None:
        if required:
            raise UsageError(f"missing field {name!r}")
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = _TYPES.get(kind, kind.__name__)
        raise UsageError(f"field {name!r} must be {expected}, not {type(value).__name__}")
    return value
