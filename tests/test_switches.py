"""Process-wide state has one owner, storyd.core.switches: `configure()` throws a switch,
`reset()` brings back a fresh process's state, and no other module keeps mutable state
at module level (an `ast` scan of the package, first run on a planted tree so that it
cannot silently stop failing)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from storyd.core import jsonio, pipeline, registry, storytime, switches
from storyd.core.switches import CONFIG

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = (ROOT / "daemon", ROOT / "detectors")

# (module file, name): why this module-level state may stay where it is
ALLOWED = {
    ("daemon/core/switches.py", "CONFIG"): "the one owner of process-wide state",
}
# methods that change a list, dict, set, deque or thread-local in place
MUTATORS = frozenset((
    "add", "append", "appendleft", "clear", "difference_update", "discard", "extend",
    "extendleft", "insert", "intersection_update", "pop", "popitem", "remove", "reverse",
    "setdefault", "sort", "symmetric_difference_update", "update",
))  # fmt: skip


def _root(node: ast.expr) -> str | None:
    """The name a chain of attributes and subscripts starts from (`a` of `a.b[c].d`)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _module_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level by assignment (not imports or defs)."""
    names: set[str] = set()
    for stmt in tree.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
            targets = [stmt.target]
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _local_names(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """A function's own names (arguments and assigned names), minus its `global`s."""
    args = func.args
    found = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    found.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    declared: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.Global):
            declared.update(node.names)
    return found - declared


def _changes_self(cls: ast.ClassDef) -> bool:
    """Whether a method other than `__init__` changes the object (`self.x = ...`,
    `self.x[k] = ...`, `self.x.append(...)`): its objects then hold run-time state."""
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef) or method.name in ("__init__", "__new__"):
            continue
        for node in ast.walk(method):
            for target, _line in _mutations(node):
                if _root(target) == "self":
                    return True
    return False


def _mutations(node: ast.AST) -> Iterator[tuple[ast.expr, int]]:
    """The roots of what a statement or call changes in place, with their line."""
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript):
                yield target, node.lineno
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in MUTATORS
    ):
        yield node.func.value, node.lineno


def module_state(source: str) -> list[tuple[str, int, str]]:
    """(name, line, how) for each module-level name a module changes at run time: a
    `global` rebinding, or an in-place change (item or attribute assignment, `del`, a
    mutating method) of a name bound at its top level."""
    tree = ast.parse(source)
    names = _module_names(tree)
    found: list[tuple[str, int, str]] = []
    classes = {
        stmt.name for stmt in tree.body if isinstance(stmt, ast.ClassDef) and _changes_self(stmt)
    }
    for stmt in tree.body:  # an object of a class of the module whose methods change it
        if (
            isinstance(stmt, ast.Assign | ast.AnnAssign)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id in classes
        ):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            found.extend(
                (t.id, stmt.lineno, "an object of this module's class")
                for t in targets
                if isinstance(t, ast.Name)
            )

    def visit(node: ast.AST, shadowed: frozenset[str] | None) -> None:
        # shadowed is None at import time: building a table there is no run-time state
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            shadowed = (shadowed or frozenset()) | _local_names(node)
        if shadowed is not None:
            if isinstance(node, ast.Global):
                found.extend((name, node.lineno, "global") for name in node.names)
            for target, line in _mutations(node):
                name = _root(target)
                if name in names and name not in shadowed:
                    found.append((name, line, "changed in place"))
        for child in ast.iter_child_nodes(node):
            visit(child, shadowed)

    visit(tree, None)
    return found


def package_state() -> dict[tuple[str, str], list[int]]:
    """Every module-level state of the package's modules: (file, name) -> lines."""
    found: dict[tuple[str, str], list[int]] = {}
    for top in PACKAGE:
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for name, line, _how in module_state(path.read_text()):
                found.setdefault((rel, name), []).append(line)
    return found


class TestTheScan:
    """The scan finds module-level state, and only that."""

    @pytest.mark.parametrize(
        "source",
        [
            "_seen = set()\ndef f(x):\n    _seen.add(x)\n",
            "_memo = {}\ndef f(k):\n    _memo[k] = 1\n",
            "_memo: dict[str, int] = {}\ndef f(k):\n    del _memo[k]\n",
            "_steps = [0]\ndef f():\n    _steps[0] += 1\n",
            "_on = False\ndef f():\n    global _on\n    _on = True\n",
            "from threading import local\n_pins = local()\n"
            "def f():\n    _pins.__dict__.setdefault('s', {})\n",
            "class C:\n    pass\n_c = C()\ndef f():\n    _c.count = 1\n",
            "class Log:\n    def attach(self, w):\n        self.w.append(w)\n_LOG = Log()\n",
            "_order = []\ndef f():\n    _order.sort()\n",
        ],
        ids=["set-add", "item", "del", "augmented-item", "global", "thread-local",
             "attribute", "own-class-object", "sort"],
    )  # fmt: skip
    def test_it_finds_state(self, source: str) -> None:
        assert module_state(source), source

    @pytest.mark.parametrize(
        "source",
        [
            "TABLE = {'a': 1}\ndef f(k):\n    return TABLE[k]\n",
            "_memo = {}\ndef f(_memo):\n    _memo[1] = 2\n",
            "_memo = {}\ndef f():\n    _memo = {}\n    _memo[1] = 2\n",
            "import os\ndef f():\n    os.environ['X'] = '1'\n",
            "class C:\n    def f(self):\n        self.items.append(1)\n",
            "LOCK = object()\ndef f():\n    with LOCK:\n        pass\n",
            "_ESC = {1: 'a'}\n_ESC.update({2: 'b'})\n",
            "class A:\n    def __init__(self):\n        self.n = 1\n"
            "    def read(self):\n        return self.n\nADAPTER = A()\n",
        ],
        ids=["read-only", "argument", "local", "imported-module", "self", "with", "import-time",
             "stateless-object"],
    )
    def test_it_leaves_alone_what_is_no_module_state(self, source: str) -> None:
        assert module_state(source) == [], source

    def test_it_finds_the_owner_itself(self) -> None:
        """The one allowed owner is found: the scan sees what it is meant to see."""
        assert ("daemon/core/switches.py", "CONFIG") in package_state()


def test_no_module_keeps_mutable_state_but_the_allowed() -> None:
    """A new module-level cache, flag or counter belongs in storyd.core.switches (with a
    reset) or, if it truly must stay, in ALLOWED with the reason."""
    found = package_state()
    unexpected = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert unexpected == {}, (
        "module-level mutable state outside storyd.core.switches: "
        + "; ".join(f"{f}:{lines[0]} {name}" for (f, name), lines in sorted(unexpected.items()))
    )


def test_every_allowed_exception_still_exists() -> None:
    """An allow-list entry whose state is gone is removed, not left to excuse a new one."""
    found = package_state()
    stale = sorted(key for key in ALLOWED if key not in found)
    assert stale == []


@pytest.fixture
def fresh() -> Iterator[None]:
    """Each test here starts and ends with a fresh process's state."""
    switches.reset()
    yield
    switches.reset()


@pytest.mark.usefixtures("fresh")
class TestConfigureAndReset:
    """`configure` throws switches; `reset` restores every field."""

    def test_reset_restores_every_field(self, tmp_path: Path) -> None:
        pristine = switches._Config()
        switches.configure(fast_parse=lambda data: jsonio.UNSURE, git_batching=True,
                           fast_dump=lambda value: b"null", max_state_bytes=65536)
        CONFIG.git_memo[("k",)] = 1
        CONFIG.git_primed["/ws"] = ((), 0.0, {}, frozenset())
        storytime.pin(str(tmp_path))  # the pin goes into this thread's git_pins
        CONFIG.fine_devices.add(1)
        CONFIG.warned_versions.add("9.9")
        CONFIG.disk_steps = 3
        CONFIG.bd_memo["/ws"] = ((), 0.0, None)
        CONFIG.claims_conns.conn = ("/claims", 1, None)  # this thread's kept connection
        CONFIG.fleet_claims = object()  # the claims bucket's process state
        registry.get()
        changed = [name for name in switches._Config.__slots__
                   if _state(getattr(CONFIG, name)) != _state(getattr(pristine, name))]
        assert sorted(changed) == sorted(switches._Config.__slots__), "a field was not set"
        switches.reset()
        left = [name for name in switches._Config.__slots__
                if _state(getattr(CONFIG, name)) != _state(getattr(pristine, name))]
        assert left == []

    def test_reset_keeps_the_one_object(self) -> None:
        """Modules bind CONFIG itself: a reset changes its fields, not the object."""
        before = switches.CONFIG
        switches.reset()
        assert switches.CONFIG is before is jsonio.CONFIG is pipeline.CONFIG

    def test_the_fast_parser_is_asked_first_until_reset(self) -> None:
        asked: list[bytes] = []

        def fast(data: bytes) -> object:
            asked.append(data)
            return {"fast": True}

        switches.configure(fast_parse=fast)
        assert jsonio.loads(b'{"lean": true}') == {"fast": True}
        switches.reset()
        assert jsonio.loads(b'{"lean": true}') == {"lean": True}
        assert asked == [b'{"lean": true}']

    def test_an_unsure_fast_parser_falls_back_to_the_lean_path(self) -> None:
        switches.configure(fast_parse=lambda data: jsonio.UNSURE)
        assert jsonio.loads(b"[1]") == [1]

    def test_configure_leaves_the_other_switches(self) -> None:
        switches.configure(git_batching=True)
        switches.configure(fast_parse=None)
        assert CONFIG.git_batching is True

    def test_a_fast_parser_must_be_callable(self) -> None:
        with pytest.raises(TypeError, match="fast_parse"):
            switches.configure(fast_parse="orjson")
        assert CONFIG.fast_parse is None

    def test_the_sockets_renderer_is_orjson_once_installed_until_reset(self) -> None:
        """server/protocol.py renders with the fast_dump switch, jsonio's before it."""
        from storyd.server import protocol

        assert protocol.findings_json([]) == b"[]"
        switches.configure(fast_dump=lambda value: b"[0]")
        assert protocol.findings_json([]) == b"[0]"
        switches.reset()
        assert protocol.findings_json([]) == b"[]"
        with pytest.raises(TypeError, match="fast_dump"):
            switches.configure(fast_dump=b"orjson")
        assert CONFIG.fast_dump is None


def _state(value: object) -> object:
    """A field's state, comparable: a thread-local's is this thread's attributes."""
    if type(value).__name__ == "_local":
        return dict(value.__dict__)
    return value
