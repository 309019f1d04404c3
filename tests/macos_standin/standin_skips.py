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
    "tests/test_epic_kept.py::TestKept::test_a_write_is_seen_by_the_next_view": (
        "no inotify: no change queue vouches for a file just written, so git's racy rule "
        "reads the view again until its mtime is old (never stale; the test counts reads)"
    ),
    "tests/test_fault_inotify.py::": (
        "no inotify: the test exhausts inotify's watch and instance limits"
    ),
    "tests/test_incremental.py::test_a_finished_write_is_answered_before_the_settle_window": (
        "no close-write event (inotify's IN_CLOSE_WRITE; FSEvents and polling say only that "
        "a file changed): a write's end is not known, so it waits for a tick or the settle"
    ),
    "tests/test_service_threads.py::TestWatchCount::test_an_idle_tick_does_not_recount": (
        "no inotify: every workspace is polled each verification tick "
        "(server/watcher.py `polled`), a scan that walks its trees by design"
    ),
    "tests/test_workspace_expiry.py::test_a_removed_workspace_is_forgotten": (
        "no inotify: no delete events empty the removed workspace before the tick forgets "
        "it, so workspace_forgotten says units=1 where the test expects 0"
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for prefix, reason in SKIPS.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"macOS stand-in: {reason}"))
                break
