"""Which claims live in the fleet's bucket: daemon/api/claims.py asks `backend(workspace)`.

A fleet unit is a unit of a workspace whose git repository has a remote, on a machine
whose configuration has a `[fleet]` table: the remote names the same repository on
every machine (two clones in different folders are one place), so its claims go to the
JetStream bucket (storyd.fleet.claims_kv). Every other claim stays in the local SQLite
store: a workspace without a remote exists on this machine only.

Nothing here imports `nats`: the bucket's module is loaded only for a fleet unit. The
configuration is read from its usual path ($XDG_CONFIG_HOME/storyd/config.toml) and
kept while the file is unchanged; a workspace's remote is kept 10 s.
"""

from __future__ import annotations

import os
import time

from storyd.core.switches import CONFIG

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.claims import Claim
    from storyd.config.fleet import Fleet
    from storyd.fleet.claims_kv import KvClaims

__all__ = ["backend", "configured", "each_store", "listed", "repository"]

_REMOTE_TTL = 10.0


def repository(url: str | None) -> str | None:
    """A remote as one name for every clone: host and path, without user, scheme or
    `.git` (`git@host:team/app.git` and `https://tok@host/team/app` are `host/team/app`)."""
    if not url:
        return None
    from urllib.parse import urlsplit

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


class _State:
    """This process's: the [fleet] read (with the file's stamp), each workspace's
    repository (with when it was read), the bucket of each [fleet]."""

    __slots__ = ("config", "remotes", "stores")

    def __init__(self) -> None:
        self.config: tuple[tuple[object, ...], Fleet | None] | None = None
        self.remotes: dict[str, tuple[float, str | None]] = {}
        self.stores: dict[str, KvClaims] = {}


def _state() -> _State:
    kept = CONFIG.fleet_claims
    if not isinstance(kept, _State):
        kept = CONFIG.fleet_claims = _State()
    return kept


def _fleet() -> Fleet | None:
    """The [fleet] table of the configuration file (None: not configured)."""
    from storyd.core.paths import config_path

    path = config_path()
    try:
        st = os.stat(path)
    except OSError:
        return None
    state = _state()
    stamp = (path, st.st_mtime_ns, st.st_size, st.st_ino)
    if state.config is not None and state.config[0] == stamp:
        return state.config[1]
    from storyd.config.loader import load

    fleet = load(path).fleet
    state.config = (stamp, fleet)
    return fleet


def _remote(workspace: str) -> str | None:
    remotes = _state().remotes
    kept = remotes.get(workspace)
    now = time.monotonic()
    if kept is not None and now - kept[0] < _REMOTE_TTL:
        return kept[1]
    from storyd.fleet.summary import Repos

    found = repository(Repos()(workspace)[0])
    remotes[workspace] = (now, found)
    return found


def configured() -> bool:
    """Whether claims may live in the fleet's bucket (reconcile's fence then checks even
    without a local claims database)."""
    return _fleet() is not None


def each_store() -> list[KvClaims]:
    """The bucket of the configured fleet when there is one (for renewing or releasing
    every claim of an owner); empty otherwise."""
    fleet = _fleet()
    return [] if fleet is None else [_store(fleet)]


def listed(workspace: str | None, owner: str | None) -> list[Claim]:
    """The fleet's claims (of the repository of `workspace`, shown under this machine's
    folder; of one owner). An unreachable server: none, and one line on stderr saying
    why (the local claims are still listed)."""
    from storyd.core.errors import StorydError

    stores = each_store()
    remote = _remote(workspace) if stores and workspace is not None else None
    if not stores or (workspace is not None and remote is None):
        return []
    try:
        found = stores[0].listing()
    except StorydError as exc:
        import sys

        sys.stderr.write(f"storyd: fleet claims not listed: {exc.message}\n")
        return []
    out = []
    for held, repo in found:
        if owner is not None and held.owner != owner:
            continue
        if workspace is not None:
            if repo != remote:
                continue
            held.place.workspace = workspace
        out.append(held)
    return out


def _store(fleet: Fleet) -> KvClaims:
    from storyd.fleet.claims_kv import KvClaims

    kept = _state().stores
    key = repr(fleet)
    if key not in kept:
        kept[key] = KvClaims(fleet)
    return kept[key]


def backend(workspace: str) -> tuple[KvClaims, str] | None:
    """The bucket and the repository's name for a fleet unit of `workspace`; None: the
    local store."""
    fleet = _fleet()
    if fleet is None:
        return None
    remote = _remote(workspace)
    if remote is None:
        return None
    return _store(fleet), remote
