"""The one registry (storyd.core.registry): real entry points of real plugin distributions
(a dist-info on PYTHONPATH, as pip installs one), each broken plugin named and skipped,
one scan of the installed distributions, configuration checked by asking the registry,
and every finding code a built-in raises declared where reconcile looks for it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import STORYD

from storyd.core import registry
from storyd.core.formats import all_adapters
from storyd.core.registry import DETECTORS, FORMATS, REPAIRS, Registry

REPO = Path(__file__).resolve().parents[1]
BUILTIN_FORMATS = ["epic", "session", "issue-plan", "autodev", "checkpoint", "spec-kit", "kiro",
                   "task-master", "beads", "openspec", "backlog-md", "execplan", "claude-tasks",
                   "bmad", "gsd"]
CHECKBOX_FORMATS = ("spec-kit", "kiro", "openspec", "execplan", "gsd")  # gsd: files, ticks
BUILTIN_DETECTORS = ["commit-in-history", "staleness", "task-named", "task-order",
                     "unrecorded-commit"]
BUILTIN_REPAIRS = ["unrecorded", "unreachable", "squash-merged", "missing", "state-not-updated",
                   "output-before-state-update", "restored-from-backup", "regressed"]

GOOD = '''
from storyd.core.formats import Adapter
from storyd.core.formats.dialect import Dialect


class NotesDialect(Dialect):
    done = "finished"


class Notes(Adapter):
    name = "notes"
    convention = "notes, notes/state.json"
    codes = ("note-fix",)
    dialect = NotesDialect()  # a plugin format carries its dialect

    def matches(self, relpath):
        return relpath == "notes/state.json"

    def load(self, source, relpath):
        return []


class Todo:
    name = "todo2"
    codes = ("note-fix",)

    def check(self, unit, context):
        return []


class Copycat:  # takes the name of a built-in detector under an entry point of its own
    name = "staleness"

    def check(self, unit, context):
        return []


def fix(ask):
    return "left alone"


FORMAT = Notes()
DETECTOR = Todo()
COPYCAT = Copycat()
'''
WRONG = '''
class Misnamed:  # an Adapter's look, but not one
    name = "wrong"

FORMAT = Misnamed()
DETECTOR = 42
REPAIR = "not callable"
'''


def distribution(root: Path, name: str, entries: dict[str, list[tuple[str, str]]],
                 modules: dict[str, str]) -> None:
    """A plugin distribution as pip installs one: NAME-1.0.dist-info with its entry points."""
    dist = root / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
                                   encoding="utf-8")
    text = "".join(f"[{group}]\n" + "".join(f"{n} = {v}\n" for n, v in pairs) + "\n"
                   for group, pairs in entries.items())
    (dist / "entry_points.txt").write_text(text, encoding="utf-8")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source, encoding="utf-8")


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """Two third-party distributions: one whose plugins work, one whose plugins are broken
    every way the registry knows (import error, wrong type, a taken name)."""
    root = tmp_path / "site"
    distribution(root, "reg-good", {
        FORMATS: [("notes", "reg_good:FORMAT")],
        DETECTORS: [("todo2", "reg_good:DETECTOR")],
        REPAIRS: [("note-fix", "reg_good:fix")],
    }, {"reg_good": GOOD})
    distribution(root, "reg-bad", {
        FORMATS: [("wrong", "reg_wrong:FORMAT"), ("gone", "reg_fails:FORMAT"),
                  ("epic", "reg_good:FORMAT")],
        DETECTORS: [("wrong", "reg_wrong:DETECTOR"), ("copycat", "reg_good:COPYCAT")],
        REPAIRS: [("wrong", "reg_wrong:REPAIR")],
    }, {"reg_wrong": WRONG, "reg_fails": "raise ImportError('broken on purpose')\n"})
    return root


def run_python(code: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


LOAD_ALL = """
import json
from storyd import detectors
from storyd.api.reconcile.repairs import registered
from storyd.api.reconcile.targets import dialect_of
from storyd.core import registry
from storyd.core.formats import adapter_for, all_adapters

formats = [a.name for a in all_adapters()]
for _ in range(3):  # asked again and again: still one scan
    all_adapters()
    detectors.load()
    registered()
print(json.dumps({
    "formats": formats,
    "notes": adapter_for("notes/state.json").name,
    "done word": dialect_of("notes").done,
    "detectors": [d.name for d in detectors.load()],
    "repairs": list(registered()),
    "problems": registry.get().problems,
    "scans": registry.get().scans,
}))
"""


def test_broken_plugins_are_named_and_skipped_and_the_rest_load(plugins: Path) -> None:
    done = run_python(LOAD_ALL, plugins)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    got = json.loads(done.stdout)
    assert got["formats"] == [*BUILTIN_FORMATS, "notes"]
    assert got["notes"] == "notes"
    assert got["done word"] == "finished"
    assert got["detectors"] == sorted([*BUILTIN_DETECTORS, "todo2"])
    assert got["repairs"] == [*BUILTIN_REPAIRS, "note-fix"]
    assert got["scans"] == 1
    problems = "\n".join(got["problems"])
    for named, why in [
        ("format plugin wrong (reg_wrong:FORMAT, from reg-bad 1.0)",
         "not a named storyd.core.formats.Adapter"),
        ("format plugin gone (reg_fails:FORMAT, from reg-bad 1.0)",
         "failed to load: ImportError: broken on purpose"),
        ("format plugin epic (reg_good:FORMAT, from reg-bad 1.0)",
         "the name 'epic' is taken by format plugin epic (storyd.core.formats.epic:ADAPTER)"),
        ("detector plugin wrong (reg_wrong:DETECTOR, from reg-bad 1.0)",
         "it has no `name` string"),
        ("detector plugin copycat (reg_good:COPYCAT, from reg-bad 1.0)",
         "the name 'staleness' is taken by detector plugin staleness"),
        ("repair plugin wrong (reg_wrong:REPAIR, from reg-bad 1.0)",
         "not a callable repair(ask)"),
    ]:
        assert f"{named} skipped: {why}" in problems, problems
    assert len(got["problems"]) == 6, problems
    # a command without a log says so on stderr, each problem once
    assert done.stderr.count("storyd: warning: ") == 6, done.stderr


def test_a_declared_code_makes_a_plugin_repair_known_to_the_configuration(
        plugins: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[reconcile]\nauto = ["note-fix"]\n[hooks]\nblock_stop_on = ["note-fix"]\n',
                      encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(plugins))
    with_plugin = subprocess.run([STORYD, "config", "check", "--config", str(config)], env=env,
                                 capture_output=True, text=True, timeout=60, check=False)
    assert with_plugin.returncode == 0, with_plugin.stdout + with_plugin.stderr
    assert with_plugin.stdout.startswith(f"ok: {config}")
    alone = subprocess.run([STORYD, "config", "check", "--config", str(config)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert alone.returncode == 78
    known = ", ".join(BUILTIN_REPAIRS)
    assert alone.stdout.splitlines() == [
        f"{config}:2: reconcile.auto: unknown repair code 'note-fix' (known: {known})",
        f"{config}:4: hooks.block_stop_on: unknown code 'note-fix' (known: {known})",
    ]


def test_the_registry_scans_the_installed_distributions_once() -> None:
    scans: list[int] = []

    def scan() -> list[registry.Entry]:
        scans.append(1)
        return [registry.Entry(FORMATS, "elsewhere", "nowhere:X", "other 1.0")]

    with open(registry.OWN_FILE, encoding="utf-8") as file:
        found = Registry(file.read(), scan)
    assert found.names(FORMATS, plugins=False) == tuple(BUILTIN_FORMATS)
    assert scans == []  # storyd's own answer needs no scan
    for _ in range(5):
        assert found.names(FORMATS)[-1] == "elsewhere"
        assert found.names(REPAIRS) == tuple(BUILTIN_REPAIRS)
        assert found.one(FORMATS, "elsewhere", lambda obj, entry: None) is None
    assert scans == [1] and found.scans == 1
    assert found.problems == [
        "format plugin elsewhere (nowhere:X, from other 1.0) skipped: failed to load: "
        "ModuleNotFoundError: No module named 'nowhere'"
    ]  # and it is not tried again


def test_storyds_own_entries_are_the_installed_distributions() -> None:
    """The file the registry reads is what pip installed as storyd's entry points."""
    from importlib.metadata import distribution as installed

    with open(registry.OWN_FILE, encoding="utf-8") as file:
        own = registry.parse(file.read())
    listed = {(g, e.name, e.value) for g, entries in own.items() for e in entries}
    metadata = {(ep.group, ep.name, ep.value) for ep in installed("storyd").entry_points}
    assert listed == metadata, "reinstall storyd: its metadata is older than entry_points.txt"
    assert set(own) == set(registry.GROUPS)


def test_the_resume_path_reads_its_format_without_importlib_metadata(tmp_path: Path) -> None:
    state = tmp_path / "plans/epic-0001/execution-state.json"
    state.parent.mkdir(parents=True)
    state.write_text('{"stories": {"story-0001-0001": {"tasks": {"T-1": {"status": "DONE"}}}}}',
                     encoding="utf-8")
    plan = tmp_path / ".claude/plans/issue-7-x/execution-state.json"
    plan.parent.mkdir(parents=True)
    plan.write_text('{"tasks": [{"id": "1", "status": "pending"}]}', encoding="utf-8")
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "none"),
               STORYD_SOCKET=str(tmp_path / "nobody.sock"))
    # the seed's query reads the epic module directly; --state-file asks the registry
    for args, asks_registry in ((["--story-id", "story-0001-0001", "--epic-id", "0001"], False),
                           (["--state-file", str(plan)], True)):
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "storyd",
                               "resume", "--direct", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
                 if line.startswith("import time:")}
        assert ("storyd.core.registry" in names) is asks_registry, args
        assert "importlib.metadata" not in names, args


CONFIG_ALONE = """
import sys
from storyd import config
cfg = config.load(sys.argv[1])
assert cfg.fleet is not None and cfg.reconcile_auto == ["unrecorded"], cfg
print(sorted(m for m in sys.modules if m.startswith(("storyd.api", "storyd.fleet"))))
"""


def test_the_configuration_imports_no_feature_package(tmp_path: Path) -> None:
    """Checking every table (the fleet's, repair codes) asks the registry, not reconcile or
    the fleet package: storyd.config sits below them."""
    config = tmp_path / "config.toml"
    config.write_text('[reconcile]\nauto = ["unrecorded"]\n[hooks]\nblock_stop_on = ["missing"]\n'
                      '[fleet]\nurl = "nats://localhost:4222"\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", CONFIG_ALONE, str(config)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    # and the fleet's configuration is the configuration's, not a copy
    done = run_python("import storyd.fleet.config as f, storyd.config.fleet as c; "
                      "print(f.Fleet is c.Fleet and f.check is c.check)")
    assert done.stdout.strip() == "True", done.stderr


def _raised(path: Path) -> set[str]:
    """The codes a module's findings carry: the literal code argument of `finding(...)` and
    `Finding(...)`, and literals assigned to a name `code`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            at = {"finding": 0, "Finding": 1}.get(node.func.id)
            if at is not None and len(node.args) > at and isinstance(node.args[at], ast.Constant):
                found.add(node.args[at].value)
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "code" for t in node.targets)):
            found.add(node.value.value)
    return found


SHARED = {  # codes raised by shared helpers, and who calls them
    "unknown-status": REPO / "daemon/core/formats/base.py",  # make_task: every format
    "stray-tmp": REPO / "daemon/core/formats/common.py",  # checkpoint, session
    "git-error": REPO / "detectors/common.py",  # history, unrecorded
    "no-tip": REPO / "detectors/common.py",  # history
    "repository-corrupt": REPO / "detectors/common.py",  # history (no_tip)
}


@pytest.mark.parametrize("name", BUILTIN_FORMATS)
def test_a_format_declares_every_code_it_raises(name: str) -> None:
    from storyd.core.formats import builtin

    adapter = builtin(name)
    module = sys.modules[type(adapter).__module__]
    assert module.__file__ is not None
    raised = _raised(Path(module.__file__))
    assert raised, "the premise: the module's codes were found"
    assert raised <= set(adapter.codes), raised - set(adapter.codes)
    if name not in CHECKBOX_FORMATS:  # a checkbox's mark is its status: none is unknown
        assert "unknown-status" in adapter.codes  # every other format uses make_task
    assert set(adapter.codes) - raised <= set(SHARED)


@pytest.mark.parametrize("name", BUILTIN_DETECTORS)
def test_a_detector_declares_every_code_it_raises(name: str) -> None:
    from storyd import detectors

    (detector,) = [d for d in detectors.load() if d.name == name]
    module = sys.modules[type(detector).__module__]
    assert module.__file__ is not None
    raised = _raised(Path(module.__file__))
    codes = set(getattr(detector, "codes", ()))
    assert raised and raised <= codes, raised - codes
    assert codes - raised <= set(SHARED)


def test_every_repair_code_is_declared_by_a_source() -> None:
    """A repair no detector or format declares would never run."""
    from storyd.api.reconcile.repairs import sources

    declared = sources()
    for code in BUILTIN_REPAIRS:
        assert [s for s, codes in declared.items() if code in codes], code


def test_dialects_are_capabilities_of_the_formats() -> None:
    writes = {a.name: a.dialect for a in all_adapters(plugins=False)}
    assert writes["autodev"] is None  # Markdown: storyd never writes it
    assert {n for n, d in writes.items() if d is not None and d.keeps_bak} == {"session"}
    assert {n for n, d in writes.items() if d is not None and d.stories} == {"epic"}


def test_doctor_names_each_skipped_plugin_once(plugins: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(plugins), XDG_CONFIG_HOME=str(tmp_path / "none"),
               STORYD_SOCKET=str(tmp_path / "nobody.sock"))
    done = subprocess.run([STORYD, "doctor"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert "Traceback" not in done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "reg_fails" in line]
    assert lines == ["fail plugins: format plugin gone (reg_fails:FORMAT, from reg-bad 1.0) "
                     "skipped: failed to load: ImportError: broken on purpose"], done.stdout


def test_threads_asking_for_a_plugin_being_loaded_wait_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's threads share the registry: one asking while another imports the plugin
    gets the plugin, never "no such plugin"."""
    import threading
    import types

    probe = types.ModuleType("reg_probe")
    probe.started = threading.Event()  # type: ignore[attr-defined]
    probe.release = threading.Event()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "reg_probe", probe)
    (tmp_path / "reg_slow.py").write_text(
        "import reg_probe\nreg_probe.started.set()\nreg_probe.release.wait(10)\nX = 'loaded'\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "reg_slow", raising=False)
    found = Registry("[storyd.repairs]\nslow = reg_slow:X\n", scan=list)
    got: dict[str, object] = {}

    def ask(who: str) -> None:
        got[who] = found.one(REPAIRS, "slow", lambda obj, entry: None)

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    assert probe.started.wait(10), "the plugin's import did not start"  # type: ignore[attr-defined]
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    second.join(0.3)
    assert second.is_alive(), f"the second thread did not wait: it got {got.get('second')!r}"
    probe.release.set()  # type: ignore[attr-defined]
    first.join(10)
    second.join(10)
    assert got == {"first": "loaded", "second": "loaded"}
    assert found.problems == []


SCAN_BOTH = """
import json, sys
from storyd.core import registry
files = sorted(map(repr, registry._scan_installed()))
imported = "importlib.metadata" in sys.modules
metadata = sorted(map(repr, registry._scan_metadata()))
print(json.dumps({"files": files, "metadata": metadata, "imported": imported}))
"""


def _scanned(pythonpath: str) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run([sys.executable, "-c", SCAN_BOTH], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_file_scan_finds_what_importlib_metadata_finds(plugins: Path, tmp_path: Path) -> None:
    """storyd.core.dists reads the dist-info files: the same entries as importlib.metadata,
    a later folder's distribution of the same name hidden (even spelled otherwise), an
    egg-info read too, and a distribution installed or removed seen by the next process."""
    later = tmp_path / "later"
    distribution(later, "Reg.Good", {FORMATS: [("shadowed", "reg_good:FORMAT")]}, {})
    egg = later / "reg_egg-2.0.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: reg-egg\nVersion: 2.0\n\nbody\n")
    (egg / "entry_points.txt").write_text(f"[{DETECTORS}]\neggy = reg_egg:D\n# a comment\n")
    got = _scanned(f"{plugins}{os.pathsep}{later}")
    assert got["files"] == got["metadata"]
    assert got["imported"] is False
    files = "\n".join(got["files"])  # type: ignore[arg-type]
    assert "'notes', 'reg_good:FORMAT', 'reg-good 1.0'" in files
    assert "'eggy', 'reg_egg:D', 'reg-egg 2.0'" in files
    assert "shadowed" not in files
    # removed: the next process no longer sees it; installed again: it does
    moved = tmp_path / "aside"
    (plugins / "reg_good-1.0.dist-info").rename(moved)
    got = _scanned(f"{plugins}{os.pathsep}{later}")
    assert got["files"] == got["metadata"]
    assert "shadowed" in "\n".join(got["files"])  # type: ignore[arg-type]
    assert "'notes'" not in "\n".join(got["files"])  # type: ignore[arg-type]
    moved.rename(plugins / "reg_good-1.0.dist-info")
    assert "'notes'" in "\n".join(_scanned(str(plugins))["files"])  # type: ignore[arg-type]


def test_a_zip_on_the_path_is_left_to_importlib_metadata(plugins: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What the file scan cannot see inside (a zip archive, an egg) is not guessed at."""
    from storyd.core import dists

    archive = tmp_path / "plugins.zip"
    archive.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip archive
    monkeypatch.setattr(sys, "path", [str(plugins), str(archive)])
    assert dists.scan(registry.GROUPS) is None
    monkeypatch.setattr(sys, "path", [str(plugins), str(tmp_path / "x.egg")])
    assert dists.scan(registry.GROUPS) is None
    monkeypatch.setattr(sys, "path", [str(plugins), str(tmp_path / "missing")])
    found = dists.scan(registry.GROUPS)
    assert found is not None
    assert (FORMATS, "notes", "reg_good:FORMAT", "reg-good 1.0") in found


PATHS_PLUGIN = {
    "reg_notes": '''
from storyd.core.formats import Adapter


class Notes(Adapter):
    name = "notes"
    roots = ("notes",)

    def matches(self, relpath):
        return relpath == "notes/state.json"

    def load(self, source, relpath):
        return []


FORMAT = Notes()
''',
    "reg_memo": '''
from storyd.core.formats import Adapter


class Memo(Adapter):
    name = "memo"
    roots = ("memo",)

    def matches(self, relpath):
        return relpath == "memo/state.json"

    def load(self, source, relpath):
        return []


FORMAT = Memo()
''',
    "reg_tables": '''
NOTES = {"roots": ("notes",), "files": ("notes/state.json",)}
MEMO = {"roots": ("memo",), "files": ("memo/*.json",)}  # refused: `*` is a whole name
''',
}
ASK_PATHS = """
import json, sys
from storyd.core import registry
from storyd.core.formats import adapter_for, claiming

asked = {}
for path in ("src/main.py", "memo/state.json", "notes/state.json"):
    before = {"reg_notes", "reg_memo"} & set(sys.modules)
    asked[path] = [[a.name for a in claiming(path)], sorted({"reg_notes", "reg_memo"}
                   & set(sys.modules) - before)]
print(json.dumps({"asked": asked, "for": adapter_for("notes/state.json").name,
                  "problems": registry.get().problems}))
"""


def test_a_plugin_format_that_declares_its_paths_loads_only_for_them(tmp_path: Path) -> None:
    """A format plugin's paths (group storyd.format_paths) keep it unloaded until a path
    fits them; one whose table is refused is named, and loads for any path, as a format
    that declares nothing."""
    root = tmp_path / "site"
    distribution(root, "reg-paths", {
        FORMATS: [("notes", "reg_notes:FORMAT"), ("memo", "reg_memo:FORMAT")],
        registry.FORMAT_PATHS: [("notes", "reg_tables:NOTES"), ("memo", "reg_tables:MEMO")],
    }, PATHS_PLUGIN)  # fmt: skip
    done = run_python(ASK_PATHS, root)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["asked"] == {
        "src/main.py": [["memo"], ["reg_memo"]],  # undeclared (refused): loaded at once
        "memo/state.json": [["memo"], []],
        "notes/state.json": [["notes", "memo"], ["reg_notes"]],  # loaded when it fits
    }
    assert got["for"] == "notes"
    assert got["problems"] == [
        "format paths plugin memo (reg_tables:MEMO, from reg-paths 1.0) skipped: files: "
        "'memo/*.json': `*` stands for a whole name, `**` only last"
    ]
