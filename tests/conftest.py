"""The harness modules, registered as plugins: their fixtures reach every test module.

Helpers are imported from the harness module of their concern, never from here or from
another test module:

    threads_harness     the autouse guard against a test leaving a thread running
    cli_harness         the installed `storyd` and the seed's reference script, as a
                        user runs them (fixtures `isolated_env`, `run_storyd`)
    epic_state_harness  the epic producer's state files: ids, paths, the one writer
    git_harness         real git repositories with fixed identities and dates
    daemon_harness      a real `storyd serve`: start, talk, subscribe, read its log, stop
                        (fixture `spawn_daemon`)
    locks_harness       locks as another process holds them (flock(2), flock(1) writers)
    notify_harness      stand-ins for the drift notification sinks
    agents_harness      Claude Code's side: the demo workspace, hook JSON, `storyd hook`
    format_harness      the format adapters' fixture workspaces, one unit, direct resumes
    nats_harness        a real `nats-server` for the fleet (fixture `nats_server`)
    users_harness       another local user for cross-user tests (fixtures `shared_dir`,
                        `other_user`)
    package_harness     the wheel `pip install .` builds, and its files unpacked
    claims_harness      a claims database of the test's own (fixture `store`)

epic_corpus.py (the real epic files) and consistency.py (the consistency checkers, also
run by bench/soak_consistency.py) are plain modules the tests import.
"""

# in dependency order, so each is imported (and its asserts rewritten) as a plugin
pytest_plugins = [
    "threads_harness",
    "cli_harness",
    "epic_state_harness",
    "git_harness",
    "daemon_harness",
    "locks_harness",
    "notify_harness",
    "agents_harness",
    "format_harness",
    "nats_harness",
    "users_harness",
    "package_harness",
    "claims_harness",
]


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _private_state_home(tmp_path_factory: pytest.TempPathFactory,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's daemons keep their history database in a folder of their own
    ($XDG_STATE_HOME), never the user's, and never one another's; so do the parsed
    configurations ($XDG_CACHE_HOME)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("STORYD_HISTORY", raising=False)
