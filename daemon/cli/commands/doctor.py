"""`storyd doctor`: one screen of what storyd sees on this machine.

Each line is `ok`, `warn` or `fail`, a topic and what was found. The checks:

- config      the configuration file loads
- socket      the socket path, whether a daemon answers (version, pid) and its stats
- inotify     (Linux) fs.inotify.max_user_watches / max_user_instances against what
              this user already uses and what storyd watches (from stats, else estimated)
- watcher     (elsewhere) the file events watchdog uses: FSEvents on macOS (no limit),
              kqueue (a descriptor per watched file: against the open-file limit), polling
- workspace   per workspace: a git repository? a shallow clone? state files per format
- agents      per agent (claude, cursor, vscode, codex, gemini), the user's files and
              this folder's project: storyd's hooks and MCP server, whether the storyd
              they run exists, and the `mcp` extra; and `hooks`: whether a hook run in
              this folder would stay silent, and why (storyd.agents.doctor)
- fleet       with [fleet]: nats-py installed, and the daemon's publishing state
              (connected, backlog, dropped, last error) from its stats
- desktop     the notifier storyd would run: osascript (macOS), or notify-send and a
              reachable D-Bus session bus (DBUS_SESSION_BUS_ADDRESS, else
              $XDG_RUNTIME_DIR/bus); the missing one named in the platform's words
- history     where the history database is, and whether the daemon records into it
- fast path   whether `storyd-resume` can reach the daemon: `nc` with -U, or socat
              (what to install said for the platform: apt, or Homebrew on macOS)
- path        whether `storyd` on PATH is this one (a shell without the venv active
              runs another, or none)

Exit 0, or 1 when any line is `fail`.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from typing import TYPE_CHECKING

from storyd import __version__
from storyd.cli.common import config_file
from storyd.core.flags import MANY, VALUE, parse

if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.core.formats import Adapter

__all__ = ["main"]

USAGE = "usage: storyd doctor [--config FILE] [--socket PATH] [--workspace DIR ...]"
FLAGS = {"config": VALUE, "socket": VALUE, "workspace": MANY}
OK, WARN, FAIL = "ok", "warn", "fail"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_GIT_TIMEOUT = 20.0


class _Screen:
    """Prints each line as it is found, and counts the levels."""

    def __init__(self) -> None:
        self.counts = {OK: 0, WARN: 0, FAIL: 0}

    def line(self, level: str, topic: str, text: str) -> None:
        self.counts[level] += 1
        print(f"{level:<5}{topic}: {text}", flush=True)


def _same(a: str, b: str) -> bool:
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


# -- config and socket ---------------------------------------------------------------------


def _check_config(screen: _Screen, path: str | None) -> Config | None:
    from storyd import config
    from storyd.core.paths import config_path

    try:
        cfg = config.load(path)
    except config.ConfigError as exc:
        for problem in exc.problems:
            screen.line(FAIL, "config", problem.format(exc.path))
        return None
    if cfg.path is None:
        screen.line(OK, "config", f"{path or config_path()} (no file: the defaults apply)")
    else:
        screen.line(OK, "config", cfg.path)
    return cfg


def _check_socket(screen: _Screen, path: str) -> dict[str, object] | None:
    """Ping the daemon; its stats when it answers."""
    import stat

    from storyd.api.client import Client, DaemonUnavailable

    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISSOCK(st.st_mode):
        screen.line(FAIL, "socket", f"{path} exists and is not a socket")
        return None
    if st is not None and (st.st_mode & 0o077 or st.st_uid != os.getuid()):
        screen.line(
            WARN,
            "socket",
            f"{path} is mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}: "
            "other users may reach it",
        )
    try:
        with Client(path, timeout=2.0) as client:
            ping = client.ping()
            stats = client.request("stats")
    except DaemonUnavailable:
        state = "a stale socket file, nothing listening" if st else "no socket"
        screen.line(
            WARN,
            "socket",
            f"{path}: no daemon answers ({state}); storyd resume reads the files directly",
        )
        return None
    version, pid = ping.get("version", "?"), ping.get("pid", "?")
    level = OK if version == __version__ else WARN
    extra = "" if level == OK else f"; this client is {__version__}: restart the daemon"
    screen.line(level, "socket", f"{path}: daemon {version} answers (pid {pid}){extra}")
    if not stats.get("ok"):
        screen.line(WARN, "socket", f"the stats op failed: {stats.get('error')}")
        return {}
    return stats


# -- inotify -------------------------------------------------------------------------------


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _inotify_in_use() -> tuple[int, int]:
    """(instances, watches) held by this user's processes, as far as /proc shows them."""
    uid = os.getuid()
    instances = watches = 0
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0, 0
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                    continue
                instances += 1
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as info:
                    watches += sum(1 for line in info if line.startswith("inotify wd:"))
            except OSError:
                continue
    return instances, watches


def _estimate_dirs(workspace: str, adapters: list[Adapter]) -> int:
    """Directories the daemon would watch in one workspace: its root, its git dir (and a
    linked worktree's common dir), format roots, refs (in the common dir)."""
    from storyd.core.gitstate import locate

    roots = sorted({root for a in adapters for root in getattr(a, "roots", ())})
    top = os.path.realpath(workspace) + os.sep
    tops = [os.path.join(workspace, root) for root in roots]
    tops = [t for t in tops if (os.path.realpath(t) + os.sep).startswith(top)]  # not followed
    where = locate(workspace)
    if where is not None:
        tops.append(os.path.join(where.common, "refs"))
    linked = 1 if where is not None and where.linked else 0
    return 2 + linked + sum(sum(1 for _ in os.walk(top)) for top in tops if os.path.isdir(top))


def _check_inotify(screen: _Screen, watched: int | None, estimate: int) -> None:
    max_watches = _read_int("/proc/sys/fs/inotify/max_user_watches")
    max_instances = _read_int("/proc/sys/fs/inotify/max_user_instances")
    if max_watches is None or max_instances is None:
        screen.line(WARN, "inotify", "cannot read /proc/sys/fs/inotify (not Linux?)")
        return
    instances, watches = _inotify_in_use()
    if watched is not None:
        ours, total = f"the daemon watches {watched} directories", watches
    else:
        ours, total = f"storyd would watch about {estimate} directories", watches + estimate
    text = f"max_user_watches {max_watches}, in use by uid {os.getuid()}: {watches}; {ours}"
    fix = "; raise it: sysctl fs.inotify.max_user_watches=524288"
    if total > max_watches:
        screen.line(FAIL, "inotify", text + fix)
    elif total > 0.8 * max_watches:
        screen.line(WARN, "inotify", text + fix)
    else:
        screen.line(OK, "inotify", text)
    text = f"max_user_instances {max_instances}, in use by uid {os.getuid()}: {instances}"
    fix = "; raise it: sysctl fs.inotify.max_user_instances=1024"
    if watched is None and instances >= max_instances:
        screen.line(FAIL, "inotify", text + fix)
    elif instances > 0.8 * max_instances:
        screen.line(WARN, "inotify", text + fix)
    else:
        screen.line(OK, "inotify", text)


def _observer() -> str:
    """The class name of watchdog's Observer on this machine (what the daemon runs)."""
    from watchdog.observers import Observer

    return str(getattr(Observer, "__name__", Observer))


def _check_watcher(screen: _Screen, watched: int | None, estimate: int, observer: str) -> None:
    """The file events off Linux, in the platform's words; inotify's own checks on Linux."""
    count = (f"the daemon watches {watched} directories" if watched is not None
             else f"storyd would watch about {estimate} directories")  # fmt: skip
    if observer == "InotifyObserver":
        _check_inotify(screen, watched, estimate)
    elif observer == "FSEventsObserver":
        screen.line(OK, "watcher", f"macOS FSEvents: no per-user watch limit to raise; {count}")
    elif observer == "KqueueObserver":
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        text = (f"kqueue holds an open file per watched file and folder; {count}, "
                f"the open-file limit is {limit}")  # fmt: skip
        needed = watched if watched is not None else estimate
        if limit != resource.RLIM_INFINITY and needed > 0.8 * limit:
            screen.line(WARN, "watcher", text + "; raise it (ulimit -n) before storyd starts")
        else:
            screen.line(OK, "watcher", text)
    else:
        screen.line(WARN, "watcher", f"no file events here ({observer}): changes are seen by "
                    "polling, later and at a cost; " + count)


# -- workspaces ----------------------------------------------------------------------------


def _git(workspace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    return subprocess.run(
        ["git", "-C", workspace, *args],
        capture_output=True,
        text=True,
        timeout=_GIT_TIMEOUT,
        env=env,
        check=False,
    )


def _check_workspace(
    screen: _Screen, workspace: str, adapters: list[Adapter], lock_wait: float | None = None
) -> None:
    from storyd.core.formats.base import Source

    topic = f"workspace {workspace}"
    if not os.path.isdir(workspace):
        screen.line(FAIL, topic, "not a directory")
        return
    try:
        done = _git(workspace, "rev-parse", "--show-toplevel", "--is-shallow-repository")
    except FileNotFoundError:
        screen.line(FAIL, topic, "git is not installed: git-based findings are off")
    except subprocess.TimeoutExpired:
        screen.line(WARN, topic, f"git did not answer in {_GIT_TIMEOUT:g} s")
    else:
        out = done.stdout.split()
        if done.returncode != 0 or len(out) != 2:
            reason = (done.stderr.strip().splitlines() or ["git rev-parse failed"])[0]
            screen.line(WARN, topic, f"not a git repository ({reason}): git-based findings are off")
        else:
            screen.line(OK, topic, f"git repository (top level {out[0]})")
            if out[1] == "true":
                screen.line(
                    WARN,
                    topic,
                    "shallow clone: commits before the cut look missing to "
                    f"commit-in-history; `git -C {workspace} fetch --unshallow` fixes it",
                )
            else:
                screen.line(OK, topic, "full history (not a shallow clone)")
    _check_git_lock(screen, topic, workspace, lock_wait)
    _check_git_state(screen, topic, workspace)
    counts = []
    source = Source(workspace)
    for adapter in adapters:
        name = getattr(adapter, "name", "?")
        try:
            counts.append((name, len(adapter.find(source))))
        except Exception as exc:  # a plugin's find() must not end the report
            screen.line(WARN, topic, f"format {name}: find() failed: {exc}")
    text = ", ".join(f"{name} {count}" for name, count in counts)
    if any(count for _, count in counts):
        screen.line(OK, topic, f"state files: {text}")
    else:
        screen.line(WARN, topic, f"no state files of any format ({text})")


def _adapters(screen: _Screen) -> list[Adapter]:
    from storyd.core import registry
    from storyd.core.formats import all_adapters

    registry.get().report(lambda problem: screen.line(FAIL, "plugins", problem))
    return all_adapters()  # a broken plugin is skipped, and named by the line above


def _check_desktop(screen: _Screen, cfg: Config | None, platform: str = sys.platform) -> None:
    from storyd.core.desktop import desktop_tool

    found = desktop_tool(platform)
    notify = getattr(cfg, "notify", None)
    if notify is not None and not notify.desktop:
        screen.line(OK, "desktop", "desktop notifications are off in the configuration")
    elif found and os.path.basename(found) == "osascript":
        screen.line(
            OK,
            "desktop",
            f"osascript at {found}: macOS shows the notifications as Script Editor's "
            "(allow them in System Settings > Notifications)",
        )
    elif found:
        bus, reachable = _session_bus()
        if reachable:
            screen.line(OK, "desktop", f"notify-send at {found}, session bus {bus}")
        else:
            screen.line(
                WARN,
                "desktop",
                f"notify-send at {found}, but no D-Bus session bus ({bus}): notifications "
                "will fail (log in to a desktop session, or set notify.desktop = false)",
            )
    elif platform == "darwin":
        screen.line(
            WARN,
            "desktop",
            "osascript is not on PATH (macOS has it in /usr/bin): no desktop notifications "
            "(put /usr/bin on PATH, or set notify.desktop = false)",
        )
    else:
        screen.line(
            WARN,
            "desktop",
            "notify-send is not on PATH: no desktop notifications "
            "(install libnotify-bin or libnotify, or set notify.desktop = false)",
        )


def _check_agents(screen: _Screen, cfg: Config | None) -> None:
    from storyd.agents.doctor import check_agents

    for level, topic, text in check_agents(cfg, os.getcwd()):
        screen.line(level, topic, text)


def _session_bus() -> tuple[str, bool]:
    """The session bus notify-send would use, and whether it is there."""
    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS", "")
    if address:
        for part in address.split(";")[0].split(":", 1)[-1].split(","):
            key, _, value = part.partition("=")
            if key == "path":
                return value, _is_socket(value)
        return address, True  # abstract sockets, tcp: nothing to look at here
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if not runtime:
        return "DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR unset", False
    default = os.path.join(runtime, "bus")
    if _is_socket(default):
        return default, True
    return f"DBUS_SESSION_BUS_ADDRESS unset, no socket at {default}", False


def _is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _check_fast_path(screen: _Screen, platform: str = sys.platform) -> None:
    """storyd-resume needs a netcat with -U (OpenBSD's, macOS's) or socat to skip Python."""
    import shutil

    nc = shutil.which("nc")
    if nc:
        try:
            usage = subprocess.run(
                [nc, "-h"], capture_output=True, timeout=5, check=False, stdin=subprocess.DEVNULL
            )
            if b"-U" in usage.stdout + usage.stderr:
                screen.line(OK, "fast path", f"storyd-resume asks the daemon through {nc} -U")
                return
        except (OSError, subprocess.TimeoutExpired):
            pass
    socat = shutil.which("socat")
    if socat:
        screen.line(OK, "fast path", f"storyd-resume asks the daemon through {socat}")
        return
    why = f"{nc} has no -U (not OpenBSD netcat)" if nc else "neither nc nor socat is on PATH"
    fix = "brew install socat" if platform == "darwin" else "install netcat-openbsd or socat"
    screen.line(WARN, "fast path", f"{why}: storyd-resume always starts Python ({fix})")


def _check_path(screen: _Screen) -> None:
    """Whether `storyd` on PATH is this installation."""
    import shutil

    found = shutil.which("storyd")
    here = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    mine = os.path.join(here, "storyd")
    if found is None:
        screen.line(
            WARN,
            "path",
            f"storyd is not on PATH (this one is {mine}): add {here} to PATH, or install with pipx",
        )
    elif os.path.exists(mine) and not _same(found, mine):
        screen.line(WARN, "path", f"storyd on PATH is {found}, not this one ({mine})")
    else:
        screen.line(OK, "path", f"storyd on PATH at {found}")


def _check_git_lock(screen: _Screen, topic: str, workspace: str, lock_wait: float | None) -> None:
    """A git lock (index.lock) held past the detectors' wait: left by a crashed git?"""
    from storyd.core.gitstate import GIT_LOCK_WAIT, git_lock_age

    held = git_lock_age(workspace)
    if held is not None and held[1] >= (GIT_LOCK_WAIT if lock_wait is None else lock_wait):
        path, age = held
        screen.line(
            WARN,
            topic,
            f"a git lock has been held for {age:.0f} s ({path}): the detectors check anyway "
            f"after limits.git_lock_wait; remove it if no git command is running",
        )


def _check_git_state(screen: _Screen, topic: str, workspace: str) -> None:
    """A repository whose HEAD commit cannot be read (corrupt, truncated pack), and a git
    operation stopped mid-way (its commits are checked when it ends)."""
    from storyd.core.gitstate import locate, operation_under_way

    where = locate(workspace)
    sha = where.head_commit() if where is not None else None
    if sha is not None:
        try:
            done = _git(workspace, "cat-file", "-e", f"{sha}^{{commit}}")
        except (FileNotFoundError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode != 0:
            screen.line(
                WARN,
                topic,
                f"HEAD names {sha[:12]}, which the repository cannot read (a truncated pack "
                f"or lost objects?): commit checks cannot run; `git -C {workspace} fsck`",
            )
    under_way = operation_under_way(workspace)
    if under_way is not None:
        name, marker = under_way
        screen.line(
            WARN,
            topic,
            f"a git {name} is in progress ({marker}): the commits are checked when it ends",
        )


def main(argv: list[str]) -> int:
    """Print the report; 1 when anything failed."""
    flags = parse(argv, FLAGS, USAGE)
    from storyd.core.paths import socket_path

    screen = _Screen()
    print(f"storyd {__version__}: {_PACKAGE}, python {sys.version.split()[0]} at {sys.executable}")
    cfg = _check_config(screen, config_file(flags))
    configured = getattr(cfg, "socket", None)
    stats = _check_socket(screen, socket_path(str(flags.get("socket") or configured or "") or None))

    flagged = flags.get("workspace")
    given = [str(w) for w in flagged] if isinstance(flagged, list) else []
    if given:
        workspaces = [os.path.abspath(os.path.expanduser(w)) for w in given]
    elif cfg is not None and cfg.workspaces:
        workspaces = list(cfg.workspaces)
    else:
        listed = (stats or {}).get("workspaces") or []
        workspaces = [str(w) for w in listed] if isinstance(listed, list) else []
    adapters = _adapters(screen)

    watched_value = None if stats is None else stats.get("watchedDirs")
    watched = len(watched_value) if isinstance(watched_value, list) else watched_value
    estimate = sum(_estimate_dirs(w, adapters) for w in workspaces if os.path.isdir(w))
    observer = _observer()
    _check_watcher(screen, watched if isinstance(watched, int) else None, estimate, observer)
    inotify = observer == "InotifyObserver"
    if inotify and isinstance(watched, int) and not given and watched + 2 < estimate:
        screen.line(
            WARN,
            "inotify",
            f"the daemon watches {watched} of about {estimate} folders (the kernel's count): "
            "the rest is polled every limits.verify_interval; raise "
            "fs.inotify.max_user_watches to watch them all",
        )

    if not workspaces:
        screen.line(
            WARN,
            "workspaces",
            "none to check: pass --workspace DIR, or list them in the configuration",
        )
    from storyd.core.mounts import Table

    mounts = Table()
    for workspace in workspaces:
        lock_wait = cfg.limits.git_lock_wait if cfg is not None else None
        _check_workspace(screen, workspace, adapters, lock_wait)
        untrusted = mounts.untrusted(workspace)  # WSL2's /mnt/c, network, FUSE (issue 41)
        if untrusted is not None:
            screen.line(WARN, f"workspace {workspace}", untrusted)
    _check_desktop(screen, cfg)
    _check_agents(screen, cfg)
    if cfg is not None and cfg.fleet is not None:
        from storyd.fleet.doctor import check_fleet

        for level, text in check_fleet(cfg.fleet, stats):
            screen.line(level, "fleet", text)
    from storyd.api.history import doctor_lines

    table = cfg.history if cfg is not None else None
    enabled, where = (table.enabled, table.path) if table is not None else (True, None)
    for level, text in doctor_lines(enabled, where, stats):
        screen.line(level, "history", text)
    _check_fast_path(screen)
    _check_path(screen)
    counts = screen.counts
    print(f"{counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail")
    return 1 if counts[FAIL] else 0
