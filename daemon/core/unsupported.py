"""The one line storyd says on a system it does not run on: native Windows.

storyd needs POSIX: fcntl's flock, Unix sockets with peer credentials, posix_spawn and
process groups. Imported only where `os.name == "nt"` (the launchers check first), so
no other system pays for it.
"""

from __future__ import annotations

import sys

__all__ = ["EX_UNAVAILABLE", "WINDOWS", "windows_exit"]

EX_UNAVAILABLE = 69  # sysexits: a service this system does not offer
WINDOWS = (
    "storyd: native Windows is not supported (it needs POSIX: flock, Unix sockets, "
    "posix_spawn); run it inside WSL2, or on Linux or macOS"
)


def windows_exit() -> int:
    """Say why storyd does not run here, on stderr; the exit code."""
    sys.stderr.write(WINDOWS + "\n")
    return EX_UNAVAILABLE
