"""`storyd config check|show`: validate the configuration file, or print the effective one.

check   `ok: PATH`, or every problem as `PATH:LINE: FIELD: MESSAGE`; exit 0 or 78.
        Valid but suspicious values (a workspace that does not exist, a detector no
        plugin provides, a hook program not found) print as `PATH:LINE: FIELD: warning:
        MESSAGE` and leave the exit code at 0.
show    the effective configuration (the file over the defaults) as TOML, or --json.

--config FILE checks or shows another file than ~/.config/storyd/config.toml; `--file`
is the older spelling of the same flag, still accepted (every other command says
`--config`).
"""

from __future__ import annotations

import os
import sys

from storyd.core.errors import FlagError, UsageError
from storyd.core.flags import HELP, SWITCH, VALUE, HelpRequested, parse
from storyd.core.paths import config_path

__all__ = ["ALIASES", "SUBCOMMANDS", "main", "to_toml"]

USAGE = (
    "usage: storyd config check [--config FILE]\n"
    "       storyd config show [--config FILE] [--json]"
)
SUBCOMMANDS = {
    "check": {"config": VALUE, "file": VALUE},
    "show": {"config": VALUE, "file": VALUE, "json": SWITCH},
}
ALIASES = {"file": "config"}  # older spellings: accepted, not offered by completion


def _warnings(cfg: object, path: str) -> list[str]:
    """Valid settings that will not work as probably meant, formatted with their lines."""
    import shutil

    from storyd import config

    assert isinstance(cfg, config.Config)
    found: list[tuple[str, str]] = []
    for index, workspace in enumerate(cfg.workspaces):
        if not os.path.isdir(workspace):
            found.append((f"workspaces[{index}]", f"{workspace} is not a directory (yet)"))
    if cfg.detectors:
        import difflib

        from storyd.core import registry

        known = sorted(registry.get().names(registry.DETECTORS))
        for name in cfg.detectors:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
                found.append((f"detectors.{name}", f"no detector {name!r} is installed ({hint})"))
    hook = cfg.notify.hook
    if hook and not shutil.which(hook[0]):
        found.append(("notify.hook[0]", f"{hook[0]!r} is not an executable program on PATH"))
    if cfg.fleet is not None:
        from storyd.fleet.config import warnings as fleet_warnings

        found.extend(fleet_warnings(cfg.fleet))
    lines = []
    for field, message in found:
        line = config.locate(path, field)
        where = f"{path}:{line}" if line else path
        lines.append(f"{where}: {field}: warning: {message}")
    return lines


def _check(path: str | None) -> int:
    from storyd import config

    shown = path or config_path()
    if path is not None and not os.path.exists(path):
        print(f"{path}: file: no such file")
        return 78
    try:
        cfg = config.load(path)
    except config.ConfigError as exc:
        print(exc.message)
        return exc.code
    if cfg.path is None:
        print(f"ok: {shown} (no file: the defaults apply)")
        return 0
    for line in _warnings(cfg, shown):
        print(line)
    print(f"ok: {shown}")
    return 0


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped)
        return f'"{escaped}"'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + ", ".join(pairs) + " }"
    return str(getattr(value, "isoformat", lambda: value)())


def _toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else _toml_value(key)


def to_toml(cfg: object) -> str:
    """The configuration as a TOML document that `load` reads back to an equal Config."""
    from storyd import config
    from storyd.core.paths import socket_path

    assert isinstance(cfg, config.Config)
    out = []
    if cfg.socket is None:
        out.append(f"# socket = {_toml_value(socket_path())}  (not set: the default)")
    else:
        out.append(f"socket = {_toml_value(cfg.socket)}")
    out.append(f"staleness = {_toml_value(cfg.staleness)}")
    out.append(f"workspaces = {_toml_value(cfg.workspaces)}")
    out.append(f"auto_watch = {_toml_value(cfg.auto_watch)}")
    out.append("\n[limits]")
    out.extend(f"{k} = {_toml_value(v)}" for k, v in cfg.limits.as_dict().items())
    for name, options in cfg.detectors.items():
        out.append(f"\n[detectors.{_toml_key(name)}]")
        out.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in options.items())
    out.append("\n[notify]")
    for key, value in cfg.notify.as_dict().items():
        if value is None:
            out.append(f'# {key} = ["/path/to/program", "--flag"]  (not set)')
        else:
            out.append(f"{key} = {_toml_value(value)}")
    if cfg.fleet is not None:
        out.append("\n[fleet]")
        out.extend(f"{k} = {_toml_value(v)}" for k, v in cfg.fleet.as_dict().items())
    out.append("\n[reconcile]")
    out.append(f"auto = {_toml_value(cfg.reconcile_auto)}")
    return "\n".join(out) + "\n"


def _show(path: str | None, as_json: bool) -> int:
    from storyd import config

    try:
        cfg = config.load(path)
    except config.ConfigError as exc:
        print(exc.message)
        return exc.code
    if as_json:
        import json

        print(json.dumps({"path": cfg.path, **cfg.as_dict()}, indent=2, default=str))
        return 0
    source = cfg.path or f"{path or config_path()} (no file: the defaults)"
    print(f"# storyd's effective configuration, from {source}")
    sys.stdout.write(to_toml(cfg))
    return 0


def main(argv: list[str]) -> int:
    """`check` or `show`."""
    if argv and argv[0] in HELP:
        raise HelpRequested(USAGE)
    if not argv:
        raise FlagError(USAGE)
    if argv[0] not in SUBCOMMANDS:
        from storyd.cli import did_you_mean

        hint = did_you_mean(argv[0], list(SUBCOMMANDS))
        raise FlagError(f"storyd config: unknown subcommand {argv[0]!r}{hint}\n{USAGE}")
    flags = parse(argv[1:], SUBCOMMANDS[argv[0]], USAGE)
    named = {str(flags[n]) for n in ("config", "file") if flags.get(n)}
    if len(named) > 1:
        raise UsageError(f"--file is another spelling of --config; give one file\n{USAGE}")
    path = named.pop() if named else None
    if argv[0] == "check":
        return _check(path)
    return _show(path, bool(flags.get("json")))
