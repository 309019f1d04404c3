"""`storyd install [--service]`: the platform's service, and with --enable start it: a
launchd agent on macOS (storyd.cli.launchagent), else the systemd user units.
`--launchd` or `--systemd` chooses one whatever the platform (to look at the files).

`--claude`, `--cursor`, `--vscode`, `--codex` and `--gemini` instead merge storyd's
hooks and MCP server into that agent's files (`--project DIR`: the project's shared
files, naming `storyd` from PATH; else the user's, with this storyd's absolute path),
and `--skill` writes the seed skill's drop-in SKILL.md; see docs/agents.md.

The templates are systemd/storyd.socket and systemd/storyd.service, the single copy.
They are found beside the package in a source checkout or an editable install, and in
<prefix>/share/storyd/systemd after `pip install .` (pyproject's data-files). The
service's ExecStart is the `storyd` of the environment running this command.

The launchd agent is ~/Library/LaunchAgents/org.storyd.daemon.plist (--unit-dir DIR
puts it elsewhere); --enable loads it with `launchctl bootstrap gui/<uid>` (after a
`bootout` when it was loaded), else the commands are printed.

Exit codes: 0 done, 64 bad flags, 69 no user manager (launchctl) to --enable with (the
files are written; the commands to run are printed), 70 templates or `storyd` not
found, 73 a unit file could not be written, 1 a systemctl or launchctl command failed.
An agent's install also exits 65 when a file it would edit is refused (outside the
`--project`, not a regular file, over 4 MiB, not valid JSON, a key twice; nothing written: see
storyd.agents.guarded) and 75 when the file kept changing under the edit.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys

from storyd.agents.installs import AGENTS
from storyd.core.errors import StorydError
from storyd.core.flags import SWITCH, VALUE, parse
from storyd.core.paths import storyd_executable

__all__ = [
    "PLACEHOLDER",
    "SERVICE_FLAGS",
    "UNITS",
    "agent_loaded",
    "chosen_agent_dir",
    "chosen_unit_dir",
    "default_unit_dir",
    "exec_quote",
    "find_templates",
    "main",
    "render",
    "service_kind",
    "user_manager",
]

AGENT_FLAGS = (*AGENTS, "skill")  # one switch per agent storyd installs into, and the skill
USAGE = (
    "usage: storyd install [--service] [--launchd|--systemd] [--enable] [--unit-dir DIR] "
    "[--dry-run]\n"
    f"       storyd install {'|'.join('--' + a for a in AGENT_FLAGS)} ... "
    "[--project DIR] [--dry-run]"
)
SERVICE_FLAGS = ("service", "launchd", "systemd")
FLAGS = {
    **dict.fromkeys(SERVICE_FLAGS, SWITCH),
    "enable": SWITCH,
    "unit-dir": VALUE,
    "dry-run": SWITCH,
    **dict.fromkeys(AGENT_FLAGS, SWITCH),
    "project": VALUE,
}
UNITS = ("storyd.socket", "storyd.service")
PLACEHOLDER = "@STORYD_BIN@"
_TIMEOUT = 30.0


def default_unit_dir() -> str:
    """$XDG_CONFIG_HOME/systemd/user (default ~/.config/systemd/user)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "systemd", "user")


def chosen_unit_dir(flags: dict[str, object]) -> str:
    """--unit-dir (`~` expanded, made absolute), else the default."""
    return os.path.abspath(os.path.expanduser(str(flags.get("unit-dir") or default_unit_dir())))


def _searched_unit_dirs() -> list[str]:
    """User-unit directories the user manager reads without `systemctl --user link`."""
    home = os.path.expanduser("~")
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    return [
        default_unit_dir(),
        os.path.join(data, "systemd", "user"),
        "/etc/systemd/user",
        "/usr/local/lib/systemd/user",
        "/usr/lib/systemd/user",
    ]


def _template_dirs() -> list[str]:
    import site

    import storyd

    package = os.path.dirname(os.path.abspath(storyd.__file__))
    return [
        os.path.join(os.path.dirname(package), "systemd"),  # source checkout, editable install
        os.path.join(sys.prefix, "share", "storyd", "systemd"),  # pip install . (data-files)
        os.path.join(site.getuserbase(), "share", "storyd", "systemd"),  # pip install --user
    ]


def find_templates() -> dict[str, str]:
    """Each unit's template text by unit name, from the first directory that has both."""
    for folder in _template_dirs():
        texts = {}
        for unit in UNITS:
            try:
                with open(os.path.join(folder, unit), encoding="utf-8") as handle:
                    texts[unit] = handle.read()
            except OSError:
                break
        if len(texts) == len(UNITS) and PLACEHOLDER in texts["storyd.service"]:
            return texts
    msg = f"the unit templates are not installed; looked in: {', '.join(_template_dirs())}"
    raise StorydError(msg)


def exec_quote(path: str) -> str:
    """`path` as the program word of an ExecStart= line, quoted when it has spaces.

    `%` starts a specifier everywhere, so it is doubled. `$` stays: systemd does not
    expand variables in the program path. Quotes, backslashes and control characters
    are refused by systemd itself ("Executable name contains special characters"), so
    such a path raises StorydError here, before a unit is written.
    """
    if any(c in "\\\"'" or ord(c) < 32 or ord(c) == 127 for c in path):
        msg = (
            f"systemd cannot run a program whose path has quotes, backslashes or control "
            f"characters: {path!r}; install storyd somewhere else (a venv or pipx)"
        )
        raise StorydError(msg)
    escaped = path.replace("%", "%%")
    return f'"{escaped}"' if any(c.isspace() for c in path) else escaped


def render(template: str, executable: str) -> str:
    """A template with the placeholder replaced by the quoted executable."""
    return template.replace(PLACEHOLDER, exec_quote(executable))


def user_manager() -> tuple[bool, str]:
    """Whether `systemctl --user` reaches a user manager, and if not, why."""
    try:
        done = subprocess.run(
            ["systemctl", "--user", "show-environment"],
            capture_output=True,
            timeout=_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        return False, "systemctl is not installed"
    except subprocess.TimeoutExpired:
        return False, f"systemctl --user did not answer in {_TIMEOUT:g} s"
    if done.returncode == 0:
        return True, ""
    reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return False, reason[0] if reason else f"systemctl --user exited {done.returncode}"


def systemctl(*args: str) -> list[str]:
    """A `systemctl --user` argv."""
    return ["systemctl", "--user", *args]


def run_commands(commands: list[list[str]], *, keep_going: bool = False) -> int:
    """Run each argv (no shell), echoing it and any output; 0, or 1 at the first failure."""
    status = 0
    for argv in commands:
        print(f"$ {shlex.join(argv)}", flush=True)
        try:
            done = subprocess.run(argv, capture_output=True, timeout=_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"fail: {exc}")
            status = 1
        else:
            for stream in (done.stdout, done.stderr):
                text = stream.decode("utf-8", "replace").rstrip()
                if text:
                    print("  " + text.replace("\n", "\n  "))
            if done.returncode != 0:
                print(f"fail: exit {done.returncode}")
                status = 1
        if status and not keep_going:
            return status
    return status


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _socket_note() -> str | None:
    """A warning when clients are configured to look somewhere the socket unit is not."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime:
        return None
    unit_path = os.path.join(runtime, "storyd", "storyd.sock")
    env = os.environ.get("STORYD_SOCKET")
    if env and os.path.normpath(env) != unit_path:
        return f"warn: STORYD_SOCKET={env}, but the socket unit listens at {unit_path}"
    from storyd import config

    try:
        configured = config.load().socket
    except config.ConfigError:
        return "warn: the configuration file has problems; run `storyd config check`"
    if configured and configured != unit_path:
        return f"warn: config.toml sets socket = {configured}; the socket unit uses {unit_path}"
    return None


def _write_units(unit_dir: str, texts: dict[str, str], dry_run: bool) -> bool:
    """Write each unit that differs; print what happened. Whether an existing unit changed."""
    updated = False
    for unit, text in texts.items():
        path = os.path.join(unit_dir, unit)
        old = _read(path)
        if old == text:
            print(f"unchanged: {path}")
            continue
        updated = updated or old is not None
        if dry_run:
            print(f"would {'write' if old is None else 'update'}: {path}")
            continue
        try:
            os.makedirs(unit_dir, exist_ok=True)
            _write(path, text)
        except OSError as exc:
            msg = f"cannot write {path}: {exc.strerror}"
            raise UnitWriteError(msg) from None
        print(f"{'wrote' if old is None else 'updated'}: {path}")
    return updated


class UnitWriteError(StorydError):
    """A systemd unit file cannot be written (sysexits EX_CANTCREAT)."""

    code = 73
    name = "EX_CANTCREAT"


def _commands(unit_dir: str, updated: bool) -> list[list[str]]:
    searched = {os.path.realpath(d) for d in _searched_unit_dirs()}
    commands = [systemctl("daemon-reload")]
    if os.path.realpath(unit_dir) not in searched:
        commands.append(systemctl("link", *(os.path.join(unit_dir, u) for u in UNITS)))
    commands.append(systemctl("enable", "--now", "storyd.socket"))
    if updated:
        commands.append(systemctl("try-restart", "storyd.service"))
    return commands


def service_kind(flags: dict[str, object]) -> str:
    """"launchd" or "systemd": --launchd or --systemd, else launchd on macOS."""
    if flags.get("launchd") and flags.get("systemd"):
        from storyd.core.errors import UsageError

        raise UsageError(f"--launchd or --systemd, not both\n{USAGE}")
    if flags.get("launchd") or (not flags.get("systemd") and sys.platform == "darwin"):
        return "launchd"
    return "systemd"


def chosen_agent_dir(flags: dict[str, object]) -> str:
    """--unit-dir (`~` expanded, made absolute), else ~/Library/LaunchAgents."""
    from storyd.cli.launchagent import default_agent_dir

    return os.path.abspath(os.path.expanduser(str(flags.get("unit-dir") or default_agent_dir())))


def agent_loaded() -> bool:
    """Whether launchd has storyd's agent loaded (`launchctl print` answers)."""
    from storyd.cli.launchagent import print_service

    try:
        done = subprocess.run(print_service(), capture_output=True, timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _install_agent(flags: dict[str, object]) -> int:
    """Write the launchd agent; with --enable load it (bootout first when it changed)."""
    from storyd.cli import launchagent

    folder = chosen_agent_dir(flags)
    dry_run = bool(flags.get("dry-run"))
    executable = storyd_executable()
    if executable is None:
        sys.stderr.write("storyd install: cannot find the `storyd` executable to run\n")
        return 70
    spec = launchagent.agent(executable)
    name = f"{launchagent.LABEL}.plist"
    plist = os.path.join(folder, name)
    updated = _write_units(folder, {name: launchagent.plist_bytes(spec).decode("utf-8")}, dry_run)
    log = launchagent.log_path()
    if not dry_run:
        try:
            os.makedirs(os.path.dirname(log), exist_ok=True)
        except OSError as exc:
            msg = f"cannot make the log folder {os.path.dirname(log)}: {exc.strerror}"
            raise UnitWriteError(msg) from None
    print(f"program: {shlex.join(spec['ProgramArguments'])}")
    sock = spec["Sockets"][launchagent.SOCKET_NAME]["SockPathName"]
    print(f"socket: {sock} (launchd makes it, mode 0600)")
    print(f"log: {log}")
    status = launchagent.print_service()
    commands = [launchagent.bootout(), launchagent.bootstrap(plist)]
    if not flags.get("enable") or dry_run:
        print("would run:" if dry_run else "to enable, run (the bootout only when loaded):")
        for command in [*commands, status]:
            print(f"  {shlex.join(command)}")
        return 0
    if launchagent.launchctl() is None:
        print("fail: launchctl is not on PATH (not macOS?); nothing was loaded.")
        print("The agent is written. On the Mac, in the user's login session, run:")
        for command in [*commands, status]:
            print(f"  {shlex.join(command)}")
        return 69
    if agent_loaded():
        if not updated:
            print(f"loaded: {launchagent.LABEL} already, unchanged")
            return 0
        run_commands([launchagent.bootout()])  # a failure shows; bootstrap says if it matters
    code = run_commands([launchagent.bootstrap(plist)])
    if code == 0:
        print(f"enabled: {launchagent.LABEL} (launchd starts storyd on the first connection)")
        print(f"check with: {shlex.join(status)}")
    return code


def main(argv: list[str]) -> int:
    """Write the units, print the systemctl commands, and run them with --enable."""
    flags = parse(argv, FLAGS, USAGE)
    if any(flags.get(agent) for agent in AGENT_FLAGS):
        if flags.get("enable") or flags.get("unit-dir") or any(map(flags.get, SERVICE_FLAGS)):
            from storyd.core.errors import UsageError

            msg = (
                "--service, --launchd, --systemd, --enable and --unit-dir are for the "
                f"service\n{USAGE}"
            )
            raise UsageError(msg)
        from storyd.agents.setup import install

        return install(flags)
    if flags.get("project"):
        from storyd.core.errors import UsageError

        raise UsageError(f"--project goes with an agent's flag or --skill\n{USAGE}")
    if service_kind(flags) == "launchd":
        return _install_agent(flags)
    unit_dir = chosen_unit_dir(flags)
    dry_run = bool(flags.get("dry-run"))
    executable = storyd_executable()
    if executable is None:
        sys.stderr.write("storyd install: cannot find the `storyd` executable to run\n")
        return 70
    templates = find_templates()
    texts = {unit: render(text, executable) for unit, text in templates.items()}
    updated = _write_units(unit_dir, texts, dry_run)
    print(f"ExecStart={exec_quote(executable)} serve")
    note = _socket_note()
    if note:
        print(note)

    commands = _commands(unit_dir, updated)
    status = systemctl("status", "--no-pager", "storyd.socket", "storyd.service")
    if not flags.get("enable") or dry_run:
        print("would run:" if dry_run else "to enable, run:")
        for command in [*commands, status]:
            print(f"  {shlex.join(command)}")
        return 0
    reachable, reason = user_manager()
    if not reachable:
        print(f"fail: no systemd user manager is reachable ({reason}); nothing was enabled.")
        print("The units are written. In a login session with a user manager, run:")
        for command in [*commands, status]:
            print(f"  {shlex.join(command)}")
        return 69
    code = run_commands(commands)
    if code == 0:
        print("enabled: storyd.socket (storyd starts on the first connection)")
        print(f"check with: {shlex.join(status)}")
    return code
