"""Which claims live in the fleet's bucket: daemon/api/claims.py asks `backend(workspace)`.

A fleet unit is a unit of a workspace whose git repository has a remote, on a machine
whose configuration has a `[fleet]` table: the remote names the same repository on
every machine (two clones in different folders are one place), so its claims go to the
JetStream bucket. Every other claim stays in the local SQLite store: a workspace
without a remote exists on this machine only.

The bucket's code is the fleet extra's (storyd.fleet.claims_kv, the only module that
imports `nats`). Imports run downward (tests/test_house.py: the fleet's layer is above
this one), so it is loaded by its name, as the registry loads a plugin, and used
through `Backend`'s methods; nothing is loaded without `[fleet]`. The configuration is
read from its usual path ($XDG_CONFIG_HOME/storyd/config.toml), or from the file a daemon
was started with (`--config OTHER`: `pin`), kept while the file is unchanged.
"""

from __future__ import annotations

import os
import sys

from storyd.core.switches import CONFIG

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from storyd.api.claims import Claim, Place
    from storyd.config.fleet import Fleet

    class Backend(Protocol):
        """What storyd.fleet.claims_kv.KvClaims gives this layer."""

        def remote(self, workspace: str) -> str | None: ...
        def claim(self, place: Place, remote: str, owner: str, ttl: float,
                  last: str | None = None) -> Claim: ...  # fmt: skip
        def release(self, place: Place, remote: str, owner: str,
                    force: bool = False) -> Claim | None: ...  # fmt: skip
        def fence(self, place: Place, remote: str, owner: str,
                  token: int | None) -> tuple[list[int], Claim | None]: ...  # fmt: skip
        def owned(self, owner: str, ttl: float | None = None, *,
                  drop: bool = False) -> list[Claim]: ...  # fmt: skip
        def listing(self) -> list[tuple[Claim, str]]: ...
        def close(self) -> None: ...


__all__ = ["BACKEND", "backend", "config_file", "configured", "listed", "owned", "pin",
           "pinned"]

BACKEND = "storyd.fleet.claims_kv"  # its class KvClaims(fleet) is the bucket


class _State:
    """This process's: the [fleet] read (with the file's stamp), the bucket of each
    [fleet] (by its settings), the configuration file pinned (a daemon's own)."""

    __slots__ = ("config", "pinned", "stores")

    def __init__(self) -> None:
        self.config: tuple[tuple[object, ...], Fleet | None] | None = None
        self.stores: dict[str, Backend] = {}
        self.pinned: str | None = None


def _state() -> _State:
    kept = CONFIG.fleet_claims
    if not isinstance(kept, _State):
        kept = CONFIG.fleet_claims = _State()
    return kept


def pin(path: str | None) -> None:
    """Claims in this process follow the configuration file `path` (a daemon started with
    `--config OTHER`: its own [claims] and [fleet], not the usual path's); None: the usual
    path again."""
    _state().pinned = path


def pinned() -> str | None:
    """The configuration file pinned in this process (None: the usual path)."""
    return _state().pinned


def config_file() -> str:
    """The configuration file claims follow here: the pinned one, else the usual path."""
    from storyd.core.paths import config_path

    return _state().pinned or config_path()


def _fleet() -> Fleet | None:
    """The [fleet] table of the configuration file (None: not configured)."""
    path = config_file()
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


def _store() -> Backend | None:
    """The configured fleet's bucket (None: no [fleet])."""
    fleet = _fleet()
    if fleet is None:
        return None
    kept = _state().stores
    key = repr(fleet)
    if key not in kept:
        __import__(BACKEND)
        kept[key] = sys.modules[BACKEND].KvClaims(fleet)
    return kept[key]


def configured() -> bool:
    """Whether claims may live in the fleet's bucket (reconcile's fence then checks even
    without a local claims database)."""
    return _fleet() is not None


def backend(workspace: str) -> tuple[Backend, str] | None:
    """The bucket and the repository's name for a fleet unit of `workspace`; None: the
    local store."""
    store = _store()
    remote = None if store is None else store.remote(workspace)
    return None if store is None or remote is None else (store, remote)


def owned(owner: str, ttl: float | None = None, *, drop: bool = False) -> list[Claim]:
    """Renew (`drop`: release) the fleet leases `owner` holds from this machine: those
    claims (none without [fleet]). Only a process that may reach the server calls it (the
    daemon answering a hook): the hooks' own path never does."""
    store = _store()
    return [] if store is None else store.owned(owner, ttl, drop=drop)


def listed(workspace: str | None, owner: str | None) -> list[Claim]:
    """The fleet's claims (of the repository of `workspace`, shown under this machine's
    folder; of one owner). An unreachable server: none, and one line on stderr saying
    why (the local claims are still listed)."""
    from storyd.core.errors import StorydError

    store = _store()
    remote = store.remote(workspace) if store is not None and workspace is not None else None
    if store is None or (workspace is not None and remote is None):
        return []
    try:
        found = store.listing()
    except StorydError as exc:
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
