"""`storyd resume`: the seed skill's drop-in, asking the daemon first.

Its help text is storyd.core.query.ABOUT, which the daemon's `resume-cli` op prints too.
"""

from __future__ import annotations

import os

from storyd.core.errors import UsageError
from storyd.core.query import FLAGS, USAGE, Output, from_argv

__all__ = ["FLAGS", "USAGE", "emit", "main", "output"]


def emit(output: Output) -> int:
    """Print an Output (stderr lines, then stdout) and return its exit code."""
    if output.stderr:
        os.write(2, "".join(line + "\n" for line in output.stderr).encode("utf-8", "replace"))
    if output.stdout:
        os.write(1, output.stdout)
    return output.code


def output(argv: list[str], cwd: str) -> Output:
    """What `storyd resume ARGV` run in `cwd` prints and returns: the daemon's answer
    unless --direct, else (or when no daemon answers) the direct read."""
    try:
        query = from_argv(argv, cwd)
    except UsageError as exc:
        return Output(exc.code, b"", tuple(exc.message.split("\n")))
    if not query.direct:
        from storyd.api.client import ask_cli
        from storyd.core.paths import socket_path

        answered = ask_cli(socket_path(query.socket), argv, cwd, query.timeout)
        if answered is not None:
            return answered
    from storyd.api.answers import direct

    return direct(query)


def main(argv: list[str]) -> int:
    """Parse the flags, ask the daemon unless --direct, else read the files."""
    return emit(output(argv, os.getcwd()))
