"""Racer processes started together at a FIFO gate, and the rounds each won (the
claims race tests: tests/claims_racer.py and its kin print `ready`, wait at the gate,
then print what they won)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

Command = tuple[list[str], "dict[str, str] | None"]  # argv (the gate path in it), env


@contextmanager
def gated(gate: Path, commands: Sequence[Command]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start every command, wait for each one's `ready`, then open the gate (one byte
    each, so they start together); whatever is still running on the way out is killed."""
    os.mkfifo(gate)
    door = os.open(gate, os.O_RDWR)  # held open: a racer's open never waits
    racers = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for argv, env in commands]  # fmt: skip
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline() == b"ready\n", racer.stderr
        os.write(door, b"g" * len(racers))
        yield racers
    finally:
        os.close(door)
        for racer in racers:
            racer.kill()
            racer.communicate()


def rounds_won(racers: Sequence[subprocess.Popen[bytes]], outs: Sequence[tuple[bytes, bytes]],
               rounds: int) -> tuple[list[int], list[int]]:  # fmt: skip
    """(rounds won twice or more, rounds nobody won) from racers printing one won round
    per line; each racer must have exited 0."""
    wins: Counter[int] = Counter()
    for racer, (out, err) in zip(racers, outs, strict=True):
        assert racer.returncode == 0, err.decode()
        wins.update(int(line) for line in out.split())
    return [n for n, count in wins.items() if count > 1], [n for n in range(rounds)
                                                           if wins[n] == 0]  # fmt: skip
