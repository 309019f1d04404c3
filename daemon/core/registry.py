"""The one registry of plugins: formats (and where their files live), detectors and
reconcile's repairs, each an entry point of its group, storyd's own ones exactly as a
third party's.

    Entry                   one entry point: group, name, `module:attribute`, distribution
    Registry                every group's entries, each loaded once and checked by its group
    get() / reset()         the process's registry, built on first use

storyd's own entries come from the package's `entry_points.txt` (the file pyproject.toml
makes the distribution's entry points), read here with str operations: `storyd resume`
finds its format without importlib.metadata, which costs more start-up than the rest of
the command. Other distributions' entries are scanned once, all groups at a time, and
only when something is asked that storyd's own cannot answer: from their dist-info files
(storyd.core.dists; importlib.metadata only where those cannot tell).

A plugin that fails to import, is not what its group expects, or takes a name already
taken is skipped: `problems` names it, a command says so on stderr, `report(sink)` sends
each problem to a log instead (the daemon's, doctor's report), and the rest load. Each
group's owner says what its plugins must be by the `check` it passes (formats:
storyd.core.formats; detectors: storyd.detectors; repairs: storyd.api.reconcile.repairs);
the registry imports none of them.
"""

from __future__ import annotations

import _thread  # not threading: its import costs `storyd resume` start-up time
import os
import sys

from storyd.core.switches import CONFIG

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    Check = Callable[[object, "Entry"], str | None]  # why a plugin is refused, or None

__all__ = [
    "DETECTORS", "FORMATS", "FORMAT_PATHS", "OWN_FILE", "REPAIRS", "Entry", "Registry", "get",
    "reset",
]  # fmt: skip

FORMATS = "storyd.formats"
# a format's paths, named as the format: read without importing the format's module
# (storyd.core.formats.declared), so a hook loads only the format of the file it names
FORMAT_PATHS = "storyd.format_paths"
DETECTORS = "storyd.detectors"
REPAIRS = "storyd.repairs"
GROUPS = (FORMATS, FORMAT_PATHS, DETECTORS, REPAIRS)
KINDS = {FORMATS: "format", FORMAT_PATHS: "format paths", DETECTORS: "detector",
         REPAIRS: "repair"}  # fmt: skip
OWN_FILE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "entry_points.txt")
DISTRIBUTION = "storyd"


class Entry:
    """One entry point: `name = module:attribute` in `group`; `dist` None for storyd's own."""

    __slots__ = ("dist", "group", "name", "value")

    def __init__(self, group: str, name: str, value: str, dist: str | None = None) -> None:
        self.group = group
        self.name = name
        self.value = value
        self.dist = dist

    def load(self) -> object:
        """The object it names (imported with __import__: importlib costs start-up time)."""
        module, _, attribute = self.value.partition(":")
        __import__(module.strip())
        found: object = sys.modules[module.strip()]
        for part in attribute.strip().split(".") if attribute.strip() else ():
            found = getattr(found, part)
        return found

    def __str__(self) -> str:
        origin = f", from {self.dist}" if self.dist else ""
        return f"{KINDS.get(self.group, self.group)} plugin {self.name} ({self.value}{origin})"

    def __repr__(self) -> str:
        return f"Entry({self.group!r}, {self.name!r}, {self.value!r}, {self.dist!r})"


def parse(text: str, dist: str | None = None) -> dict[str, list[Entry]]:
    """An entry_points.txt's entries by group, in file order (comments and blanks skipped)."""
    from storyd.core.dists import entries

    groups: dict[str, list[Entry]] = {}
    for group, name, value in entries(text):
        groups.setdefault(group, []).append(Entry(group, name, value, dist))
    return groups


def _scan_installed() -> Iterable[Entry]:
    """Every other distribution's entries in storyd's groups: read from their files
    (storyd.core.dists), else, where that cannot see them all, from importlib.metadata."""
    from storyd.core import dists

    found = dists.scan(GROUPS)
    if found is not None:
        return [Entry(group, name, value, label) for group, name, value, label in found]
    return _scan_metadata()


def _scan_metadata() -> Iterable[Entry]:
    """Every other distribution's entries in storyd's groups (importlib.metadata)."""
    from importlib.metadata import entry_points

    installed = entry_points()  # one scan of every distribution, selected per group below
    named: dict[int, str] = {}  # a distribution's METADATA is parsed once, not per entry
    for ep in (ep for group in GROUPS for ep in installed.select(group=group)):
        dist = getattr(ep, "dist", None)
        label = named.get(id(dist))
        if label is None:
            name = getattr(dist, "name", None) or "?"
            version = getattr(dist, "version", None)
            label = named[id(dist)] = f"{name} {version}" if version else name
        yield Entry(ep.group, ep.name, ep.value, label)


class Registry:
    """Every plugin group's entries, each loaded (and checked) at most once.

    `own` is the text of storyd's entry_points.txt (None: there is none, and storyd's
    entries come with the scan of the installed distributions); `scan` lists the
    installed distributions' entries. Both are parameters for the tests' sake.
    """

    def __init__(
        self, own: str | None, scan: Callable[[], Iterable[Entry]] = _scan_installed
    ) -> None:
        self._own = parse(own) if own is not None else {}
        self._own_read = own is not None
        self._scan = scan
        self._others: dict[str, list[Entry]] | None = None
        self._loaded: dict[tuple[str, str], object] = {}  # (group, name) -> object, or None
        self._taken: dict[tuple[str, str], Entry] = {}  # (group, object's name) -> its entry
        self.problems: list[str] = []
        self.scans = 0  # how many times the installed distributions were scanned
        self._sinks: list[Callable[[str], None]] = [_to_stderr]  # until a log is given
        # the daemon's threads share it: one loads a plugin while the others wait for it
        # (re-entrant: a plugin's import may ask the registry for another)
        self._lock = _thread.RLock()

    # entries -----------------------------------------------------------------------------

    def entries(self, group: str, *, plugins: bool = True) -> list[Entry]:
        """The group's entries: storyd's own in file order, then other distributions'."""
        own = self._own.get(group, [])
        return own + self._plugin_entries(group) if plugins else list(own)

    def names(self, group: str, *, plugins: bool = True) -> tuple[str, ...]:
        """The group's entry names, nothing loaded (what configuration is checked against)."""
        return tuple(e.name for e in self.entries(group, plugins=plugins))

    def _plugin_entries(self, group: str) -> list[Entry]:
        with self._lock:
            if self._others is None:
                self._others = self._scan_once()
            return self._others.get(group, [])

    def _scan_once(self) -> dict[str, list[Entry]]:
        """Other distributions' entries by group; a name storyd's own (or an earlier
        distribution) has is refused here, before anything is imported."""
        self.scans += 1
        others: dict[str, list[Entry]] = {g: [] for g in GROUPS}
        seen = {(e.group, e.name): e for g in GROUPS for e in self._own.get(g, [])}
        for entry in self._scan():
            if self._own_read and entry.dist and _dist_name(entry.dist) == DISTRIBUTION:
                continue  # storyd's own, already read from its file
            first = seen.get((entry.group, entry.name))
            if first is not None:
                if first.value != entry.value or first.dist != entry.dist:
                    self.refuse(entry, f"the name {entry.name!r} is taken by {first}")
                continue
            seen[(entry.group, entry.name)] = entry
            others[entry.group].append(entry)
        return others

    # loading -----------------------------------------------------------------------------

    def one(self, group: str, name: str, check: Check, *, plugins: bool = True) -> object | None:
        """The plugin named `name`, loaded and checked; None when none is (or it was refused)."""
        for entry in self._own.get(group, []):
            if entry.name == name:
                return self._load(entry, check)
        if plugins:
            for entry in self._plugin_entries(group):
                if entry.name == name:
                    return self._load(entry, check)
        return None

    def load(self, group: str, check: Check, *, plugins: bool = True,
             wanted: Callable[[str], bool] | None = None) -> list[object]:
        """Every plugin of the group that loads and passes `check`, in entry order; with
        `wanted`, only the entries whose name it accepts are loaded at all."""
        found = []
        for entry in self.entries(group, plugins=plugins):
            if wanted is None or wanted(entry.name):
                loaded = self._load(entry, check)
                if loaded is not None:
                    found.append(loaded)
        return found

    def _load(self, entry: Entry, check: Check) -> object | None:
        with self._lock:
            return self._load_locked(entry, check)

    def _load_locked(self, entry: Entry, check: Check) -> object | None:
        key = (entry.group, entry.name)
        if key in self._loaded:
            return self._loaded[key]
        self._loaded[key] = None  # refused unless it passes below
        try:
            loaded = entry.load()
            why = check(loaded, entry)
        except Exception as exc:  # a plugin's import may raise anything: name it, go on
            self.refuse(entry, f"failed to load: {type(exc).__name__}: {exc}")
            return None
        if why is not None:
            self.refuse(entry, why)
            return None
        name = str(getattr(loaded, "name", entry.name))
        taken = self._taken.get((entry.group, name))
        if taken is None and entry.dist is not None:  # storyd's own names are theirs first
            taken = next((e for e in self._own.get(entry.group, []) if e.name == name), None)
        if taken is not None:
            self.refuse(entry, f"the name {name!r} is taken by {taken}")
            return None
        self._taken[(entry.group, name)] = entry
        self._loaded[key] = loaded
        return loaded

    # problems ----------------------------------------------------------------------------

    def refuse(self, entry: Entry, why: str) -> None:
        """Record a skipped plugin, naming it, and tell every sink."""
        problem = f"{entry} skipped: {why}"
        self.problems.append(problem)
        for sink in self._sinks:
            sink(problem)

    def report(self, sink: Callable[[str], None]) -> None:
        """Send every problem so far, and every later one, to `sink` (a log) instead of
        stderr, where a command without a log has them."""
        for problem in self.problems:
            sink(problem)
        self._sinks = [s for s in self._sinks if s is not _to_stderr] + [sink]


def _to_stderr(problem: str) -> None:
    sys.stderr.write(f"storyd: warning: {problem}\n")


def _dist_name(dist: str) -> str:
    return dist.partition(" ")[0].lower().replace("_", "-")


def get() -> Registry:
    """The process's registry: storyd's own entries read now, others scanned on need.
    It is kept in `switches.CONFIG.registry`, the one owner of process-wide state."""
    found = CONFIG.registry
    if found is None:
        try:
            with open(OWN_FILE, encoding="utf-8") as file:
                own: str | None = file.read()
        except OSError:
            own = None  # no file beside the package: storyd's entries come with the scan
        found = CONFIG.registry = Registry(own)
    return found  # type: ignore[return-value]


def reset() -> None:
    """Forget the registry (tests): the next `get()` builds a new one."""
    CONFIG.registry = None
