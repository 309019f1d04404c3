r"""storyd.core.words answers what `re` and `shlex` answer, for any text.

    runs(text)        re.findall(r"[\w-]+", text)
    is_run(text)      re.fullmatch(r"[\w-]+", text) is not None
    shell_join(argv)  shlex.join(argv)
"""

from __future__ import annotations

import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storyd.core.words import is_run, runs, shell_join

# ASCII (the str.translate path) with every separator, and beyond (the `re` path)
ALPHABET = st.sampled_from(list("aZ09_-#. \t\n\x1c\x1e\x1f'\"$`\\@%+=:,/é\u00b2\u0661\u2013日"))
TEXT = st.text(ALPHABET, max_size=40) | st.text(max_size=40)


class TestSameAsRe:
    """Word runs as the regular expression finds them."""

    @settings(max_examples=400, deadline=None)
    @given(TEXT)
    def test_runs(self, text: str) -> None:
        assert runs(text) == re.findall(r"[\w-]+", text)

    @settings(max_examples=400, deadline=None)
    @given(TEXT)
    def test_is_run(self, text: str) -> None:
        assert is_run(text) == (re.fullmatch(r"[\w-]+", text) is not None)

    @pytest.mark.parametrize("text", [
        "TASK-0049-0013-004: work landed\n\nbody #12", "", "---", "a\x1fb", "x²y", "naïve-id",
    ])  # fmt: skip
    def test_examples(self, text: str) -> None:
        assert runs(text) == re.findall(r"[\w-]+", text)
        assert is_run(text) == (re.fullmatch(r"[\w-]+", text) is not None)


class TestSameAsShlex:
    """A command line quoted as shlex.join quotes it."""

    @settings(max_examples=400, deadline=None)
    @given(st.lists(TEXT, max_size=5))
    def test_shell_join(self, argv: list[str]) -> None:
        assert shell_join(argv) == shlex.join(argv)

    def test_a_printed_fix(self) -> None:
        argv = ["/opt/my tools/storyd", "reconcile", "--state-file", "it's.json", ""]
        assert shell_join(argv) == shlex.join(argv)
