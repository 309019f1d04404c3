"""Racing writers against `storyd reconcile --apply` (issue 29): lost updates per writer
convention.

    .venv/bin/python bench/bench_racing_writers.py                      # this tree's storyd
    .venv/bin/python bench/bench_racing_writers.py --storyd OTHER/storyd --trials 80

Each trial resets a real git workspace's epic state file (a task committed but still
PENDING: one `unrecorded` repair to apply), starts one writer process that keeps
adding numbered marks to the file's `writerMarks` list until told to stop, runs
`storyd reconcile --apply` as a user does, stops the writer and reads the file:

    lost         marks the writer wrote (its write returned) that the file lacks
    applied-lost apply exited 0 but the task is not DONE in the file at the end

Writer conventions (tests/racing_writers.py has the same three as one-shot writers):

    in-place         open, flock(2) LOCK_EX on that descriptor, read and rewrite through it
    rename-locked    open, LOCK_EX, read the path, temp file, rename over the path (flock(1))
    rename-unlocked  read the path, temp file, rename over the path, no lock

For `rename-unlocked`, `applied-lost` is expected: a writer that takes no lock and read
the file before the apply wrote it renames a version without the apply's change
(docs/reconcile.md). `lost` must be 0 in every convention.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STORY = "story-0049-0001"
T1, T2 = "TASK-0049-0001-001", "TASK-0049-0001-002"
STATE = "plans/epic-0049/execution-state.json"

WRITER = r"""
import fcntl, json, os, random, sys, time
path, convention, stop = sys.argv[1], sys.argv[2], sys.argv[3]
random.seed(int(sys.argv[4]))
def add(data, mark):
    doc = json.loads(data)
    doc["writerMarks"] = doc.get("writerMarks", []) + [mark]
    return (json.dumps(doc, indent=2) + "\n").encode()
def read_all(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    out = b""
    while chunk := os.read(fd, 1 << 16):
        out += chunk
    return out
def rename_in(new):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(new); f.flush(); os.fsync(f.fileno())
    os.replace(tmp, path)
n = 0
while not os.path.exists(stop):
    mark = f"m{n}"
    if convention == "in-place":
        fd = os.open(path, os.O_RDWR)
        time.sleep(random.random() * 0.05)  # holds the old descriptor a moment
        fcntl.flock(fd, fcntl.LOCK_EX)
        new = add(read_all(fd), mark)
        os.pwrite(fd, new, 0); os.ftruncate(fd, len(new)); os.fsync(fd)
        os.close(fd)
    elif convention == "rename-locked":
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        with open(path, "rb") as f:
            new = add(f.read(), mark)
        rename_in(new)
        os.close(fd)
    else:
        with open(path, "rb") as f:
            data = f.read()
        time.sleep(random.random() * 0.05)  # a writer computes between read and rename
        rename_in(add(data, mark))
    print(mark, flush=True)
    n += 1
    time.sleep(float(sys.argv[5]) * (0.5 + random.random()))
"""


def git(workspace: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    done = subprocess.run(["git", *args], cwd=workspace, env=env, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def make_workspace(root: Path) -> tuple[Path, bytes, str]:
    workspace = root / "ws"
    workspace.mkdir()
    git(workspace, "init", "-q", "-b", "main")
    shas = []
    for n, task in enumerate((T1, T2), 1):
        (workspace / f"f{n}.txt").write_text(f"{n}\n", encoding="utf-8")
        git(workspace, "add", "-A")
        git(workspace, "commit", "-q", "-m", f"{task} step {n}")
        shas.append(git(workspace, "rev-parse", "HEAD"))
    tasks = {T1: {"status": "DONE", "commitSha": shas[0], "completedAt": "2026-01-01T12:00:00Z"},
             T2: {"status": "PENDING"}}
    text = json.dumps({"epic": "0049", "stories": {STORY: {"tasks": tasks}}}, indent=2) + "\n"
    (workspace / STATE).parent.mkdir(parents=True)
    return workspace, text.encode(), shas[1]


def trial(storyd: str, workspace: Path, start: bytes, sha: str, convention: str,
          seed: int, env: dict[str, str], gap: float) -> tuple[int, bool, int]:
    """(lost marks, apply exited 0 without its change at the end, apply exit code)."""
    path = workspace / STATE
    path.write_bytes(start)
    stop = workspace.parent / "stop"
    stop.unlink(missing_ok=True)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), convention, str(stop),
                               str(seed), str(gap)], stdout=subprocess.PIPE, text=True)
    time.sleep(random.random() * gap)  # the writer is under way when the apply starts
    applied = subprocess.run([storyd, "reconcile", "--workspace", str(workspace), "--apply"],
                             check=False, env=env, capture_output=True, timeout=120)
    time.sleep(0.02)
    stop.touch()
    written = writer.communicate(timeout=60)[0].split()
    doc = json.loads(path.read_bytes())
    lost = len(set(written) - set(doc.get("writerMarks", [])))
    task = doc["stories"][STORY]["tasks"][T2]
    landed = task.get("status") == "DONE" and task.get("commitSha") == sha
    return lost, applied.returncode == 0 and not landed, applied.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--storyd", default=str(here / ".venv" / "bin" / "storyd"))
    parser.add_argument("--trials", type=int, default=80)
    parser.add_argument("--gap", type=float, default=0.1,
                        help="mean seconds between one writer's updates (0.5-1.5 x)")
    parser.add_argument("--conventions", default="in-place,rename-locked,rename-unlocked")
    args = parser.parse_args()
    print(f"storyd {args.storyd}; {args.trials} trials per convention; gap {args.gap:g} s; "
          f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="storyd-race-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "XDG_STATE_HOME": str(root / "state"),
               "XDG_CONFIG_HOME": str(root / "config"), "XDG_RUNTIME_DIR": str(root / "run"),
               "STORYD_SOCKET": str(root / "run" / "none.sock")}
        workspace, start, sha = make_workspace(root)
        for convention in args.conventions.split(","):
            lost = applied_lost = trials_losing = 0
            codes: dict[int, int] = {}
            for n in range(args.trials):
                got, bad, code = trial(args.storyd, workspace, start, sha, convention, n, env,
                                      args.gap)
                lost += got
                trials_losing += got > 0
                applied_lost += bad
                codes[code] = codes.get(code, 0) + 1
            exits = ", ".join(f"{c}: {k}" for c, k in sorted(codes.items()))
            print(f"{convention:16} lost updates {lost} (in {trials_losing} trials); "
                  f"exit 0 without the change at the end {applied_lost}; exits {{{exits}}}")


if __name__ == "__main__":
    main()
