"""A claimant process for the claims race tests (run as a script, not imported by tests).

    python claims_racer.py GATE ROUNDS OWNER WORKSPACE [hold]

Says `ready` once its imports are done, then waits at GATE (a FIFO the test holds open
and writes one byte per racer to when all are ready, so they start together); then
claims unit `r<n>` of `state.json` in WORKSPACE for each round n, and prints the rounds it
won, one per line. With `hold`, it claims unit `held` with a 1 s lease, prints its token
and waits to be killed.
"""

from __future__ import annotations

import os
import sqlite3
import sys

from storyd.api import claims
from storyd.api.claims_store import connect


def main(gate: str, rounds: int, owner: str, workspace: str, hold: bool) -> int:
    """Race (or hold); 0 always: what it won is on stdout."""
    conn = connect(busy=30.0)
    if hold:
        granted = claims.claim(claims.Place(workspace, "state.json", "held"), owner, 1.0,
                               conn=conn)  # fmt: skip
        sys.stdout.write(f"{granted.token}\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the test kills this process
        return 0
    os.write(1, b"ready\n")
    with open(gate, "rb", buffering=0) as door:
        door.read(1)
    won = race(rounds, owner, workspace, conn)
    os.write(1, "".join(f"{n}\n" for n in won).encode())
    return 0


def race(rounds: int, owner: str, workspace: str,
         conn: sqlite3.Connection | None = None) -> list[int]:
    """Claim unit `r<n>` of `state.json` for each round n in this process; the rounds won."""
    conn = conn or connect(busy=30.0)
    won = []
    for n in range(rounds):
        try:
            claims.claim(claims.Place(workspace, "state.json", f"r{n}"), owner, 600.0,
                         conn=conn)  # fmt: skip
        except claims.Held:
            continue
        won.append(n)
    return won


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4],
                  sys.argv[5:] == ["hold"]))  # fmt: skip
