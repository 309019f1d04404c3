"""A claimant process racing through a door (run as a script, not imported by tests).

    python claims_door_racer.py GATE ROUNDS OWNER WORKSPACE (SOCKET | direct)

Says `ready` once connected, then waits at GATE (a FIFO the test holds open and writes
one byte per racer to when all are ready); then claims unit `r<n>` of `state.json` in
WORKSPACE for each round n, through the daemon's `claim` op on one persistent
connection to SOCKET (storyd.api.client), or with `direct` in this process on the same
store; prints the rounds it won, one per line. A refusal other than CLAIM_HELD, or an
answer that is not an answer, exits 1 naming it.
"""

from __future__ import annotations

import os
import sys

from claims_racer import race  # this script's folder is sys.path[0]


def main(gate: str, rounds: int, owner: str, workspace: str, door: str) -> int:
    """Race; 0 with what it won on stdout, 1 on an unexpected answer."""
    client = None
    if door != "direct":
        from storyd.api.client import Client

        client = Client(door, timeout=60.0)
        client.request("ping")
    os.write(1, b"ready\n")
    with open(gate, "rb", buffering=0) as start:
        start.read(1)
    if client is None:
        won = race(rounds, owner, workspace)
    else:
        won = []
        for n in range(rounds):
            answer = client.request("claim", workspace=workspace, stateFile="state.json",
                                    unit=f"r{n}", owner=owner, ttl=600)  # fmt: skip
            if answer.get("ok") is True:
                won.append(n)
                continue
            error = answer.get("error")
            if not isinstance(error, dict) or error.get("name") != "CLAIM_HELD":
                sys.stderr.write(f"round {n}: {answer}\n")
                return 1
        client.close()
    os.write(1, "".join(f"{n}\n" for n in won).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]))
