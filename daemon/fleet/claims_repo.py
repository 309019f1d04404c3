"""Which repository a workspace is, for the claims bucket: one name for every clone.

The remote (`origin`, else the first; storyd.fleet.summary.Repos reads it with git) as
host and path, without user, scheme or `.git`: `git@host:team/app.git`,
`https://tok@host/team/app` and `https://host/team/app.git` are all `host/team/app`.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from storyd.fleet.summary import Repos

__all__ = ["Repositories", "repository"]

_TTL = 10.0  # seconds a workspace's answer is kept


def repository(url: str | None) -> str | None:
    """A remote URL as the repository's name (None: no remote)."""
    if not url:
        return None
    if "://" in url:
        parts = urlsplit(url)
        name = f"{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}{parts.path}"
    elif ":" in url and not url.startswith("/"):
        host, _, path = url.partition(":")
        name = f"{host.rpartition('@')[2]}/{path}"
    else:
        name = url  # a local path: the same folder on every machine is the same repository
    name = name.rstrip("/").removesuffix(".git")
    return name or None


class Repositories:
    """Each workspace's repository name, read with git and kept 10 s."""

    def __init__(self) -> None:
        self._repos = Repos()
        self._kept: dict[str, tuple[float, str | None]] = {}

    def __call__(self, workspace: str) -> str | None:
        now = time.monotonic()
        kept = self._kept.get(workspace)
        if kept is not None and now - kept[0] < _TTL:
            return kept[1]
        found = repository(self._repos(workspace)[0])
        self._kept[workspace] = (now, found)
        return found
