"""The answer cap: no answer, on any door, is larger than `limits.max_answer_bytes`.

A bigger one (an epic view of 100,000 tasks is about 10 MB of JSON) is refused with a
DataError (exit 65) that names its size, the cap and how to raise it, rather than
built, held and written while every other client waits (issue 29). The daemon takes
the cap from its configuration; the direct path uses the default.
"""

from __future__ import annotations

from storyd.core.errors import DataError

__all__ = ["DEFAULT_MAX_ANSWER_BYTES", "answer_too_large", "check_answer"]

DEFAULT_MAX_ANSWER_BYTES = 16 * 1024 * 1024


def answer_too_large(size: int, cap: int) -> DataError:
    """The error of an answer over the cap."""
    return DataError(
        f"the answer is {size:,} bytes, larger than the {cap:,}-byte answer cap; ask for "
        "less (one story's resume rather than an epic's view), or raise "
        "limits.max_answer_bytes in storyd's configuration"
    )


def check_answer(size: int, cap: int = DEFAULT_MAX_ANSWER_BYTES) -> None:
    """Raise `answer_too_large` when an answer of `size` bytes is over `cap`."""
    if size > cap:
        raise answer_too_large(size, cap)
