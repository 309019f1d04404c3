"""[claims]: the default lease of a claim (daemon/api/claims.py, docs/claims.md).

ttl   float   seconds a lease lasts when the door names no `--ttl` (default 900; from
              1 s to 7 days); $STORYD_CLAIM_TTL overrides it
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.config.checker import Checker

__all__ = ["CLAIMS_KEYS", "TTL", "Claims", "check"]

TTL: tuple[type, float, float, float] = (float, 900.0, 1.0, 7 * 86400.0)  # type, default, range
CLAIMS_KEYS = ("ttl",)


class Claims:
    """[claims]'s values."""

    __slots__ = CLAIMS_KEYS
    ttl: float

    def __init__(self, ttl: float = TTL[1]) -> None:
        self.ttl = float(ttl)

    def as_dict(self) -> dict[str, object]:
        """The table as plain data (`storyd config show`)."""
        return {"ttl": self.ttl}

    def __repr__(self) -> str:
        return f"Claims(ttl={self.ttl!r})"


def check(checker: Checker, table: dict[str, object]) -> Claims:
    """[claims] as written, each problem told to `checker`."""
    checker.unknown(table, CLAIMS_KEYS, "claims.")
    if "ttl" not in table:
        return Claims()
    return Claims(checker.number("claims.ttl", table["ttl"], TTL))
