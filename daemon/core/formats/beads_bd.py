"""Ask `bd` for beads' truth, read-only: the issues of its database (Dolt since v0.56,
SQLite before), not the JSONL export that lags it.

    bd_path(workspace)              the `bd` on the user's PATH, or None
    read(bd, workspace)             (issues, ready ids): `bd list --json --all --limit 0`
                                    and `bd ready --json --limit 0`; BdFailed says why not
    answer(bd, workspace, files, now)  `read`, memoised while `files` are unchanged
    BdFailed                        one line: bd would not start, failed, overran the time
                                    or size bound, or printed something that is not JSON

The repository never chooses the program: `bd` is looked up in PATH's absolute folders
only (never `.`, an empty entry or a relative one, which would be the workspace), and a
`bd` that resolves into the workspace (a folder direnv put on PATH) is refused. Nothing
in `.beads/` names a program.

bd never writes for storyd (steveyegge/beads @ fbcee6c6 `cmd/bd/main.go`, its Dec 2025
JSONL-era version 28a661a32, `internal/config/config.go`, `internal/storage/dolt/
open.go`, `cmd/bd/backup_auto.go`, `cmd/bd/export_auto.go`): `--readonly` blocks every
write and `--sandbox` turns off the JSONL era's daemon, auto-import and auto-flush and
the Dolt era's auto-push (both flags since Dec 2025: an older bd refuses them and storyd
reads the JSONL). The environment is the user's PATH, HOME, user and locale only (no
BEADS_*/BD_* of the caller: no server mode, no password), plus bd's own switches through
its config's environment (`BD_` + key): `BD_READONLY`, `BD_DOLT_AUTO_COMMIT=off`,
`BD_BACKUP_ENABLED=false` (auto-backup is on by default when git has a remote),
`BD_EXPORT_AUTO=false`, `BD_NO_PUSH`, `BD_NO_AUTO_FLUSH`, `BD_NO_AUTO_IMPORT`,
`BD_DOLT_AUTO_START=false` and `BEADS_DOLT_AUTO_START=0` (never start a Dolt server),
`BEADS_NO_DAEMON=1` (the JSONL era's daemon), `BD_GIT_HOOK=1` (skips post-run backup
and export), `BEADS_DOLT_SERVER_HOST=127.0.0.1` (never dial a host a repository's config
names) and `BEADS_DIR` (this workspace's `.beads`, so `.beads/.env` cannot route bd
elsewhere). `bd export` is not used: in the JSONL era its stdout export cleared the
database's dirty flags (a write).

`bd list --json` prints beads' IssueWithCounts objects (no `dependencies`: bd's own
`ready` list decides what is ready). bd 0.59.0 printed text for `list --json`
(steveyegge/beads #2395): that is "not JSON", and storyd reads the JSONL.
"""

from __future__ import annotations

import os
import time

from storyd.core.isotime import parse_epoch
from storyd.core.jsonio import JSONError, loads
from storyd.core.switches import CONFIG

TYPE_CHECKING = False
if TYPE_CHECKING:
    from subprocess import Popen

__all__ = ["LIMIT", "MEMO_FOR", "TIMEOUT", "BdFailed", "answer", "bd_path", "environment",
           "read"]

TIMEOUT = 5.0  # seconds for both commands together (embedded Dolt opens in ~0.1-1 s)
LIMIT = 32 << 20  # bytes of output a command may print (beads' own export: 2.3 MB)
_ERR_LIMIT = 4096  # bytes of stderr kept, for the first line of a failure
_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
_FIXED = {
    "BD_READONLY": "true", "BD_DOLT_AUTO_COMMIT": "off", "BD_BACKUP_ENABLED": "false",
    "BD_EXPORT_AUTO": "false", "BD_NO_PUSH": "true", "BD_NO_AUTO_FLUSH": "true",
    "BD_NO_AUTO_IMPORT": "true", "BD_DOLT_AUTO_START": "false", "BEADS_DOLT_AUTO_START": "0",
    "BEADS_NO_DAEMON": "1", "BD_GIT_HOOK": "1", "BEADS_DOLT_SERVER_HOST": "127.0.0.1",
    "NO_COLOR": "1",
}  # fmt: skip
FLAGS = ("--readonly", "--sandbox")
MEMO_FOR = 300.0  # seconds an answer serves at most while the database's files stand still


class BdFailed(Exception):
    """bd gave no usable answer; the message is one line saying why."""


def bd_path(workspace: str) -> str | None:
    """The first executable `bd` in PATH's absolute folders whose real path is outside
    the workspace; None when there is none."""
    base = os.path.realpath(workspace)
    for folder in dict.fromkeys(os.environ.get("PATH", "").split(os.pathsep)):
        if not folder or not os.path.isabs(folder):
            continue  # `.`, `` or `bin`: the workspace (bd's cwd) would choose
        path = os.path.join(folder, "bd")
        try:
            if not os.path.isfile(path) or not os.access(path, os.X_OK):
                continue
        except (OSError, ValueError):
            continue
        real = os.path.realpath(path)
        if real == base or real.startswith(base + os.sep):
            continue  # a program of the repository's: never run
        return real
    return None


def environment(beads_dir: str) -> dict[str, str]:
    """bd's environment: the user's PATH, HOME, user and locale, and bd's switches off."""
    env = {k: v for k in _KEEP if (v := os.environ.get(k)) is not None}
    env.update(_FIXED)
    env["BEADS_DIR"] = beads_dir
    return env


def answer(bd: str, workspace: str, files: tuple[object, ...],
           now: float) -> tuple[list[dict[str, object]], list[str]]:  # fmt: skip
    """`read`, memoised per workspace (CONFIG.bd_memo) while bd and `files` (what a write
    to the database changes: its root files' and metadata.json's signatures) stand
    still, until the first `defer_until` still ahead (bd's ready list changes then) or
    MEMO_FOR seconds; a failure too. The daemon's periodic rescan re-reads the beads
    format (its readiness depends on the clock): bd is not started again for it, and
    never contends with the user's own bd for an embedded Dolt database that did not
    change."""
    try:
        st = os.stat(bd)
        key: tuple[object, ...] = (bd, st.st_ino, st.st_mtime_ns, st.st_size, files)
    except OSError:
        key = (bd, files)
    memo = CONFIG.bd_memo.get(workspace)
    if memo is not None and memo[0] == key and now < memo[1]:
        got = memo[2]
    else:
        try:
            got = read(bd, workspace)
        except BdFailed as exc:
            got = exc
        CONFIG.bd_memo[workspace] = (key, _expiry(got, now), got)
    if isinstance(got, BdFailed):
        raise BdFailed(str(got))
    return got  # type: ignore[return-value]


def _expiry(got: object, now: float) -> float:
    """When a memoised answer stops serving: MEMO_FOR from now, or sooner when an issue's
    `defer_until` falls before that."""
    until = now + MEMO_FOR
    if isinstance(got, tuple):
        for node in got[0]:
            when = parse_epoch(node.get("defer_until"))
            if when is not None and now < when < until:
                until = float(when)
    return until


def read(bd: str, workspace: str, *, timeout: float | None = None,
         limit: int | None = None) -> tuple[list[dict[str, object]], list[str]]:  # fmt: skip
    """bd's issues (every status) and its ready list (ids, bd's order)."""
    run = _Run(bd, workspace, TIMEOUT if timeout is None else timeout,
               LIMIT if limit is None else limit)  # fmt: skip
    listed = _objects(run(("list", "--json", "--all", "--limit", "0")), "bd list --json")
    ready = _objects(run(("ready", "--json", "--limit", "0")), "bd ready --json")
    ids = [i for node in ready if isinstance(i := node.get("id"), str)]
    return listed, ids


def _objects(data: bytes, what: str) -> list[dict[str, object]]:
    """The JSON array of objects a command printed; BdFailed for anything else."""
    try:
        value = loads(data)
    except JSONError:
        start = data.lstrip()[:40].decode("utf-8", "replace").splitlines()[:1]
        shown = f" (it began {start[0]!r})" if start and start[0] else ""
        msg = f"`{what}` printed no JSON{shown}"
        raise BdFailed(msg) from None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        msg = f"`{what}` printed JSON that is not a list of issues"
        raise BdFailed(msg)
    return value


class _Run:
    """bd commands under one deadline: each one's stdout, or BdFailed."""

    def __init__(self, bd: str, workspace: str, timeout: float, limit: int) -> None:
        self.bd = bd
        self.workspace = workspace
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.limit = limit
        self.env = environment(os.path.join(os.path.realpath(workspace), ".beads"))

    def __call__(self, args: tuple[str, ...]) -> bytes:
        """One command's stdout (cwd the workspace, in storyd's children's group)."""
        import subprocess

        from storyd.core.children import group  # bd ends with this process

        shown = f"bd {' '.join(args[:2])}"
        try:
            proc = subprocess.Popen(  # bd of the user's PATH, fixed arguments
                [self.bd, *FLAGS, *args], cwd=self.workspace, env=self.env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                process_group=group())
        except OSError as exc:
            msg = f"`{shown}` could not start: {exc.strerror or exc}"
            raise BdFailed(msg) from None
        try:
            out, err = self._drain(proc, shown)
            try:
                code = proc.wait(max(0.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise self._late(shown) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if code != 0:
            lines = err.decode("utf-8", "replace").splitlines()
            line = next((s.strip() for s in lines if s.strip()), "")
            said = f": {''.join(c for c in line if c.isprintable())[:200]}" if line else ""
            msg = f"`{shown}` exited with {code}{said}"
            raise BdFailed(msg)
        return out

    def _late(self, shown: str) -> BdFailed:
        return BdFailed(f"`{shown}` did not answer within {self.timeout:g} s")

    def _drain(self, proc: Popen[bytes], shown: str) -> tuple[bytes, bytes]:
        """stdout (at most `limit` bytes) and stderr's start, read until both end."""
        import select

        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.fileno(), proc.stderr.fileno()
        got: dict[int, list[bytes]] = {out: [], err: []}
        size = dict.fromkeys(got, 0)
        open_fds = [out, err]
        try:
            while open_fds:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise self._late(shown)
                ready, _, _ = select.select(open_fds, [], [], left)
                for fd in ready:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        open_fds.remove(fd)
                        continue
                    size[fd] += len(chunk)
                    if fd == out and size[fd] > self.limit:
                        msg = f"`{shown}` printed more than {self.limit:,} bytes"
                        raise BdFailed(msg)
                    if fd == out or size[fd] <= _ERR_LIMIT:
                        got[fd].append(chunk)
        finally:
            proc.stdout.close()
            proc.stderr.close()
        return b"".join(got[out]), b"".join(got[err])
