"""What the daemon refuses, and with which code: limits reached, reserved detector names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, write_config
from epic_state_harness import write_epic

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with one epic state file."""
    path = tmp_path / "ws"
    write_epic(path, "0049", {"story-0049-0001": {"tasks": {"T1": {"status": "pending"}}}})
    return path


def test_too_many_subscribers_is_a_temporary_failure(spawn_daemon: Spawn, tmp_path: Path,
                                                     ws: Path) -> None:
    """Over `limits.max_subscribers` the answer is 75 EX_TEMPFAIL (docs/protocol.md), not
    70, the code reserved for a bug in a handler; a slot freed is usable again."""
    write_config(tmp_path, "[limits]\nmax_subscribers = 1\n")
    proc = spawn_daemon([ws])
    with proc.connect() as first:
        assert first.request({"op": "subscribe"})["ok"] is True
        with proc.connect() as second:
            refused = second.request({"op": "subscribe", "id": 7})
        assert refused["ok"] is False
        assert refused["id"] == 7
        error = refused["error"]
        assert isinstance(error, dict)
        assert (error["code"], error["name"]) == (75, "EX_TEMPFAIL"), error
        assert "too many subscribers" in str(error["message"])
    assert "handler_error" not in proc.log_text()


def _install_detector(plugins: Path, entry_name: str, detector_name: str) -> None:
    """A third-party detector distribution on `plugins`: real metadata, a real entry point."""
    module = f"reserved_{entry_name}_detector"
    dist = plugins / f"{module}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n",
        encoding="utf-8")
    (dist / "entry_points.txt").write_text(
        f"[storyd.detectors]\n{entry_name} = {module}:DETECTOR\n", encoding="utf-8")
    (plugins / f"{module}.py").write_text(
        "class _Quiet:\n"
        f"    name = {detector_name!r}\n\n"
        "    def check(self, story, context):\n"
        "        return []\n\n\n"
        "DETECTOR = _Quiet()\n",
        encoding="utf-8")


@pytest.mark.parametrize(("entry_name", "detector_name"), [
    ("format", "format"),
    ("engine", "engine"),
    ("innocent", "engine"),  # the entry point's name is fine, the findings' is not
    ("format", "innocent"),  # and the other way round: `[detectors.format]` would be ambiguous
])
def test_reserved_detector_names_are_refused(spawn_daemon: Spawn, tmp_path: Path, ws: Path,
                                             entry_name: str, detector_name: str) -> None:
    """"format" and "engine" findings come with the files; a plugin may not claim them:
    it is skipped and named in the log, and the daemon serves without it."""
    plugins = tmp_path / "plugins"
    _install_detector(plugins, entry_name, detector_name)
    proc = spawn_daemon([ws], start=False)
    proc.env["PYTHONPATH"] = str(plugins)
    proc.start()
    text = proc.log_text()
    assert "plugin_skipped" in text and "reserved" in text, text
    assert f"reserved_{entry_name}_detector" in text, text
    assert "Traceback" not in text
