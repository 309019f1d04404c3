"""storyd.config and `storyd config check|show`: the schema, every class of problem with
its field and line, and the cheap path `storyd resume` takes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from storyd import config
from storyd.config import Config, ConfigError, Problem
from storyd.config.loader import history_database as load_history
from storyd.core.errors import StorydError

Run = Callable[..., subprocess.CompletedProcess[bytes]]

FULL = """\
# every key
socket = "~/run/storyd.sock"
staleness = "mtime"
workspaces = ["~/src/a", "/abs/b", "rel/c", "/abs/b"]
auto_watch = false

[limits]
max_workspaces = 8
max_line_bytes = 4096
lock_timeout = 1.5
verify_interval = 0.5
settle_ms = 5
max_subscribers = 3
subscriber_buffer = 8192
connection_buffer = 16384
total_buffer = 1048576
idle_timeout = 30.5
auto_watch_idle = 600
max_state_bytes = 1048576
max_answer_bytes = 2097152

[detectors.staleness]
enabled = false
threshold = 3

[detectors.task-order]
strict = true

[notify]
log = false
desktop = false
hook = ["~/bin/on-drift", "--quiet"]
hook_timeout = 2.5
hook_workspaces = ["~/src/a"]
hook_codes = ["missing", "unreachable"]
hook_severities = ["warning", "error"]
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def problems(tmp_path: Path, text: str) -> list[Problem]:
    """The problems `load` raises for this text (it must raise)."""
    with pytest.raises(ConfigError) as caught:
        config.load(write(tmp_path, text))
    return caught.value.problems


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory of the test's own, for ~ expansion."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


class TestValid:
    """A valid file becomes a Config with every value, and no file means the defaults."""

    def test_every_key(self, tmp_path: Path, home: Path) -> None:
        """Each key of the schema lands on its attribute, with paths expanded."""
        cfg = config.load(write(tmp_path, FULL))
        assert cfg.path == str(tmp_path / "config.toml")
        assert cfg.socket == f"{home}/run/storyd.sock"
        assert cfg.staleness == "mtime"
        assert cfg.workspaces == [f"{home}/src/a", "/abs/b", f"{home}/rel/c"]
        assert cfg.auto_watch is False
        assert cfg.limits.as_dict() == {
            "max_workspaces": 8, "max_line_bytes": 4096, "lock_timeout": 1.5,
            "verify_interval": 0.5, "settle_ms": 5, "max_subscribers": 3,
            "subscriber_buffer": 8192, "connection_buffer": 16384, "total_buffer": 1048576,
            "idle_timeout": 30.5, "auto_watch_idle": 600.0, "git_lock_wait": 5.0,
            "max_state_bytes": 1048576, "max_answer_bytes": 2097152,
        }
        assert cfg.detectors == {
            "staleness": {"enabled": False, "threshold": 3}, "task-order": {"strict": True},
        }
        assert not cfg.detector_enabled("staleness")
        assert cfg.detector_enabled("task-order")
        assert cfg.detector_enabled("unlisted")
        assert cfg.detector_options("staleness") == {"threshold": 3}
        assert cfg.notify.log is False
        assert cfg.notify.desktop is False
        assert cfg.notify.hook == [f"{home}/bin/on-drift", "--quiet"]
        assert cfg.notify.hook_timeout == 2.5
        assert cfg.notify.hook_workspaces == [f"{home}/src/a"]
        assert cfg.notify.hook_codes == ["missing", "unreachable"]
        assert cfg.notify.hook_severities == ["warning", "error"]

    def test_integers_are_accepted_for_seconds(self, tmp_path: Path) -> None:
        """lock_timeout = 5 is 5.0: TOML integers are numbers too."""
        cfg = config.load(write(tmp_path, "[limits]\nlock_timeout = 5\n"))
        assert cfg.limits.lock_timeout == 5.0
        assert isinstance(cfg.limits.lock_timeout, float)

    def test_missing_file_gives_defaults(self, tmp_path: Path) -> None:
        """No file: the documented defaults, and path None."""
        cfg = config.load(str(tmp_path / "absent.toml"))
        assert cfg == Config()
        assert cfg.path is None
        assert (cfg.socket, cfg.staleness, cfg.workspaces) == (None, "git", [])
        assert cfg.auto_watch is True
        assert cfg.limits.as_dict() == {name: spec[1] for name, spec in config.LIMITS.items()}
        assert cfg.notify.as_dict() == {
            "log": True, "desktop": True, "hook": None, "hook_timeout": 10.0,
            "hook_workspaces": [], "hook_codes": [], "hook_severities": [],
        }

    def test_default_path_is_xdg(self, isolated_env: dict[str, str]) -> None:
        """Without a path, load reads $XDG_CONFIG_HOME/storyd/config.toml."""
        folder = Path(isolated_env["XDG_CONFIG_HOME"]) / "storyd"
        folder.mkdir()
        (folder / "config.toml").write_text('staleness = "mtime"\n')
        cfg = config.load()
        assert cfg.staleness == "mtime"
        assert cfg.path == str(folder / "config.toml")

    def test_empty_file_is_the_defaults(self, tmp_path: Path) -> None:
        """An empty file is valid and changes nothing."""
        assert config.load(write(tmp_path, "")) == Config()


class TestProblems:
    """Every problem names its dotted field and the line where the key is written."""

    @pytest.mark.parametrize(
        ("text", "field", "line", "words"),
        [
            # types
            ('\n\nauto_watch = "yes"\n', "auto_watch", 3, "expected true or false, got a string"),
            ("staleness = 1\n", "staleness", 1, "expected 'git' or 'mtime', got an integer"),
            ('staleness = "svn"\n', "staleness", 1, "got 'svn'"),
            ("workspaces = '~/a'\n", "workspaces", 1, "expected an array of paths"),
            ("[limits]\nlock_timeout = \"5\"\n", "limits.lock_timeout", 2, "expected a number"),
            ("[limits]\n\nsettle_ms = 1.5\n", "limits.settle_ms", 3, "integer, got a float"),
            ("[limits]\nmax_workspaces = true\n", "limits.max_workspaces", 2, "got a boolean"),
            ("limits = 3\n", "limits", 1, "expected a table, got an integer"),
            ("[notify]\ndesktop = 1\n", "notify.desktop", 2, "expected true or false"),
            ("[detectors.x]\nenabled = 'no'\n", "detectors.x.enabled", 2, "true or false"),
            ("[detectors]\nx = true\n", "detectors.x", 2, "expected a table, got a boolean"),
            ("socket = 'relative/s.sock'\n", "socket", 1, "not an absolute path"),
            ("socket = ''\n", "socket", 1, "got an empty string"),
            (f"socket = '/{'s' * 120}'\n", "socket", 1, "too long for a socket path"),
            # ranges
            ("[limits]\nmax_workspaces = 0\n", "limits.max_workspaces", 2,
             "0 is out of range: expected 1 to 4096"),
            ("[limits]\nmax_line_bytes = 10\n", "limits.max_line_bytes", 2, "out of range"),
            ("[limits]\nverify_interval = 0\n", "limits.verify_interval", 2, "0.1 to 3600"),
            ("[limits]\nlock_timeout = -1\n", "limits.lock_timeout", 2, "out of range"),
            ("[limits]\nverify_interval = nan\n", "limits.verify_interval", 2, "finite"),
            ("[notify]\nhook_timeout = 0\n", "notify.hook_timeout", 2, "out of range"),
            ("limits.max_subscribers = 0\n", "limits.max_subscribers", 1, "out of range"),
            ("limits = { subscriber_buffer = 1 }\n", "limits.subscriber_buffer", 1, "range"),
            ("[limits]\nconnection_buffer = 100\n", "limits.connection_buffer", 2,
             "100 is out of range: expected 4096 to 1073741824"),
            ("[limits]\nidle_timeout = 0\n", "limits.idle_timeout", 2, "0.1 to 86400"),
            ("[limits]\ntotal_buffer = 'big'\n", "limits.total_buffer", 2, "expected an integer"),
            ("[limits]\nconnection_buffer = 1048576\ntotal_buffer = 65536\n",
             "limits.total_buffer", 3, "less than limits.connection_buffer (1048576)"),
            # unknown keys
            ('stalenes = "git"\n', "stalenes", 1,
             "unknown key 'stalenes' (did you mean 'staleness'?)"),
            ("[limits]\nmax_workspace = 3\n", "limits.max_workspace", 2,
             "did you mean 'max_workspaces'?"),
            ("[notify]\nhooks = ['x']\n", "notify.hooks", 2, "did you mean 'hook'?"),
            ("[colours]\nred = 1\n", "colours", 1, "unknown key 'colours' (known: "),
            # the hook
            ("[notify]\nhook = []\n", "notify.hook", 2, "non-empty array"),
            ("[notify]\nhook = 'notify-send'\n", "notify.hook", 2, "got a string"),
            ("[notify]\nhook = ['']\n", "notify.hook[0]", 2, "got an empty string"),
            ("[notify]\nhook = [\n  'prog',\n  3,\n]\n", "notify.hook[1]", 4,
             "expected a string, got an integer"),
            # elements of a multi-line array point at their own line
            ("workspaces = [\n  '/a',\n  '',\n]\n", "workspaces[1]", 3, "an empty string"),
            ("workspaces = [\n  '/a',\n  false,\n]\n", "workspaces[1]", 3, "got a boolean"),
            # the hook's filters (issue 20)
            ("[notify]\nhook_severities = ['warn']\n", "notify.hook_severities[0]", 2,
             "unknown value 'warn' (did you mean 'warning'?)"),
            ("[notify]\nhook_codes = 'missing'\n", "notify.hook_codes", 2,
             "expected an array of strings, got a string"),
            ("[notify]\nhook_workspaces = [3]\n", "notify.hook_workspaces[0]", 2,
             "expected a path, got an integer"),
            ("[notify]\nhook_code = ['x']\n", "notify.hook_code", 2,
             "did you mean 'hook_codes'?"),
            ("[limits]\nauto_watch_idle = -1\n", "limits.auto_watch_idle", 2, "out of range"),
        ],
    )
    def test_one_problem(
        self, tmp_path: Path, text: str, field: str, line: int, words: str
    ) -> None:
        """The problem has the field, the line and a message saying what is wrong."""
        found = problems(tmp_path, text)
        assert len(found) == 1, found
        assert (found[0].field, found[0].line) == (field, line)
        assert words in found[0].message

    @pytest.mark.parametrize(
        ("text", "line", "words"),
        [
            ("a = 1\nb = [1,\n  2\n  c = 3\n", 4, "Unclosed array"),
            ('staleness = "git\n', 1, "Illegal character"),
            ("[limits]\nmax_workspaces = = 3\n", 2, "Invalid value"),
            ('x = "unterminated', 1, "at the end of the file"),
            ("[limits]\n[limits]\n", 2, "Cannot declare"),
        ],
    )
    def test_syntax_error_has_its_line(self, tmp_path: Path, text: str, line: int,
                                       words: str) -> None:
        """tomllib's error becomes one `syntax` problem at tomllib's line."""
        found = problems(tmp_path, text)
        assert [(p.field, p.line) for p in found] == [("syntax", line)]
        assert words in found[0].message

    def test_invalid_utf8(self, tmp_path: Path) -> None:
        """Bytes that are not UTF-8 are a syntax problem on their line."""
        path = tmp_path / "config.toml"
        path.write_bytes(b'staleness = "git"\n# caf\xe9\n')
        with pytest.raises(ConfigError) as caught:
            config.load(str(path))
        assert caught.value.problems == [Problem("syntax", 2, "not valid UTF-8")]

    def test_unreadable_file(self, tmp_path: Path) -> None:
        """A directory where the file should be is a `file` problem without a line."""
        (tmp_path / "config.toml").mkdir()
        with pytest.raises(ConfigError) as caught:
            config.load(str(tmp_path / "config.toml"))
        assert caught.value.problems[0].field == "file"
        assert caught.value.message.startswith(f"{tmp_path / 'config.toml'}: file: cannot read")

    def test_every_problem_listed_in_line_order(self, tmp_path: Path) -> None:
        """All problems at once, sorted by line, formatted PATH:LINE: FIELD: MESSAGE."""
        path = write(tmp_path, """\
            [notify]
            hook = [1]

            [limits]
            settle_ms = -5
            bogus = 1
            """)
        with pytest.raises(ConfigError) as caught:
            config.load(path)
        error = caught.value
        assert isinstance(error, StorydError)
        assert (error.code, error.name) == (78, "EX_CONFIG")
        assert [(p.line, p.field) for p in error.problems] == [
            (2, "notify.hook[0]"), (5, "limits.settle_ms"), (6, "limits.bogus"),
        ]
        lines = error.message.splitlines()
        assert lines[0] == f"{path}:2: notify.hook[0]: expected a string, got an integer"
        assert lines[1].startswith(f"{path}:5: limits.settle_ms: -5 is out of range")
        assert lines[2].startswith(f"{path}:6: limits.bogus: unknown key 'bogus'")

    def test_more_workspaces_than_the_limit(self, tmp_path: Path) -> None:
        """The workspaces list is checked against limits.max_workspaces."""
        text = "workspaces = ['/a', '/b', '/c']\n[limits]\nmax_workspaces = 2\n"
        found = problems(tmp_path, text)
        assert [(p.field, p.line) for p in found] == [("workspaces", 1)]
        assert "3 listed, more than limits.max_workspaces (2)" in found[0].message

    def test_keys_in_comments_and_strings_do_not_move_lines(self, tmp_path: Path) -> None:
        """A key named inside a comment or a multi-line string is not where the key is."""
        found = problems(tmp_path, '''\
            # auto_watch = true
            note = """
            auto_watch = false
            """
            auto_watch = 1
            ''')
        assert [(p.field, p.line) for p in found] == [("note", 2), ("auto_watch", 5)]


class TestLoadStaleness:
    """load_staleness: the CLI's cheap read of one key."""

    def test_no_file_imports_nothing_heavy(self, isolated_env: dict[str, str]) -> None:
        """Without a file: "git", and importing and calling it loads no tomllib, re, typing."""
        code = (
            "import sys\n"
            "before = set(sys.modules)\n"
            "from storyd import config\n"
            "mode = config.load_staleness()\n"
            "heavy = {'tomllib', 'dataclasses', 'typing', 're', 'difflib'}\n"
            "print(mode, sorted(heavy & (set(sys.modules) - before)), 'tomllib' in sys.modules)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=isolated_env,
                              timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().split() == ["git", "[]", "False"]

    def test_importing_the_module_is_light(self) -> None:
        """`import storyd.config` alone adds none of the modules the CLI must not pay for."""
        code = (
            "import sys\nbefore = set(sys.modules)\nimport storyd.config\n"
            "new = set(sys.modules) - before\n"
            "print(sorted({'tomllib', 'dataclasses', 'typing', 're'} & new))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30,
                              check=False)
        assert done.stdout.decode().strip() == "[]", done.stderr

    def test_reads_the_file(self, tmp_path: Path) -> None:
        """With a file, its staleness; other problems in the file do not matter here."""
        path = write(tmp_path, 'staleness = "mtime"\nbogus = 1\n')
        assert config.load_staleness(path) == "mtime"

    def test_default_when_the_key_is_absent(self, tmp_path: Path) -> None:
        """A file without the key gives the default."""
        assert config.load_staleness(write(tmp_path, "auto_watch = true\n")) == "git"

    @pytest.mark.parametrize("text", ['staleness = "svn"\n', 'staleness = "git\n'])
    def test_bad_value_or_syntax_raises(self, tmp_path: Path, text: str) -> None:
        """A problem that decides the answer raises, so a typo is never silently `git`."""
        with pytest.raises(ConfigError) as caught:
            config.load_staleness(write(tmp_path, text))
        assert caught.value.problems[0].line == 1


class TestHistoryDatabase:
    """history_database: where readers without the daemon find what it records."""

    @pytest.fixture(autouse=True)
    def _homes(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        monkeypatch.delenv("STORYD_HISTORY", raising=False)

    def _default(self, tmp_path: Path) -> str:
        return str(tmp_path / "state" / "storyd" / "history.sqlite3")

    def test_no_file_is_the_default(self, tmp_path: Path) -> None:
        assert load_history(str(tmp_path / "none.toml")) == self._default(tmp_path)

    @pytest.mark.parametrize("text", ["auto_watch = true\n", "[history]\nmax_versions = 9\n",
                                      "[history]\nenabled = true\n"])  # fmt: skip
    def test_no_path_is_the_default(self, tmp_path: Path, text: str) -> None:
        assert load_history(write(tmp_path, text)) == self._default(tmp_path)

    def test_the_environment_moves_the_default(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("STORYD_HISTORY", str(tmp_path / "env.sqlite3"))
        assert load_history(write(tmp_path, "")) == str(tmp_path / "env.sqlite3")

    def test_the_table_path_wins_and_is_expanded(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("STORYD_HISTORY", str(tmp_path / "env.sqlite3"))  # as the daemon
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        path = write(tmp_path, '[history]\npath = "~/h.sqlite3"\n')
        assert load_history(path) == str(tmp_path / "home" / "h.sqlite3")

    def test_a_relative_path_is_the_home_folders_from_anywhere(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The daemon runs from home: every process reading the file finds its database."""
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        path = write(tmp_path, '[history]\npath = "state/h.sqlite3"\n')
        for where in (tmp_path, Path("/")):
            monkeypatch.chdir(where)
            assert load_history(path) == str(tmp_path / "home" / "state" / "h.sqlite3")

    def test_off_is_none(self, tmp_path: Path) -> None:
        assert load_history(write(tmp_path, "[history]\nenabled = false\n")) is None

    @pytest.mark.parametrize("text", ['[history]\nenabled = "no"\n', "[history\n",
                                      "history = 3\n"])  # fmt: skip
    def test_a_file_the_daemon_refuses_gives_the_default(self, tmp_path: Path, text: str) -> None:
        """The daemon would not start on it; the readers read where one last recorded."""
        assert load_history(write(tmp_path, text)) == self._default(tmp_path)


class TestConfigCommand:
    """`storyd config check` and `storyd config show` as processes."""

    def test_check_ok(self, run_storyd: Run, tmp_path: Path) -> None:
        """A valid file: `ok: PATH`, exit 0."""
        path = write(tmp_path, 'staleness = "mtime"\n')
        done = run_storyd("config", "check", "--file", path)
        assert (done.returncode, done.stdout.decode()) == (0, f"ok: {path}\n")

    def test_check_problems(self, run_storyd: Run, tmp_path: Path) -> None:
        """Every problem as PATH:LINE: FIELD: MESSAGE, exit 78."""
        path = write(tmp_path, 'stalenes = "git"\n[limits]\nsettle_ms = "20"\n')
        done = run_storyd("config", "check", "--file", path)
        assert done.returncode == 78
        assert done.stdout.decode().splitlines() == [
            f"{path}:1: stalenes: unknown key 'stalenes' (did you mean 'staleness'?)",
            f"{path}:3: limits.settle_ms: expected an integer, got a string",
        ]

    def test_check_syntax_error(self, run_storyd: Run, tmp_path: Path) -> None:
        """A TOML syntax error is reported with tomllib's line, exit 78."""
        path = write(tmp_path, "a = 1\nb = = 2\n")
        done = run_storyd("config", "check", "--file", path)
        assert done.returncode == 78
        assert done.stdout.decode().startswith(f"{path}:2: syntax: Invalid value")

    def test_check_default_path_without_a_file(self, run_storyd: Run,
                                               isolated_env: dict[str, str]) -> None:
        """No --file and no file: ok, the defaults apply."""
        expected = Path(isolated_env["XDG_CONFIG_HOME"]) / "storyd" / "config.toml"
        done = run_storyd("config", "check")
        assert done.returncode == 0
        assert done.stdout.decode() == f"ok: {expected} (no file: the defaults apply)\n"

    def test_check_missing_explicit_file(self, run_storyd: Run, tmp_path: Path) -> None:
        """--file naming nothing is a problem, not the defaults."""
        done = run_storyd("config", "check", "--file", str(tmp_path / "nope.toml"))
        assert done.returncode == 78
        assert done.stdout.decode() == f"{tmp_path / 'nope.toml'}: file: no such file\n"

    def test_check_warnings_keep_exit_zero(self, run_storyd: Run, tmp_path: Path) -> None:
        """Suspicious but valid values are warnings on their lines; the exit stays 0."""
        path = write(tmp_path, f"""\
            workspaces = ["{tmp_path / 'not-yet'}"]
            [notify]
            hook = ["no-such-program-storyd-test"]
            """)
        done = run_storyd("config", "check", "--file", path)
        assert done.returncode == 0
        out = done.stdout.decode().splitlines()
        missing = tmp_path / "not-yet"
        assert out[0] == f"{path}:1: workspaces[0]: warning: {missing} is not a directory (yet)"
        assert out[1].startswith(f"{path}:3: notify.hook[0]: warning: 'no-such-program-storyd")
        assert out[2] == f"ok: {path}"

    @pytest.mark.parametrize("args", [(), ("bogus",), ("check", "--nope")])
    def test_usage(self, run_storyd: Run, args: tuple[str, ...]) -> None:
        """No subcommand, an unknown one, or an unknown flag: the usage and exit 64."""
        done = run_storyd("config", *args)
        assert done.returncode == 64
        assert b"usage: storyd config check" in done.stderr

    def test_show_json(self, run_storyd: Run, tmp_path: Path, home: Path,
                       isolated_env: dict[str, str]) -> None:
        """--json prints the effective configuration as data."""
        path = write(tmp_path, FULL)
        done = run_storyd("config", "show", "--file", path, "--json",
                          env={**isolated_env, "HOME": str(home)})
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout)
        assert shown["path"] == path
        assert shown["staleness"] == "mtime"
        assert shown["workspaces"][0] == f"{home}/src/a"
        assert shown["limits"]["settle_ms"] == 5
        assert shown["notify"]["hook"] == [f"{home}/bin/on-drift", "--quiet"]

    def test_show_toml_reads_back(self, run_storyd: Run, tmp_path: Path, home: Path,
                                  isolated_env: dict[str, str]) -> None:
        """The TOML `show` prints loads back into an equal Config."""
        path = write(tmp_path, FULL)
        done = run_storyd("config", "show", "--file", path, env={**isolated_env, "HOME": str(home)})
        assert done.returncode == 0, done.stderr
        again = tmp_path / "again.toml"
        again.write_bytes(done.stdout)
        assert config.load(str(again)) == config.load(path)

    def test_show_bad_file(self, run_storyd: Run, tmp_path: Path) -> None:
        """show refuses a file with problems, listing them, exit 78."""
        path = write(tmp_path, "staleness = 3\n")
        done = run_storyd("config", "show", "--file", path)
        assert done.returncode == 78
        assert f"{path}:1: staleness:" in done.stdout.decode()

