"""Checking a parsed config.toml: every key, type and range, every problem with its line.

`Checker.config(document)` builds a `Config` and collects `Problem`s instead of stopping
at the first; `storyd config check`, `storyd serve` and a reload all use it.
"""

from __future__ import annotations

import os

from storyd.config.lines import Lines
from storyd.config.values import (
    CONTEXT_CHARS,
    DEFAULT_STALENESS,
    HOOK_TIMEOUT,
    HOOKS_KEYS,
    LIMITS,
    NOTIFY_KEYS,
    RECONCILE_KEYS,
    SEVERITIES,
    SOCKET_PATH_MAX,
    STALENESS_MODES,
    TOP_KEYS,
    Config,
    Hooks,
    Limits,
    Notify,
    Problem,
)

__all__ = ["Checker", "kind_name", "repair_codes"]


def kind_name(value: object) -> str:
    """How a TOML value's type is named in a problem's message."""
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    if type(value) in names:
        return names[type(value)]
    return {"datetime": "a date-time", "date": "a date", "time": "a time"}.get(
        type(value).__name__, type(value).__name__
    )



def repair_codes(wanted: list[str]) -> tuple[str, ...]:
    """The repair codes the registry holds: storyd's own, and the plugins' too (a scan of
    the installed distributions) only when `wanted` names a code storyd's own lack."""
    from storyd.core import registry

    plugins = registry.get()
    known = plugins.names(registry.REPAIRS, plugins=False)
    if all(code in known for code in wanted):
        return known
    return plugins.names(registry.REPAIRS)


class Checker(Lines):
    """Builds a Config from a parsed document, collecting every problem with its line."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.problems: list[Problem] = []

    def problem(self, field: str, message: str, line: int | None = None) -> None:
        """Record a problem at `field`'s line (or the line given)."""
        self.problems.append(Problem(field, self.line(field) if line is None else line, message))

    # values ------------------------------------------------------------------------------

    def unknown(self, table: dict[str, object], known: tuple[str, ...], prefix: str) -> None:
        for key in table:
            if key in known:
                continue
            import difflib  # only for a key to correct: a hook's start skips its import

            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
            self.problem(prefix + key, f"unknown key {key!r}{hint}")

    def boolean(self, field: str, value: object, default: bool) -> bool:
        if isinstance(value, bool):
            return value
        self.problem(field, f"expected true or false, got {kind_name(value)}")
        return default

    def number(self, field: str, value: object, spec: tuple[type, float, float, float]) -> float:
        kind, default, low, high = spec
        wanted = "an integer" if kind is int else "a number"
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (kind is int and isinstance(value, float))
        ):
            self.problem(field, f"expected {wanted}, got {kind_name(value)}")
            return default
        if isinstance(value, float) and value - value != 0.0:  # inf or nan (no `math`)
            self.problem(field, f"expected a finite number, got {value}")
            return default
        if not low <= value <= high:
            if kind is int:  # 1073741824, not 1.07374e+09
                shown = f"{value} is out of range: expected {int(low)} to {int(high)}"
            else:
                shown = f"{value:g} is out of range: expected {low:g} to {high:g}"
            self.problem(field, shown)
            return default
        return kind(value)  # type: ignore[no-any-return]

    def table(self, field: str, value: object) -> dict[str, object]:
        if isinstance(value, dict):
            return value
        self.problem(field, f"expected a table, got {kind_name(value)}")
        return {}

    def staleness(self, value: object) -> str:
        if isinstance(value, str) and value in STALENESS_MODES:
            return value
        shown = repr(value) if isinstance(value, str) else kind_name(value)
        modes = " or ".join(map(repr, STALENESS_MODES))
        self.problem("staleness", f"expected {modes}, got {shown}")
        return DEFAULT_STALENESS

    def socket(self, value: object) -> str | None:
        if not isinstance(value, str) or not value:
            got = "an empty string" if value == "" else kind_name(value)
            self.problem("socket", f"expected an absolute path, got {got}")
            return None
        path = os.path.expanduser(value)
        if not os.path.isabs(path):
            self.problem("socket", f"{value!r} is not an absolute path (~ is allowed)")
            return None
        size = len(os.fsencode(path))
        if size > SOCKET_PATH_MAX:
            self.problem(
                "socket", f"{size} bytes is too long for a socket path (at most {SOCKET_PATH_MAX})"
            )
            return None
        return os.path.normpath(path)

    def workspaces(self, value: object, key: str = "workspaces") -> list[str]:
        if not isinstance(value, list):
            self.problem(key, f"expected an array of paths, got {kind_name(value)}")
            return []
        home = os.path.expanduser("~")
        found: list[str] = []
        for index, item in enumerate(value):
            field = f"{key}[{index}]"
            if not isinstance(item, str) or not item:
                got = "an empty string" if item == "" else kind_name(item)
                self.problem(field, f"expected a path, got {got}", self.element_line(key, item))
                continue
            path = os.path.normpath(os.path.join(home, os.path.expanduser(item)))
            if path not in found:
                found.append(path)
        return found

    def hook(self, value: object) -> list[str] | None:
        field = "notify.hook"
        if not isinstance(value, list) or not value:
            got = "an empty array" if value == [] else kind_name(value)
            self.problem(field, f"expected a non-empty array (program, then arguments), got {got}")
            return None
        ok = True
        for index, item in enumerate(value):
            if not isinstance(item, str) or (index == 0 and not item):
                got = "an empty string" if item == "" else kind_name(item)
                self.problem(
                    f"{field}[{index}]",
                    f"expected a string, got {got}",
                    self.element_line(field, item),
                )
                ok = False
        if not ok:
            return None
        return [os.path.expanduser(value[0]), *value[1:]]

    # the document ------------------------------------------------------------------------

    def config(self, document: dict[str, object]) -> Config:
        self.unknown(document, TOP_KEYS, "")
        config = Config()
        if "socket" in document:
            config.socket = self.socket(document["socket"])
        if "staleness" in document:
            config.staleness = self.staleness(document["staleness"])
        if "workspaces" in document:
            config.workspaces = self.workspaces(document["workspaces"])
        if "auto_watch" in document:
            config.auto_watch = self.boolean("auto_watch", document["auto_watch"], True)
        if "limits" in document:
            config.limits = self.limits(self.table("limits", document["limits"]))
        if "detectors" in document:
            config.detectors = self.detectors(self.table("detectors", document["detectors"]))
        if "notify" in document:
            config.notify = self.notify(self.table("notify", document["notify"]))
        if "reconcile" in document:
            config.reconcile_auto = self.reconcile(self.table("reconcile", document["reconcile"]))
        if "hooks" in document:
            config.hooks = self.hooks(self.table("hooks", document["hooks"]))
        if "fleet" in document:
            from storyd.config.fleet import check

            config.fleet = check(self, self.table("fleet", document["fleet"]))
        if "history" in document:
            from storyd.config.history import check as history

            config.history = history(self, self.table("history", document["history"]))
        if "claims" in document:
            from storyd.config.claims import check as claims

            config.claims = claims(self, self.table("claims", document["claims"]))
        cap = config.limits.max_workspaces
        if len(config.workspaces) > cap:
            self.problem(
                "workspaces",
                f"{len(config.workspaces)} listed, more than limits.max_workspaces ({cap})",
            )
        return config

    def limits(self, table: dict[str, object]) -> Limits:
        self.unknown(table, tuple(LIMITS), "limits.")
        values = {}
        for name, spec in LIMITS.items():
            if name in table:
                values[name] = self.number(f"limits.{name}", table[name], spec)
        limits = Limits(**values)
        if limits.total_buffer < limits.connection_buffer:
            self.problem(
                "limits.total_buffer",
                f"{limits.total_buffer} is less than limits.connection_buffer "
                f"({limits.connection_buffer}): the total bounds every connection's together",
            )
        return limits

    def detectors(self, table: dict[str, object]) -> dict[str, dict[str, object]]:
        found = {}
        for name, value in table.items():
            options = self.table(f"detectors.{name}", value)
            if "enabled" in options and not isinstance(options["enabled"], bool):
                self.problem(
                    f"detectors.{name}.enabled",
                    f"expected true or false, got {kind_name(options['enabled'])}",
                )
                options = {k: v for k, v in options.items() if k != "enabled"}
            found[name] = options
        return found

    def notify(self, table: dict[str, object]) -> Notify:
        self.unknown(table, NOTIFY_KEYS, "notify.")
        notify = Notify()
        if "log" in table:
            notify.log = self.boolean("notify.log", table["log"], True)
        if "desktop" in table:
            notify.desktop = self.boolean("notify.desktop", table["desktop"], True)
        if "hook" in table:
            notify.hook = self.hook(table["hook"])
        if "hook_timeout" in table:
            notify.hook_timeout = self.number(
                "notify.hook_timeout", table["hook_timeout"], (float, *HOOK_TIMEOUT)
            )
        if "hook_workspaces" in table:
            notify.hook_workspaces = self.workspaces(
                table["hook_workspaces"], "notify.hook_workspaces"
            )
        if "hook_codes" in table:
            notify.hook_codes = self.strings("notify.hook_codes", table["hook_codes"])
        if "hook_severities" in table:
            notify.hook_severities = self.strings(
                "notify.hook_severities", table["hook_severities"], SEVERITIES
            )
        return notify

    def strings(
        self, field: str, value: object, allowed: tuple[str, ...] | None = None
    ) -> list[str]:
        """An array of non-empty strings; with `allowed`, each one of those (did you mean)."""
        import difflib

        if not isinstance(value, list):
            self.problem(field, f"expected an array of strings, got {kind_name(value)}")
            return []
        found: list[str] = []
        for index, item in enumerate(value):
            line = self.element_line(field, item)
            if not isinstance(item, str) or not item:
                got = "an empty string" if item == "" else kind_name(item)
                self.problem(f"{field}[{index}]", f"expected a string, got {got}", line)
            elif allowed is not None and item not in allowed:
                close = difflib.get_close_matches(item, allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(allowed)}"
                self.problem(f"{field}[{index}]", f"unknown value {item!r} ({hint})", line)
            elif item not in found:
                found.append(item)
        return found


    def reconcile(self, table: dict[str, object]) -> list[str]:
        """[reconcile] auto: a list of repair codes (see docs/reconcile.md)."""
        self.unknown(table, RECONCILE_KEYS, "reconcile.")
        value = table.get("auto", [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem("reconcile.auto", f"expected an array of strings, got {kind_name(value)}")
            return []
        known = repair_codes(value)
        for code in value:
            if code not in known:
                names = ", ".join(known)
                self.problem("reconcile.auto", f"unknown repair code {code!r} (known: {names})")
        return [code for code in dict.fromkeys(value) if code in known]

    def hooks(self, table: dict[str, object]) -> Hooks:
        """[hooks]: block_stop_on (repair codes), roots (folders), context_chars."""
        self.unknown(table, HOOKS_KEYS, "hooks.")
        hooks = Hooks()
        if "block_stop_on" in table:
            value = table["block_stop_on"]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                got = kind_name(value)
                self.problem("hooks.block_stop_on", f"expected an array of strings, got {got}")
            else:
                known = repair_codes(value)
                for code in value:
                    if code not in known:
                        names = ", ".join(known)
                        message = f"unknown code {code!r} (known: {names})"
                        self.problem("hooks.block_stop_on", message)
                hooks.block_stop_on = [c for c in dict.fromkeys(value) if c in known]
        if "roots" in table:
            value = table["roots"]
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                self.problem("hooks.roots", f"expected an array of paths, got {kind_name(value)}")
            else:
                hooks.roots = [os.path.realpath(os.path.expanduser(v)) for v in value]
        if "context_chars" in table:
            spec = (int, *CONTEXT_CHARS)
            value = table["context_chars"]
            hooks.context_chars = int(self.number("hooks.context_chars", value, spec))
        return hooks
