r"""Words without `re` on a hook's path: the maximal runs of word characters and
hyphens (`[\w-]+`) of a text, and a command line quoted for a POSIX shell.

`re`, or `shlex` (which imports it), costs a hook's start ~2 ms (enum, its parser and
compiler). ASCII text (nearly every commit message, task id and path) is answered with
str.translate and set tests; any other text by the same regular expression, imported
then, so every answer is `re`'s or `shlex`'s own.

    runs(text)        re.findall(r"[\w-]+", text)
    is_run(text)      re.fullmatch(r"[\w-]+", text) is not None
    shell_join(argv)  shlex.join(argv)
"""

from __future__ import annotations

__all__ = ["is_run", "runs", "shell_join"]

_ASCII_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_RUN = _ASCII_WORD | {"-"}
_APART = {c: " " for c in range(128) if chr(c) not in _RUN}  # other ASCII: a separator
_SAFE = _ASCII_WORD | frozenset("@%+=:,./-")  # what shlex.quote leaves unquoted
_RUN_PATTERN = r"[\w-]+"


def runs(text: str) -> list[str]:
    """The maximal runs of word characters and hyphens, in order."""
    if text.isascii():
        return text.translate(_APART).split()
    import re

    return re.findall(_RUN_PATTERN, text)


def is_run(text: str) -> bool:
    """Whether `text` is one run of word characters and hyphens."""
    if text.isascii():
        return bool(text) and set(text) <= _RUN
    import re

    return re.fullmatch(_RUN_PATTERN, text) is not None


def _quote(word: str) -> str:
    if not word:
        return "''"
    if word.isascii() and set(word) <= _SAFE:
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def shell_join(argv: list[str]) -> str:
    """The words as one shell command line, each quoted where the shell needs it."""
    return " ".join(_quote(word) for word in argv)
