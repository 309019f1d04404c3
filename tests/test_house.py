"""The house's rules, held by tests (docs/design.md, "The house"):

- only `storyd serve` (daemon/cli/commands/serve.py) imports the long-running daemon
  (storyd.server), and nothing under daemon/server/ is imported from outside it;
- no import cycle between storyd's modules at run time (a name used only in type
  annotations, under `if TYPE_CHECKING:`, is not an import at run time);
- the thread budget: the threads a daemon starts are the ones docs/design.md counts.

The first two read the source with `ast` (every import, at module level or inside a
function); each checker is run first on a planted tree, so a checker that can no longer
fail fails here.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {"daemon": "storyd", "detectors": "storyd.detectors"}  # folder: import name
SERVER = "storyd.server"
SERVER_DOOR = "storyd.cli.commands.serve"  # the one module outside daemon/server that may


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            name = ".".join((package, *path.relative_to(root / folder).with_suffix("").parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, known: set[str], *, typing_too: bool) -> Iterator[str]:
    """Every module `name` imports (absolute names; `from p import m` is `p.m` when that
    is one of the `known` modules, else `p`), lazy imports included; those under `if
    TYPE_CHECKING:` only with `typing_too`."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped: set[int] = set()
    if not typing_too:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking_only(node):
                skipped.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                module = f"{base}.{alias.name}"
                yield module if module in known else base


def boundary_breaches(root: Path) -> list[str]:
    """`importer -> imported` for each import of storyd.server from outside it."""
    breaches = []
    modules = _modules(root)
    for name, path in modules.items():
        if name in (SERVER_DOOR, SERVER) or name.startswith(SERVER + "."):
            continue
        for imported in _imports(name, path, set(modules), typing_too=True):
            if imported == SERVER or imported.startswith(SERVER + "."):
                breaches.append(f"{name} -> {imported}")
    return sorted(set(breaches))


def import_cycles(root: Path) -> list[list[str]]:
    """The strongly connected groups of two or more modules in the run-time import graph."""
    modules = _modules(root)
    graph = {
        name: {m for m in _imports(name, path, set(modules), typing_too=False)
               if m in modules and m != name}
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A tree that breaks both rules: a cycle, and an import of the server from outside."""
    files = {
        "daemon/__init__.py": "",
        "daemon/a.py": "from storyd import b\n",
        "daemon/b.py": "def f():\n    from storyd.a import g\n",
        "daemon/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from storyd.d import T\n",
        "daemon/d.py": "from storyd.c import U\n",
        "daemon/server/__init__.py": "",
        "daemon/server/engine.py": "from storyd import a\n",
        "daemon/cli/commands/serve.py": "from storyd.server import engine\n",
        "daemon/reader.py": "def f():\n    from storyd.server.engine import Engine\n",
        "detectors/__init__.py": "",
    }
    for relpath, text in files.items():
        (tmp_path / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relpath).write_text(text)
    return tmp_path


def test_the_checkers_find_what_is_planted(planted: Path) -> None:
    assert boundary_breaches(planted) == ["storyd.reader -> storyd.server.engine"]
    # c <-> d only through a type annotation: not a cycle at run time
    assert import_cycles(planted) == [["storyd.a", "storyd.b"]]


def test_only_storyd_serve_imports_the_server() -> None:
    assert boundary_breaches(REPO) == [], "daemon/server/__init__.py: only `storyd serve` may"


def test_no_import_cycle() -> None:
    assert import_cycles(REPO) == []


# -- the thread budget (docs/design.md, "Threads") ----------------------------------------

STATE = "plans/epic-0049/execution-state.json"


def _workspace(root: Path) -> Path:
    (root / STATE).parent.mkdir(parents=True)
    tasks = {"TASK-1": {"status": "pending"}}
    (root / STATE).write_text(json.dumps({"epic": "0049", "stories": {
        "story-0049-0001": {"tasks": tasks}}}))  # fmt: skip
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _wait(predicate: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.02)


def test_the_thread_budget(tmp_path: Path) -> None:
    """storyd's own threads are named storyd-*, one of each; watchdog adds its observer,
    one inotify reader, and one emitter per scheduled watch."""
    from storyd.api.detection import build_detect, tips_held_by
    from storyd.config.values import Config
    from storyd.server.assembly import assemble
    from storyd.server.service import Settings

    ws = str(_workspace(tmp_path / "ws"))
    before = set(threading.enumerate())
    detect, runner = build_detect(Config(), "mtime")
    parts = assemble(Settings(staleness="mtime", verify_interval=3600.0), Config(), detect,
                     tips_held_by(runner), "")  # fmt: skip
    daemon = parts.daemon
    try:
        daemon.start([ws])
        _wait(lambda: daemon.warm.done, "the warm-up")
        started = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        ours = sorted(t.name for t in started if t.name.startswith("storyd-"))
        assert ours == ["storyd-detectors", "storyd-notify", "storyd-refresher"], ours
        watches = len(daemon.watcher._watches[os.path.realpath(ws)])
        assert watches == 4, "top, the plans/ root, the git dir and its refs"
        kinds = sorted(type(t).__name__ for t in started if not t.name.startswith("storyd-"))
        assert kinds == ["InotifyEmitter"] * watches + ["InotifyFD", "InotifyObserver"], kinds
    finally:
        daemon.stop()
        parts.close_optional_parts()
        runner.close()
    _wait(lambda: not [t for t in threading.enumerate() if t not in before and t.is_alive()
                       and t.name.startswith("storyd-")], "storyd's threads to end")
