"""`resume`: where one unit restarts, the daemon's answer unless `direct`, else (or when
no daemon answers) the direct read under the writers' lock.

`output()` is `storyd resume ARGV`: what it prints and returns, never raising. `ask()`
is the same for a Query built by a door (the MCP server), and `detail()` its typed
result: the envelope, the findings and the warnings, or the typed error for the exit
code. This module is on `storyd resume`'s start-up path: no typing, no dataclasses,
everything past the query imported when used (tests/test_resume_imports.py).
"""

from __future__ import annotations

from storyd.core.errors import UsageError
from storyd.core.query import Output, Query, from_argv

__all__ = ["Resumed", "argv_of", "ask", "detail", "output"]


def output(argv: list[str], cwd: str) -> Output:
    """What `storyd resume ARGV` run in `cwd` prints and returns."""
    try:
        query = from_argv(argv, cwd)
    except UsageError as exc:
        return Output(exc.code, b"", tuple(exc.message.split("\n")))
    return _answer(query, argv, cwd)


def _answer(query: Query, argv: list[str], cwd: str) -> Output:
    if query.state_file is not None and query.state_file.startswith("/"):
        from storyd.api.claude_resume import output as claude_list  # outside: never the daemon's

        answered = claude_list(query)
        if answered is not None:
            return answered
    if not query.direct:
        from storyd.api.client import ask_cli
        from storyd.core.paths import socket_path

        answered = ask_cli(socket_path(query.socket), argv, cwd, query.timeout)
        if answered is not None:
            return answered
    from storyd.api.answers import direct

    return direct(query)


def argv_of(query: Query) -> list[str]:
    """`storyd resume`'s flags for a Query, each as `--name=value` (a value is never
    read as a flag, whatever it spells)."""
    pairs = (
        ("workspace", query.workspace), ("epic-id", query.epic), ("story-id", query.story),
        ("state-file", query.state_file), ("unit", query.unit), ("socket", query.socket),
        ("timeout", f"{query.timeout * 1000:g}"), ("lock-timeout", f"{query.lock_timeout:g}"),
        ("staleness", query.staleness), ("config", query.config),
    )  # fmt: skip
    argv = [f"--{name}={value}" for name, value in pairs if value is not None]
    return argv + ["--detail"] * query.detail + ["--direct"] * query.direct


def ask(query: Query) -> Output:
    """What `storyd resume` prints and returns for a Query (its workspace absolute)."""
    return _answer(query, argv_of(query), query.workspace)


class Resumed:
    """A `--detail` answer: the envelope, its findings, the next task and why (None when
    nothing is left), which path answered (`daemon` or `direct`) and the warnings the
    read gave."""

    __slots__ = ("envelope", "findings", "next", "source", "warnings")

    def __init__(
        self,
        envelope: dict[str, object],
        findings: list[dict[str, object]],
        source: str,
        warnings: tuple[str, ...],
        next: dict[str, object] | None = None,
    ) -> None:
        self.envelope = envelope
        self.findings = findings
        self.next = next
        self.source = source
        self.warnings = warnings

    def as_dict(self) -> dict[str, object]:
        """`storyd resume --detail`'s object, with the warnings."""
        return {
            "envelope": self.envelope,
            "findings": self.findings,
            "next": self.next,
            "source": self.source,
            "warnings": list(self.warnings),
        }


def detail(query: Query) -> Resumed:
    """The answer with its findings; the typed error for the exit code otherwise
    (StateFileMissing, StoryNotInState, UsageError, DataError, LockTimeout...)."""
    from storyd.api.refusals import error_for
    from storyd.core.jsonio import loads

    query.detail = True
    out = ask(query)
    if out.code != 0:
        raise error_for(out.code, "\n".join(out.stderr) or f"storyd resume exited {out.code}")
    body = loads(out.stdout)
    assert isinstance(body, dict), "--detail answers with one object"
    findings = body.get("findings")
    nxt = body.get("next")
    return Resumed(
        body["envelope"],
        findings if isinstance(findings, list) else [],
        str(body.get("source")),
        out.stderr,
        nxt if isinstance(nxt, dict) else None,
    )
