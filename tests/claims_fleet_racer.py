"""A claimant process on a fleet machine for tests/test_claims_fleet.py (run as a script).

    python claims_fleet_racer.py GATE ROUNDS OWNER WORKSPACE

The machine is the `[fleet]` of $XDG_CONFIG_HOME/storyd/config.toml. Says `ready` once
connected, waits at GATE (a FIFO the test writes one byte per racer to), then claims
unit `r<n>` of `state.json` in WORKSPACE for each round n through storyd.api.claims,
printing one line per round as it goes: `won N TOKEN` or `lost N`. A round that meets
an unreachable server (FleetOffline) prints `offline N` and is tried again until it is
won or refused: a grant whose answer was lost is then found as the racer's own (same
token), never given twice. Exits 0 when every round is decided.
"""

from __future__ import annotations

import os
import sys
import time

from storyd.api import claims
from storyd.fleet.claims_kv import FleetOffline


def _say(line: str) -> None:
    os.write(1, f"{line}\n".encode())


def main(gate: str, rounds: int, owner: str, workspace: str) -> int:
    """Race every round; what happened is on stdout."""
    claims.listing()  # connect (and make the bucket) before the start
    _say("ready")
    with open(gate, "rb", buffering=0) as door:
        door.read(1)
    for n in range(rounds):
        place = claims.Place(workspace, "state.json", f"r{n}")
        while True:
            try:
                granted = claims.claim(place, owner, 600.0)
            except claims.Held:
                _say(f"lost {n}")
                break
            except FleetOffline:
                _say(f"offline {n}")
                time.sleep(0.05)  # the server is restarting: try the round again
                continue
            _say(f"won {n} {granted.token}")
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
