"""The house's rules, held by tests (docs/design.md, "The house"), on the checkout and on
the wheel `pip install .` builds (what users import):

- one import name: the wheel installs `storyd` and nothing else at the top level;
- imports run downward through the layers: core, then config and detectors, then the
  API layer, then the doors (fleet, agents, server), then the command line; no door
  imports another door but where LINKS says why;
- the command line is a leaf: no module outside storyd.cli imports it (but
  `python -m storyd`), and nothing captures stdout or stderr to reuse a command;
- only `storyd serve` (daemon/cli/commands/serve.py) imports the long-running daemon
  (storyd.server), and nothing under daemon/server/ is imported from outside it;
- no import cycle between storyd's modules at run time (a name used only in type
  annotations, under `if TYPE_CHECKING:`, is not an import at run time; importing from
  a package runs its __init__, so that is an import of the package too);
- no module over 600 lines;
- the thread budget: the threads a daemon starts are the ones docs/design.md counts.

The import rules read the source with `ast` (every import, at module level or inside a
function); each checker is run first on a planted tree, so a checker that can no longer
fail fails here.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKOUT = {"daemon": "storyd", "detectors": "storyd.detectors"}  # folder: import name
WHEEL = {"storyd": "storyd"}
SERVER = "storyd.server"
SERVER_DOOR = "storyd.cli.commands.serve"  # the one module outside daemon/server that may
CLI = "storyd.cli"
ENTRY = "storyd.__main__"  # `python -m storyd` runs the command line
MAX_LINES = 600
# the layers, lowest first: a module imports its own group and lower layers only
LAYERS = {
    "storyd": 0, "storyd.core": 0,
    "storyd.config": 1, "storyd.detectors": 1,
    "storyd.api": 2,
    "storyd.fleet": 3, "storyd.agents": 3, "storyd.server": 3, "storyd.tui": 3,
    "storyd.cli": 4, ENTRY: 4,
}  # fmt: skip
# a door that imports another door, and why
LINKS = {
    (ENTRY, CLI): "`python -m storyd` is the `storyd` command",
    ("storyd.server", "storyd.fleet"): "the daemon publishes to NATS through the fleet's "
    "publisher (server/fleet_sink.py), which the fleet extra owns",
}


def _modules(root: Path, folders: dict[str, str] = CHECKOUT) -> dict[str, Path]:
    found = {}
    for folder, package in folders.items():
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
    """Every module `name` imports (absolute names; `from p import m` is `p`, whose
    __init__ runs first, and `p.m` too when that is one of the `known` modules), lazy
    imports included; those under `if
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
            yield base  # importing from a package runs its __init__ first
            for alias in node.names:
                module = f"{base}.{alias.name}"
                if module in known:
                    yield module


def _graph(modules: dict[str, Path], *, typing_too: bool) -> dict[str, set[str]]:
    return {name: {m for m in _imports(name, path, set(modules), typing_too=typing_too)
                   if m in modules and m != name}
            for name, path in modules.items()}  # fmt: skip


def boundary_breaches(root: Path, folders: dict[str, str] = CHECKOUT) -> list[str]:
    """`importer -> imported` for each import of storyd.server from outside it."""
    breaches = []
    modules = _modules(root, folders)
    for name, path in modules.items():
        if name in (SERVER_DOOR, SERVER) or name.startswith(SERVER + "."):
            continue
        for imported in _imports(name, path, set(modules), typing_too=True):
            if imported == SERVER or imported.startswith(SERVER + "."):
                breaches.append(f"{name} -> {imported}")
    return sorted(set(breaches))


def import_cycles(root: Path, folders: dict[str, str] = CHECKOUT) -> list[list[str]]:
    """The strongly connected groups of two or more modules in the run-time import graph."""
    graph = _graph(_modules(root, folders), typing_too=False)
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


def _group(name: str) -> str:
    """The layer group a module belongs to: the longest LAYERS key it falls under."""
    return max((g for g in LAYERS if name == g or name.startswith(g + ".")), key=len)


def upward_imports(root: Path, folders: dict[str, str] = CHECKOUT) -> list[str]:
    """`importer -> imported` for each import of a higher layer, or of another group of
    the same layer but for LINKS (annotations too: they name what a module depends on)."""
    found = []
    for name, imported in _graph(_modules(root, folders), typing_too=True).items():
        mine = _group(name)
        for other in imported:
            theirs = _group(other)
            if LAYERS[theirs] > LAYERS[mine] or (
                LAYERS[theirs] == LAYERS[mine] and theirs != mine and LAYERS[mine] > 0
                and (mine, theirs) not in LINKS
            ):
                found.append(f"{name} -> {other}")
    return sorted(found)


def command_layer_importers(root: Path, folders: dict[str, str] = CHECKOUT) -> list[str]:
    """`importer -> imported` for each import of the command line from outside it."""
    found = []
    for name, imported in _graph(_modules(root, folders), typing_too=True).items():
        if name in (CLI, ENTRY) or name.startswith(CLI + "."):
            continue
        found += [f"{name} -> {m}" for m in imported if m == CLI or m.startswith(CLI + ".")]
    return sorted(found)


def stdout_captures(root: Path, folders: dict[str, str] = CHECKOUT) -> list[str]:
    """`module: name` for each use of contextlib's redirect_stdout/redirect_stderr."""
    found = []
    for name, path in _modules(root, folders).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            used = (node.id if isinstance(node, ast.Name) else node.attr
                    if isinstance(node, ast.Attribute) else node.name
                    if isinstance(node, ast.alias) else None)  # fmt: skip
            if used in ("redirect_stdout", "redirect_stderr"):
                found.append(f"{name}: {used}")
    return sorted(set(found))


def long_modules(root: Path, folders: dict[str, str] = CHECKOUT) -> list[str]:
    """`module: lines` for each module over MAX_LINES lines."""
    return sorted(f"{name}: {n}" for name, path in _modules(root, folders).items()
                  if (n := len(path.read_text().splitlines())) > MAX_LINES)


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
        "daemon/p/__init__.py": "from storyd.p import q\n",
        "daemon/p/q.py": "from storyd.p import r\n",  # runs p's __init__: a cycle
        "daemon/p/r.py": "",
        "daemon/core/__init__.py": "",
        "daemon/core/low.py": "from storyd.api import x\n",
        "daemon/api/__init__.py": "",
        "daemon/api/x.py": "import contextlib\nwith contextlib.redirect_stdout(None):\n    pass\n",
        "daemon/agents/__init__.py": "",
        "daemon/agents/hook.py": "from storyd.fleet import view\nfrom storyd.cli import main\n",
        "daemon/fleet/__init__.py": "",
        "daemon/fleet/view.py": "from contextlib import redirect_stderr\n" + "x = 1\n" * 600,
        "daemon/cli/__init__.py": "def main():\n    pass\n",
        "daemon/__main__.py": "from storyd.cli import main\n",
        "detectors/__init__.py": "",
    }
    for relpath, text in files.items():
        (tmp_path / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relpath).write_text(text)
    return tmp_path


def test_the_checkers_find_what_is_planted(planted: Path) -> None:
    assert boundary_breaches(planted) == ["storyd.reader -> storyd.server.engine"]
    # c <-> d only through a type annotation: not a cycle at run time
    assert import_cycles(planted) == [["storyd.a", "storyd.b"], ["storyd.p", "storyd.p.q"]]
    assert upward_imports(planted) == [
        "storyd.agents.hook -> storyd.cli",
        "storyd.agents.hook -> storyd.fleet", "storyd.agents.hook -> storyd.fleet.view",
        "storyd.core.low -> storyd.api", "storyd.core.low -> storyd.api.x",
        "storyd.reader -> storyd.server.engine",
    ]
    assert command_layer_importers(planted) == [
        "storyd.agents.hook -> storyd.cli"]
    assert stdout_captures(planted) == [
        "storyd.api.x: redirect_stdout", "storyd.fleet.view: redirect_stderr"]
    assert long_modules(planted) == ["storyd.fleet.view: 601"]


TREES = [
    pytest.param("checkout", id="checkout"),
    pytest.param("wheel", id="wheel", marks=pytest.mark.slow),
]


@pytest.fixture(params=TREES)
def tree(request: pytest.FixtureRequest) -> tuple[Path, dict[str, str]]:
    """The modules as they stand in the checkout, and as the built wheel installs them."""
    if request.param == "checkout":
        return REPO, CHECKOUT
    return request.getfixturevalue("unpacked_wheel"), WHEEL


def test_one_top_level_import_name(unpacked_wheel: Path) -> None:
    """`pip install .` puts `storyd` in site-packages and nothing else beside it."""
    tops = {p.name for p in unpacked_wheel.iterdir()
            if not p.name.endswith((".dist-info", ".data"))}  # fmt: skip
    assert tops == {"storyd"}
    (info,) = unpacked_wheel.glob("storyd-*.dist-info")
    top_level = info / "top_level.txt"
    if top_level.exists():
        assert top_level.read_text().split() == ["storyd"]
    assert (unpacked_wheel / "storyd" / "detectors" / "__init__.py").exists()
    assert (unpacked_wheel / "storyd" / "__main__.py").exists()


def test_the_wheel_holds_every_module(unpacked_wheel: Path) -> None:
    """pyproject's package list misses no folder of the checkout."""
    theirs = set(_modules(unpacked_wheel, WHEEL))
    assert set(_modules(REPO)) - theirs == set()


def test_imports_run_downward(tree: tuple[Path, dict[str, str]]) -> None:
    assert upward_imports(*tree) == []


def test_the_command_line_is_a_leaf(tree: tuple[Path, dict[str, str]]) -> None:
    assert command_layer_importers(*tree) == []
    assert stdout_captures(*tree) == []


def test_only_storyd_serve_imports_the_server(tree: tuple[Path, dict[str, str]]) -> None:
    assert boundary_breaches(*tree) == [], "daemon/server/__init__.py: only `storyd serve` may"


def test_no_import_cycle(tree: tuple[Path, dict[str, str]]) -> None:
    assert import_cycles(*tree) == []


def test_no_module_over_600_lines(tree: tuple[Path, dict[str, str]]) -> None:
    assert long_modules(*tree) == []


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
        assert ours == ["storyd-detectors", "storyd-history", "storyd-notify",
                        "storyd-refresher"], ours
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


def test_the_old_import_names_are_gone() -> None:
    """No script, test, benchmark or doc imports `daemon` or `detectors` any more: run from
    the checkout, such an import would load the folder itself, not what is installed."""
    old = re.compile(r"^\s*[\"']?(from|import) (daemon|detectors)\b", re.M)
    places = [*REPO.glob("tests/**/*.py"), *REPO.glob("bench/**/*.py"), *REPO.glob("docs/*.md"),
              REPO / "README.md", *REPO.glob("bin/*")]
    found = [f"{p.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}"
             for p in places for text in [p.read_text()] for m in old.finditer(text)]
    assert found == []
