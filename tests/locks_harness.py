"""Locks as another process holds them: flock(2) from outside, and flock(1) writers.

    exclusively_locked()  whether a writer holds flock(2) LOCK_EX on a file
    FlockWriter           a `flock(1)` process that holds a lock on a path until released
"""

from __future__ import annotations

import errno
import fcntl
import os
import selectors
import signal
import subprocess
from pathlib import Path

from daemon_harness import wait_for

__all__ = ["FlockWriter", "exclusively_locked"]

WAIT = 10.0  # generous bound for things that must happen; never reached when all is well


def exclusively_locked(path: Path) -> bool:
    """Whether someone holds an exclusive flock(2) on the file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class FlockWriter:
    """A `flock(1)` process that holds a lock on a path until the test releases it.

    The command under the lock reports `locked`, then blocks reading a FIFO; opening and
    closing the FIFO's write end lets it exit, and flock(1) releases the lock.
    """

    def __init__(self, path: Path, mode: str, fifo: Path) -> None:
        self.fifo = fifo
        os.mkfifo(fifo)
        self.proc = subprocess.Popen(
            [
                "flock",
                "-o",
                mode,
                str(path),
                "sh",
                "-c",
                'echo locked; exec cat "$1" >/dev/null',
                "sh",
                str(fifo),
            ],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout=WAIT)
        assert ready, "the writer never took its lock"
        assert self.proc.stdout.readline() == b"locked\n"

    def release(self) -> None:
        """Let the command under the lock finish, and wait for flock(1) to exit."""
        fd = -1

        def opened() -> bool:
            nonlocal fd
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: `cat` has not opened the FIFO yet
                    raise
                return False
            return True

        wait_for(opened, WAIT, "the writer's command to open its FIFO")
        os.close(fd)
        assert self.proc.wait(timeout=WAIT) == 0

    def kill(self) -> None:
        """Stop this writer's own process group, if it still runs."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=WAIT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
