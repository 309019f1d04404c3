"""An agent's settings file, edited by `storyd install` and given back by `uninstall`.

    SettingsFile   a JSON settings file: parsed, its indentation kept, written whole
    TomlFile       Codex's config.toml: read with tomllib, edited as text (one table)

Each is read through storyd.agents.guarded (a project's file that resolves outside the
project, a FIFO, a device, a file over 4 MiB: refused) and parsed from those bytes, so
an edit can be made again from a writer's newer bytes (`parse`). A key twice in one JSON
object is refused, naming it: json would keep the last one and silently drop the other.
A symlinked user file (a dotfile manager's) stays a symlink: the file it points to is
the one edited. The first install records the file's exact text before and after
($XDG_STATE_HOME/storyd/installs/, mode 0600); an uninstall that finds the file as
storyd left it writes that text back byte for byte (or removes a file storyd created),
and otherwise takes out storyd's entries only, keeping what the user added since.
"""

from __future__ import annotations

import os
import re
from typing import Self

from storyd.agents import guarded
from storyd.core.errors import DataError

__all__ = ["SettingsFile", "TomlFile"]


def _record_path(path: str) -> str:
    import hashlib

    from storyd.api.reconcile.undo import state_dir

    key = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(state_dir(), "installs", key + ".json")


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """json's object_pairs_hook: an object, refusing a key that appears twice (any depth)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


class _File:
    """What both kinds share: where to write, the text before, the exact-restore record."""

    def __init__(self, path: str, project: str | None = None) -> None:
        self.path = path  # as the user knows it (maybe a symlink)
        self.real = guarded.resolve(path, project)  # the file written
        self.raw: bytes | None = None  # its bytes as read
        self.original: str | None = None

    def load(self) -> Self:
        """Read the file (guarded) and parse it."""
        return self.parse(guarded.read(self.real, self.path))

    def parse(self, raw: bytes | None) -> Self:
        """Take these bytes as the file's (None: absent), dropping any edit made."""
        self.raw = raw
        try:
            self.original = None if raw is None else raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{self.path}: not UTF-8 text (byte {exc.start})") from None
        return self

    def text(self) -> str:
        raise NotImplementedError
    def remember(self, after: str) -> None:
        """Keep the text before the first install and the text storyd wrote."""
        import json

        path = _record_path(self.real)
        before = self.original
        try:
            with open(path, encoding="utf-8") as handle:
                old = json.load(handle)
            if isinstance(old, dict) and old.get("after") == self.original:
                before = old.get("before")  # a re-install: the user's text is the first one
        except (OSError, ValueError):
            pass
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"path": self.real, "before": before, "after": after}, handle)

    def recall(self) -> tuple[bool, str | None]:
        """(True, the text before storyd's first install) when the file is exactly as
        storyd left it; else (False, None). The record is used once."""
        import json

        path = _record_path(self.real)
        try:
            with open(path, encoding="utf-8") as handle:
                old = json.load(handle)
        except (OSError, ValueError):
            return False, None
        if not isinstance(old, dict) or old.get("after") != self.original:
            return False, None
        before = old.get("before")
        return True, before if isinstance(before, str) else None

    def forget(self) -> None:
        import contextlib

        with contextlib.suppress(OSError):
            os.unlink(_record_path(self.real))


class SettingsFile(_File):
    """A JSON settings file and its parsed content (`data` None: absent)."""

    def __init__(self, path: str, project: str | None = None) -> None:
        super().__init__(path, project)
        self.data: dict[str, object] | None = None
        self.indent = 2

    def parse(self, raw: bytes | None) -> Self:
        import json

        super().parse(raw)
        self.data, self.indent = None, 2
        if self.original is None:
            return self
        if not self.original.strip():
            self.data = {}
            return self
        try:
            value = json.loads(self.original, object_pairs_hook=_unique)
        except json.JSONDecodeError as exc:
            msg = f"{self.path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            raise DataError(msg) from None
        except _Duplicate as exc:
            key = json.dumps(exc.key, ensure_ascii=False)
            msg = f"{self.path}: the key {key} appears twice in one object; fix it by hand"
            raise DataError(msg) from None
        if not isinstance(value, dict):
            raise DataError(f"{self.path}: expected a JSON object at the top")
        self.data = value
        found = re.search(r"\n([ \t]+)\S", self.original)
        if found:
            self.indent = len(found.group(1).expandtabs(4)) or 2
        return self

    def text(self) -> str:
        import json

        return json.dumps(self.data, indent=self.indent, ensure_ascii=False) + "\n"

    def table(self, key: str) -> dict[str, object]:
        """The object under `key` (created when absent); DataError when it is not one."""
        data = self.data if self.data is not None else {}
        self.data = data
        value = data.setdefault(key, {})
        if not isinstance(value, dict):
            raise DataError(f'{self.path}: "{key}" is not an object; fix it by hand')
        return value


class TomlFile(_File):
    """Codex's config.toml: one `[mcp_servers.NAME]` table set or taken out as text, so
    the user's other tables, comments and layout stay as they are."""

    def __init__(self, path: str, project: str | None = None) -> None:
        super().__init__(path, project)
        self.body = ""
        self.data: dict[str, object] = {}

    def parse(self, raw: bytes | None) -> Self:
        import tomllib

        super().parse(raw)
        self.body = self.original or ""
        try:
            self.data = tomllib.loads(self.body)
        except tomllib.TOMLDecodeError as exc:
            raise DataError(f"{self.path}: not valid TOML: {exc}") from None
        return self

    def text(self) -> str:
        return self.body

    def server(self, name: str) -> object:
        servers = self.data.get("mcp_servers")
        return servers.get(name) if isinstance(servers, dict) else None

    def _span(self, name: str) -> tuple[int, int] | None:
        """Where the `[mcp_servers.NAME]` table's text starts and ends (next header)."""
        header = re.compile(rf"^[ \t]*\[[ \t]*mcp_servers[ \t]*\.[ \t]*\"?{re.escape(name)}\"?"
                            r"[ \t]*\][ \t]*(?:#.*)?$", re.M)  # fmt: skip
        found = header.search(self.body)
        if found is None:
            return None
        after = re.compile(r"^[ \t]*\[", re.M).search(self.body, found.end())
        return found.start(), after.start() if after else len(self.body)

    def set_server(self, name: str, command: str, args: list[str]) -> None:
        """Write the table (replacing storyd's own), checking the result parses as TOML."""
        import json
        import tomllib

        block = (f"[mcp_servers.{name}]\ncommand = {json.dumps(command)}\n"
                 f"args = {json.dumps(args)}\n")  # fmt: skip
        span = self._span(name)
        if span is None:
            if self.server(name) is not None:
                raise DataError(f"{self.path}: mcp_servers.{name} is written inline; "
                                "fix it by hand")  # fmt: skip
            sep = "" if not self.body or self.body.endswith("\n\n") else (
                "\n" if self.body.endswith("\n") else "\n\n")  # fmt: skip
            body = self.body + sep + block
        else:
            tail = self.body[span[1]:]
            body = self.body[: span[0]] + block + ("\n" if tail else "") + tail
        self.data = tomllib.loads(body)  # what is written always parses
        self.body = body

    def drop_server(self, name: str) -> bool:
        """Take the table out (with the blank line before it); False when it is absent."""
        import tomllib

        span = self._span(name)
        if span is None:
            return False
        start, end = span
        head = self.body[:start]
        tail = self.body[end:].lstrip("\n") if end < len(self.body) else ""
        if not tail:
            head = head.rstrip("\n") + ("\n" if head.strip() else "")
        body = head + tail if head.strip() else tail
        self.data = tomllib.loads(body)
        self.body = body
        return True
