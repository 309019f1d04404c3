"""Where the claims database lives, without importing sqlite3: a hook asks whether it
exists before it loads anything else of claims (tests/test_hook_imports.py)."""

from __future__ import annotations

import os

__all__ = ["claims_path", "ever_claimed"]


def claims_path() -> str:
    """$STORYD_CLAIMS, else $XDG_STATE_HOME/storyd/claims.sqlite3 (~/.local/state)."""
    from storyd.core.paths import state_dir

    return os.environ.get("STORYD_CLAIMS") or os.path.join(state_dir(), "claims.sqlite3")


def ever_claimed() -> bool:
    """Whether anything was ever claimed on this machine (the database exists)."""
    return os.path.exists(claims_path())
