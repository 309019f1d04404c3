"""pytest plugin of the macOS stand-in: skips, with a platform reason, what tests only
Linux (sitecustomize.py in this folder says what is taken away)."""

from __future__ import annotations

import pytest

# node id prefix -> why it cannot run where macOS's CPython stands in
SKIPS = {
    "tests/test_git_events.py::TestWhichEventsMatter::": (
        "no inotify: watchdog's PollingObserver reports what changed between two "
        "snapshots, not each event of a ref's lock and rename"
    ),
    "tests/test_doctor.py::TestWithoutDaemon::test_screen": (
        "no inotify: doctor says the watcher polls, not inotify's watch counts"
    ),
    "tests/test_doctor.py::TestWithDaemon::test_screen": (
        "no inotify: doctor says the watcher polls, not inotify's watch counts"
    ),
    "tests/test_house.py::test_the_thread_budget": (
        "no inotify: the budget counts inotify's reader and emitter threads"
    ),
    "tests/test_warm_query.py::TestUncheckedCache::test_no_parse_while_the_file_is_unchanged": (
        "no inotify: no change queue vouches that the file is unchanged, so an unchecked "
        "unit's answer parses the file again (never stale; the test counts parses)"
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for prefix, reason in SKIPS.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"macOS stand-in: {reason}"))
                break
