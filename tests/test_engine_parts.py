"""The daemon's rooms: the engine is a composition of one part per job, the transport
owns its subscriptions, and the settings hold one frozen Limits that a reload swaps."""

from __future__ import annotations

import ast
import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from storyd.config import Limits
from storyd.core import log
from storyd.core.pipeline import Options
from storyd.server import protocol
from storyd.server.engine import Engine
from storyd.server.service import Settings
from storyd.server.subscribers import Subscribers, TooManySubscribers

SERVER = Path(__file__).resolve().parent.parent / "daemon" / "server"


class TestTheEngine:
    """Engine is the thin composition: its methods are its parts' own."""

    @pytest.mark.parametrize(
        ("name", "part"),
        [
            ("serve", "queries"), ("known_absent", "queries"), ("summaries", "queries"),
            ("scan", "tracking"), ("touch", "tracking"), ("add_workspace", "tracking"),
            ("remove_workspace", "tracking"), ("refresh", "installer"),
            ("recheck", "installer"), ("read", "reads"),
        ],
    )  # fmt: skip
    def test_a_method_is_its_parts_own(self, name: str, part: str) -> None:
        engine = Engine(Options(staleness="mtime"), adapters=[])
        assert getattr(engine, name).__self__ is getattr(engine, part)

    def test_the_parts_share_one_map_of_workspaces(self, tmp_path: Path) -> None:
        engine = Engine(Options(staleness="mtime"), adapters=[])
        ws = engine.add_workspace(str(tmp_path))
        assert engine.queries.workspaces[str(tmp_path)] is ws
        assert engine.tracking.tracked is engine.workspaces is engine.queries.workspaces
        assert engine.workspace_count() == 1
        assert engine.remove_workspace(str(tmp_path)) is True
        assert engine.workspace_count() == 0

    def test_new_detectors_are_the_engines(self) -> None:
        engine = Engine(Options(staleness="mtime"), adapters=[])
        assert engine.detect is None

        def detect(*_args: object) -> tuple[()]:
            return ()

        engine.use_detectors(detect, lambda _on: None)
        assert engine.detect is detect


def test_every_room_of_the_server_is_under_600_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in SERVER.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 600} == {}
    assert sizes["engine.py"] < 200  # the composition stays thin


def test_the_ops_write_no_field_of_a_connection() -> None:
    """Subscriptions are the transport's: an op asks `Transport.subscribe`, it never
    sets a connection's fields."""
    tree = ast.parse((SERVER / "ops.py").read_text())
    written = [
        f"{node.lineno}: conn.{target.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "conn"
    ]
    assert written == []


class TestSettings:
    """One frozen Limits, swapped whole."""

    def test_limits_are_frozen(self) -> None:
        limits = Limits()
        with pytest.raises(AttributeError, match="frozen"):
            limits.lock_timeout = 1.0  # type: ignore[misc]
        with pytest.raises(AttributeError, match="frozen"):
            del limits.lock_timeout
        assert limits.lock_timeout == 5.0

    def test_replace_gives_a_changed_copy(self) -> None:
        limits = Limits()
        changed = limits.replace(max_workspaces=2)
        assert changed.max_workspaces == 2 and limits.max_workspaces == 64
        assert changed != limits and hash(changed) != hash(limits)
        assert limits.replace() == limits and hash(limits.replace()) == hash(limits)
        with pytest.raises(TypeError, match="unknown limits"):
            limits.replace(max_worspaces=2)

    def test_a_reload_swaps_the_one_reference(self) -> None:
        settings = Settings(staleness="mtime")
        new = Limits(max_line_bytes=2048, settle_ms=5)
        settings.use(new, auto_watch=False)
        assert settings.limits is new
        assert settings.settle == 0.005
        assert settings.auto_watch is False
        assert settings.staleness == "mtime"  # fixed for the run


def _event(generation: int, unit: str, workspace: str = "/ws") -> tuple[dict[str, object], bytes]:
    event: dict[str, object] = {"event": "changed", "generation": generation,
                                "workspace": workspace, "unit": unit}
    return event, protocol.event_line(event)


class TestSubscriptions:
    """The transport's subscriptions, on a real socket pair."""

    @staticmethod
    def _received(steps: Callable[[Subscribers, asyncio.Transport], None]) -> bytes:
        """What the far end of a socket pair reads after `steps` broadcast on its near end."""
        near, far = socket.socketpair()

        async def run() -> None:
            loop = asyncio.get_running_loop()
            transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, near)
            steps(Subscribers(Settings(max_subscribers=1), log.get("test")), transport)
            transport.close()
            await asyncio.sleep(0)

        try:
            asyncio.run(run())
            far.settimeout(5.0)
            chunks = []
            while chunk := far.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            far.close()

    def test_a_replayed_line_is_not_sent_again_and_the_filter_holds(self) -> None:
        old, new_a, new_b = _event(5, "a"), _event(7, "a"), _event(7, "b")
        later, elsewhere = _event(8, "c"), _event(8, "c", workspace="/other")

        def steps(subscribers: Subscribers, transport: asyncio.Transport) -> None:
            sub = subscribers.subscribe("conn", transport, "/ws")
            sub.replayed([old[1], new_a[1]])  # the replay sent these two
            for event, line in (old, new_a, new_b, elsewhere, later):
                subscribers.broadcast(event, line)

        assert self._received(steps) == new_b[1] + later[1]

    def test_the_cap_is_a_temporary_failure(self) -> None:
        refused: list[TooManySubscribers] = []

        def steps(subscribers: Subscribers, transport: asyncio.Transport) -> None:
            subscribers.subscribe("first", transport, None)
            with pytest.raises(TooManySubscribers) as caught:
                subscribers.subscribe("second", transport, None)
            refused.append(caught.value)
            subscribers.unsubscribe("first")
            subscribers.subscribe("second", transport, None)  # a place came free
            assert len(subscribers) == 1

        self._received(steps)
        assert refused[0].code == 75 and refused[0].message == "too many subscribers (1)"
