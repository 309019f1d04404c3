"""Swapped workspaces (issue 29): wrong answers after the folder at a watched path
became another one.

    .venv/bin/python bench/bench_swap.py [--storyd PATH] [--cycles 10] [--queries 200]

Two git workspaces, A (story 1 of 4 tasks done) and B (3 done, the 4th committed but not
recorded: an `unrecorded` warning). One `storyd serve` watches the path `ws`. Each cycle
swaps what `ws` names, in three ways in turn, then sends --queries `resume` requests at
once and counts the answers that are not the folder's now (`wrong`); then it waits for
the daemon's answer to carry the new folder's detector findings (B's `unrecorded`, or
none for A) and reports the slowest wait:

    exchange   renameat2(ws, other, RENAME_EXCHANGE) through ctypes
    mv         mv ws ws.old; mv other ws; mv ws.old other
    symlink    `ws` is a link; retargeted atomically (a new link renamed over it)

Before issue 29 (main at da75873) 5,726 of 9,432 answers over 10 cycles were the old
folder's. `--storyd` runs another tree's command.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from socket_client import ask, wait_for_ping

STORY = "story-0049-0001"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def make(repo: Path, done: int, unrecorded: bool) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".git" / "info" / "exclude").write_text("plans/\n", encoding="utf-8")
    shas = []
    for n in range(1, done + unrecorded + 1):
        (repo / f"f{n}.txt").write_text(f"{repo.name} {n}\n", encoding="utf-8")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"TASK-0049-0001-{n:03d} step {n}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    tasks: dict[str, object] = {}
    for n in range(1, 5):
        tasks[f"TASK-0049-0001-{n:03d}"] = (
            {"status": "DONE", "commitSha": shas[n - 1], "completedAt": "2026-01-01T12:00:00Z"}
            if n <= done else {"status": "PENDING"})
    state = repo / "plans" / "epic-0049" / "execution-state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"epic": "0049", "stories": {STORY: {"tasks": tasks}}}),
                     encoding="utf-8")


def exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fn = libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")


def resume(sock: str, ws: Path) -> tuple[str, bool]:
    answer = ask(sock, {"op": "resume", "workspace": str(ws), "epic": "0049", "story": STORY})
    if not answer.get("ok"):
        return f"error {answer.get('error')}", False
    codes = {f["code"] for f in answer["findings"]}  # type: ignore[union-attr]
    return str(answer["envelope"]["resumePoint"]), "unrecorded" in codes  # type: ignore[index]


class Swapper:
    """What `ws` names, swapped one way or another; which folder (A?) is there now."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws, self.other, self.link = root / "ws", root / "other", root / "link"
        self.a_at_ws = True

    def swap(self, kind: str) -> tuple[Path, bool]:
        """Swap; the path to ask and whether it names A now."""
        if kind == "exchange":
            exchange(self.ws, self.other)
        elif kind == "mv":
            old = self.root / "ws.old"
            self.ws.rename(old)
            self.other.rename(self.ws)
            old.rename(self.other)
        else:
            if not self.link.is_symlink():
                self.link.symlink_to(self.ws)
            at_ws = os.path.realpath(self.link) == str(self.ws)
            new = self.root / "link.new"
            new.symlink_to(self.other if at_ws else self.ws)
            new.rename(self.link)
            return self.link, (not at_ws) == self.a_at_ws
        self.a_at_ws = not self.a_at_ws
        return self.ws, self.a_at_ws


def cycles(sock: str, swapper: Swapper, kind: str, truth: dict[bool, str],
           count: int, queries: int) -> str:
    """`count` swaps of one kind: the wrong answers, and the slowest wait for findings."""
    wrong = total = 0
    slowest = 0.0
    sample = ""
    for cycle in range(count):
        asked, is_a = swapper.swap(kind)
        started = time.monotonic()
        for _ in range(queries):
            total += 1
            point = resume(sock, asked)[0]
            if point != truth[is_a]:
                wrong += 1
                sample = sample or f" (first: cycle {cycle}, {asked} answered {point})"
        while time.monotonic() - started < 30:
            point, warned = resume(sock, asked)
            if point == truth[is_a] and warned != is_a:
                break
            time.sleep(0.01)
        slowest = max(slowest, time.monotonic() - started)
    return (f"{kind:9} wrong answers {wrong} of {total}; the new folder's findings after "
            f"at most {slowest:.2f} s (its {queries} queries included){sample}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--storyd", default=str(here / ".venv" / "bin" / "storyd"))
    parser.add_argument("--cycles", type=int, default=10, help="cycles per swap kind")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", default="exchange,mv,symlink")
    parser.add_argument("--log", help="keep the daemon's log (stderr) in this file")
    args = parser.parse_args()
    print(f"storyd {args.storyd}; {args.cycles} cycles per kind; {args.queries} queries "
          f"after each swap; load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="storyd-swap-") as tmp:
        root = Path(tmp)
        swapper = Swapper(root)
        make(swapper.ws, 1, False)
        make(swapper.other, 3, True)
        env = {**os.environ, "XDG_CONFIG_HOME": str(root / "config"),
               "XDG_RUNTIME_DIR": str(root / "run"), "XDG_STATE_HOME": str(root / "state")}
        sock = str(root / "storyd.sock")
        daemon = subprocess.Popen([args.storyd, "serve", "--socket", sock, "--workspace",
                                   str(swapper.ws), "--workspace", str(swapper.other)],
                                  env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(args.log, "wb") if args.log else subprocess.DEVNULL)  # noqa: SIM115
        try:
            if wait_for_ping(sock, 20.0, lambda: daemon.poll() is None) is None:
                sys.exit("storyd serve did not answer")
            truth = {True: resume(sock, swapper.ws)[0], False: resume(sock, swapper.other)[0]}
            print(f"A answers {truth[True]}, B answers {truth[False]}")
            for kind in args.kinds.split(","):
                print(cycles(sock, swapper, kind, truth, args.cycles, args.queries))
        finally:
            daemon.terminate()
            daemon.wait(20)


if __name__ == "__main__":
    main()
