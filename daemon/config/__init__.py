"""The configuration file: $XDG_CONFIG_HOME/storyd/config.toml, read with tomllib.

Every key, its default and its range is in docs/service.md. A missing file means the
defaults. Any problem raises ConfigError (exit 78, EX_CONFIG) listing every problem
found, each as `PATH:LINE: FIELD: MESSAGE`, where FIELD is the dotted key
(`limits.max_workspaces`, `notify.hook[0]`) and LINE is where that key is written.

    values.py    Config, Limits, Notify, LIMITS (defaults and ranges), Problem, ConfigError
    loader.py    load(), load_staleness(), load_claims(): read and parse, then check
    parsed.py    tomllib's parse kept between processes ($XDG_CACHE_HOME), keyed on the
                 file's bytes: a hook or `storyd resume` after the first imports no tomllib
    checker.py   Checker: every key, type and range, each problem with its line; codes
                 (repair codes, block_stop_on) are checked by asking the one registry
                 (storyd.core.registry), never by importing reconcile
    fleet.py     Fleet and the [fleet] table's check (storyd.fleet.config re-exports them)
    claims.py    Claims and the [claims] table's check (ttl: a claim's default lease)
    lines.py     locate(): the line a dotted key is written on

The package imports nothing above it (no storyd.api, no storyd.fleet): tests/test_registry.py.

Nothing heavy is imported at module level: `storyd resume` may call `load_staleness()`,
which only stats the file when there is none. tomllib, re and difflib are imported
inside the functions that need them.
"""

from __future__ import annotations

from storyd.config.lines import locate
from storyd.config.loader import load, load_claims, load_staleness
from storyd.config.values import (
    DEFAULT_STALENESS,
    LIMITS,
    STALENESS_MODES,
    Config,
    ConfigError,
    Limits,
    Notify,
    Problem,
)

__all__ = [
    "DEFAULT_STALENESS",
    "LIMITS",
    "STALENESS_MODES",
    "Config",
    "ConfigError",
    "Limits",
    "Notify",
    "Problem",
    "load",
    "load_claims",
    "load_staleness",
    "locate",
]
