"""`storyd mcp`'s resources, one per unit in flight (`storyd://unit/<id>`), kept in step
with the workspace: units that start are added, units that finish are taken away, and
`notifications/resources/list_changed` tells listening clients to list them again.

The catalogue is synced when the server starts, when the daemon reports a change (the
follower, storyd.agents.mcp_events), and whenever `status` or the in-flight resource is
read; without a daemon, on those reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["UNIT_PREFIX", "Catalogue"]

UNIT_PREFIX = "storyd://unit/"


class Catalogue:
    """The unit resources the server lists, and the function that reads one."""

    def __init__(self, server: MCPServer[Any], read: Callable[[str], str]) -> None:
        self.server = server
        self.read = read
        self.listed: dict[str, str] = {}  # uri -> unit id
        self._lock = threading.Lock()

    def sync(self, units: list[dict[str, object]]) -> bool:
        """List exactly these units; True when the list changed."""
        from mcp.server.mcpserver.resources import FunctionResource

        wanted = {
            UNIT_PREFIX + quote(str(u["unit"]), safe=""): u
            for u in units if isinstance(u.get("unit"), str)
        }  # fmt: skip
        with self._lock:
            store = self.server._resource_manager._resources  # the SDK has no remove
            gone = [uri for uri in self.listed if uri not in wanted]
            for uri in gone:
                store.pop(uri, None)
                del self.listed[uri]
            added = [uri for uri in wanted if uri not in self.listed]
            for uri in added:
                unit = wanted[uri]
                key = str(unit["unit"])
                point = unit.get("resumePoint") or "unreadable"
                self.server.add_resource(FunctionResource(
                    uri=uri, name=key, title=f"{unit.get('format')} {key}",
                    description=(f"Where {key} ({unit.get('stateFile')}) resumes: at {point}, "
                                 f"{unit.get('done')}/{unit.get('total')} done"),
                    mime_type="application/json", fn=partial(self.read, key),
                ))  # fmt: skip
                self.listed[uri] = key
        return bool(gone or added)
