"""Object lookups: one persistent `git cat-file --batch-check`, asked in pipelined
batches, and what makes a cached answer about a name still true (its folder's stamp).
"""

from __future__ import annotations

import os
import select
import time

from storyd.core.errors import GitError
from storyd.detectors.gitview.errors import _translated
from storyd.detectors.gitview.proc import GIT_TIMEOUT, no_answer
from storyd.detectors.gitview.spawn import PIPE, Process

__all__ = [
    "AMBIGUOUS",
    "FOUND",
    "INVALID",
    "MISSING",
    "Kept",
    "ObjectInfo",
    "is_object_name",
    "kept",
    "unkept",
]

FOUND = "found"
MISSING = "missing"
AMBIGUOUS = "ambiguous"
INVALID = "invalid"
_HEX = frozenset("0123456789abcdef")
_BATCH = 400  # names per cat-file round trip: input and output stay below a pipe's 64 KiB
_RACY_NS = 100_000_000  # 0.1 s


def is_object_name(text: str) -> bool:
    """Whether `text` can be a (possibly abbreviated) hexadecimal object name."""
    return 4 <= len(text) <= 64 and set(text.lower()) <= _HEX


class ObjectInfo:
    """What `git cat-file --batch-check` says about one name.

    `state` is FOUND, MISSING, AMBIGUOUS or INVALID (not a hex object name); `sha` and
    `kind` (commit, tree, blob, tag) are set when FOUND.
    """

    __slots__ = ("kind", "name", "sha", "stamp", "state")

    def __init__(
        self, name: str, state: str, sha: str | None = None, kind: str | None = None
    ) -> None:
        self.name = name
        self.state = state
        self.sha = sha
        self.kind = kind
        # the object folders' stamp a cached answer holds for (GitView.lookup): kept on
        # the answer, not in a pair beside it, as a daemon caches tens of thousands
        self.stamp: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"ObjectInfo({self.name!r}, {self.state!r}, {self.sha!r}, {self.kind!r})"

    def __eq__(self, other: object) -> bool:
        """Equal answers about the same name (the stamp is when, not what)."""
        if not isinstance(other, ObjectInfo):
            return NotImplemented
        return (self.name, self.state, self.sha, self.kind) == (
            other.name, other.state, other.sha, other.kind)

    def __hash__(self) -> int:
        return hash((self.name, self.state, self.sha, self.kind))


Kept = ObjectInfo | tuple[int, int]
"""An answer as a cache keeps it: a missing object as its stamp alone (a daemon asks
about tens of thousands of shas, most of them missing in a repository that never had
them: 2.1 MB of answers at 10,000 stories)."""


def kept(info: ObjectInfo) -> Kept:
    """What a cache keeps of an answer that has its stamp."""
    return info.stamp if info.state == MISSING and info.stamp is not None else info


def unkept(name: str, cached: Kept | None, stamp: tuple[int, int] | None) -> ObjectInfo | None:
    """The cached answer about `name` while the object folders' stamp is `stamp` (None:
    nothing cached, or cached under another stamp)."""
    if cached is None or stamp is None:
        return None
    if isinstance(cached, tuple):
        return ObjectInfo(name, MISSING) if cached == stamp else None
    return cached if cached.stamp == stamp else None


class _CatFile:
    """A persistent `git cat-file --batch-check`, asked in pipelined batches.

    For an ambiguous name git also writes candidate hints to stderr; stderr is drained
    while answers are read, so a long run of them can never fill its pipe and stall.
    """

    def __init__(self, argv: list[str], cwd: str) -> None:
        from storyd.detectors.gitview.proc import git_env

        self._open = False  # the process is owned here: ended by close(), or when dropped
        with _translated("cat-file"):
            self._proc = Process(argv, cwd, git_env(), stdin=PIPE, stdout=PIPE, stderr=PIPE)
        self._open = True
        self._pending = b""

    def __del__(self) -> None:
        self._end()  # dropped without close(): weakref.finalize's import costs a hook's start

    def _end(self) -> None:
        """End the process, once."""
        if self._open:
            self._open = False
            _end_process(self._proc)

    def ask(self, names: list[str]) -> list[str]:
        """One answer line per name, in order."""
        answers: list[str] = []
        for start in range(0, len(names), _BATCH):
            chunk = names[start : start + _BATCH]
            stdin = self._proc.stdin
            if stdin is None:
                msg = "git cat-file has no input pipe"
                raise GitError(msg)
            with _translated("cat-file"):
                data = "".join(f"{n}\n" for n in chunk).encode()
                while data:
                    data = data[os.write(stdin, data) :]
                answers.extend(self._read_lines(len(chunk)))
        return answers

    def _read_lines(self, count: int) -> list[str]:
        """Read `count` lines from stdout, discarding whatever arrives on stderr."""
        out, err = self._proc.stdout, self._proc.stderr
        if out is None or err is None:
            msg = "git cat-file has no output pipes"
            raise GitError(msg)
        buffer = self._pending
        deadline = time.monotonic() + GIT_TIMEOUT
        watched = [out, err]
        while buffer.count(b"\n") < count:
            left = deadline - time.monotonic()
            ready = select.select(watched, [], [], left)[0] if left > 0 else []
            if not ready:
                self.kill()
                raise no_answer(GIT_TIMEOUT)
            for fd in ready:
                data = os.read(fd, 65536)
                if fd == out:
                    if not data:
                        msg = "git cat-file exited"
                        raise GitError(msg)
                    buffer += data
                elif not data:
                    watched.remove(err)
        lines = buffer.split(b"\n")
        self._pending = b"\n".join(lines[count:])
        return [line.decode("utf-8", "replace") for line in lines[:count]]

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self._proc.poll() is None

    def close(self) -> None:
        """End the process."""
        self._end()

    def kill(self) -> None:
        """End the process at once (it stopped answering)."""
        try:  # noqa: SIM105 (contextlib imports collections, functools...: a hook's start)
            self._proc.kill()
        except OSError:
            pass
        self._end()


def _end_process(proc: Process) -> None:
    """Close a persistent process's input, wait for it (kill if slow), close its pipes."""
    try:  # noqa: SIM105 (contextlib imports collections, functools...: a hook's start)
        proc.communicate(timeout=5)
    except (OSError, ValueError):
        pass
    try:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    except (OSError, ValueError):
        pass
    proc.close()


def _parse_answer(name: str, line: str) -> ObjectInfo:
    """`<sha> <type> <size>`, `<name> missing` or `<name> ambiguous`."""
    parts = line.split()
    if len(parts) == 3 and parts[1] != MISSING:
        return ObjectInfo(name, FOUND, parts[0], parts[1])
    if parts[-1:] == [AMBIGUOUS]:
        return ObjectInfo(name, AMBIGUOUS)
    return ObjectInfo(name, MISSING)


class _Stamps:
    """Object-folder mtimes for one lookup: what a cached answer about a name is valid for.

    A name's stamp is (mtime of objects/<first two digits>, mtime of objects/pack), in
    ns; None when either changed within the last `_RACY_NS` (the filesystem's clock is
    coarse, so an object written in the same tick could go unnoticed).
    """

    def __init__(self, objects_dir: str, shared: dict[tuple[int, int], tuple[int, int]]) -> None:
        self._dir = objects_dir
        self._shared = shared  # the view's stamps, so that lookups share one tuple each
        self._now = time.time_ns()
        self._pack = self._mtime("pack")
        self._seen: dict[str, tuple[int, int] | None] = {}

    def _mtime(self, sub: str) -> int | None:
        try:
            stamp = os.stat(os.path.join(self._dir, sub)).st_mtime_ns
        except OSError:
            return 0
        return None if self._now - stamp < _RACY_NS else stamp

    def of(self, key: str) -> tuple[int, int] | None:
        """The stamp for an object name (lower-case hex); one shared tuple per folder."""
        folder = key[:2]
        if folder not in self._seen:
            loose = self._mtime(folder)
            pack = self._pack
            if loose is None or pack is None:
                self._seen[folder] = None
            else:
                stamp = (loose, pack)
                self._seen[folder] = self._shared.setdefault(stamp, stamp)
        return self._seen[folder]
