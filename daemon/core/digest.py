"""SHA-256 without hashlib's start-up: the interpreter's own built-in module.

`import hashlib` loads OpenSSL (about 5-6 ms of a hook's 20-odd without a daemon); the
same digest comes from the built-in `_sha2` (Python 3.12+) or `_sha256` (3.11) module
in a fraction of that. An interpreter built without them uses hashlib.
"""

from __future__ import annotations

__all__ = ["sha256_hex"]


# looked up once: a failed import is not remembered, and 3.11's search for `_sha2` on
# every call cost a hook 4 scans of sys.path (~0.15 ms)
try:
    from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment,unused-ignore]


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data` as 64 hex digits."""
    return str(sha256(data).hexdigest())
