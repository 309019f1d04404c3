"""`storyd resume`: the seed skill's drop-in, asking the daemon first.

Its help text is storyd.core.query.ABOUT, which the daemon's `resume-cli` op prints too.
"""

from __future__ import annotations

import os

from storyd.api.resume import output
from storyd.core.query import FLAGS, USAGE, Output

__all__ = ["FLAGS", "USAGE", "emit", "main"]


def emit(result: Output) -> int:
    """Print an Output (stderr lines, then stdout) and return its exit code."""
    if result.stderr:
        os.write(2, "".join(line + "\n" for line in result.stderr).encode("utf-8", "replace"))
    if result.stdout:
        os.write(1, result.stdout)
    return result.code


def main(argv: list[str]) -> int:
    """Parse the flags, ask the daemon unless --direct, else read the files."""
    return emit(output(argv, os.getcwd()))
