"""Where each format's files live, declared apart from its module (storyd.core.formats.
declared, group `storyd.format_paths`): each built-in's table held to its adapter, the
patterns' rules, and a workspace's state files found from the tables as each format's
`find` finds them, a file unchanged since the last look without its format's import."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from agents_harness import demo_workspace

from storyd.core import registry
from storyd.core.formats import all_adapters, state_files
from storyd.core.formats.declared import check, declared, fits
from storyd.core.pipeline import find_state_files
from storyd.core.registry import Entry

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# names a path is made of: every literal segment of a built-in pattern, and lookalikes
NAMES = sorted({
    part for a in all_adapters(plugins=False) for key in ("files", "companions")
    for pattern in (declared(a.name) or {}).get(key, ()) for part in pattern.split("/")
    if "*" not in part
} | {"epic-0049", "epic-7-slug", "epic-", "issue-42", "issue-x", "001-feature", ".hidden",
     "_template", "notes", "x.md", "story-1.md", "phase.json.tmp", "README.md", "stories",
     "", ".", "..", " "})


PATTERNS = sorted({p for a in all_adapters(plugins=False) for key in ("files", "companions")
                   for p in (declared(a.name) or {}).get(key, ())})  # fmt: skip
# each built-in format's module (helpers such as common.py aside)
FORMAT_MODULES = {e.value.partition(":")[0]: e.name
                  for e in registry.get().entries(registry.FORMATS, plugins=False)}


def _paths(count: int, seed: int) -> list[str]:
    """`count` workspace-relative paths: 1 to 5 names drawn from NAMES, and as many made
    from the built-in patterns (each `*` a drawn name, `**` one to three)."""
    draw = random.Random(seed)

    def name(part: str) -> str:
        if part == "**":
            return "/".join(draw.choice(NAMES) for _ in range(draw.randint(1, 3)))
        return draw.choice(NAMES) if part == "*" else part

    drawn = ["/".join(draw.choice(NAMES) for _ in range(draw.randint(1, 5)))
             for _ in range(count)]  # fmt: skip
    made = ["/".join(map(name, draw.choice(PATTERNS).split("/"))) for _ in range(count)]
    return drawn + made


class TestTheBuiltinTables:
    """Each built-in format's table says what its adapter does."""

    @pytest.mark.parametrize("adapter", all_adapters(plugins=False), ids=lambda a: a.name)
    def test_roots_are_the_adapters(self, adapter: object) -> None:
        paths = declared(adapter.name)  # type: ignore[attr-defined]
        assert paths is not None and paths["roots"] == adapter.roots  # type: ignore[attr-defined]

    @pytest.mark.parametrize("adapter", all_adapters(plugins=False), ids=lambda a: a.name)
    def test_every_path_it_claims_fits_a_pattern(self, adapter: object) -> None:
        """matches() true: the path fits `files`; owner() not None: `files` or
        `companions` (40,000 drawn paths and 20,000 made from the patterns, and every
        file of the fixtures)."""
        paths = declared(adapter.name)  # type: ignore[attr-defined]
        assert paths is not None
        every = (*paths["files"], *paths["companions"])
        fixtures = [str(p.relative_to(d)) for d in FIXTURES.glob("*/*") if d.is_dir()
                    for p in d.rglob("*") if p.is_file()]
        claimed = 0
        for relpath in [*_paths(20_000, 31), *fixtures]:
            if adapter.matches(relpath):  # type: ignore[attr-defined]
                assert any(fits(p, relpath) for p in paths["files"]), relpath
            if adapter.owner(relpath) is not None:  # type: ignore[attr-defined]
                claimed += 1
                assert any(fits(p, relpath) for p in every), relpath
        assert claimed > 0, "the drawn paths never reached this format: the test proves nothing"

    def test_every_real_producers_path_it_claims_fits_a_pattern(self) -> None:
        """The paths of the corpus's real files (../shared/corpus/realworld2 and 3, each
        MANIFEST.json names the file's path in its repository): every one an adapter
        claims fits that format's declared patterns, and spec-kit's, Kiro's, Task
        Master's and beads' are all claimed (the premise)."""
        corpus = FIXTURES.parents[2] / "shared" / "corpus"
        entries = [e for d in ("realworld2", "realworld3")
                   for e in json.loads((corpus / d / "MANIFEST.json").read_text())]
        assert entries, f"no corpus manifests under {corpus}"
        tables = {a.name: declared(a.name) for a in all_adapters(plugins=False)}
        claimed: dict[str, int] = {}
        for entry in entries:
            path = entry["path"]
            for adapter in all_adapters(plugins=False):
                paths = tables[adapter.name]
                assert paths is not None
                if adapter.matches(path):
                    assert any(fits(p, path) for p in paths["files"]), (adapter.name, path)
                    convention = entry.get("convention") or "epic-like"
                    claimed[convention] = claimed.get(convention, 0) + 1
                if adapter.owner(path) is not None:
                    every = (*paths["files"], *paths["companions"])
                    assert any(fits(p, path) for p in every), (adapter.name, path)
        for convention in ("spec-kit", "kiro", "task-master", "beads"):
            assert claimed.get(convention), f"no {convention} path claimed: {claimed}"

    def test_no_builtin_finds_its_files_its_own_way(self) -> None:
        """state_files walks the declared roots as Adapter.find does: none overrides it."""
        from storyd.core.formats.base import Adapter

        assert [a.name for a in all_adapters(plugins=False)
                if type(a).find is not Adapter.find] == []  # fmt: skip


class TestPatterns:
    """`*` is one name, a last `**` one or more; anything else is refused by name."""

    @pytest.mark.parametrize(("pattern", "relpath", "fit"), [
        ("plans/*/execution-state.json", "plans/epic-1/execution-state.json", True),
        ("plans/*/execution-state.json", "plans/execution-state.json", False),
        ("plans/*/execution-state.json", "plans/a/b/execution-state.json", False),
        ("plans/**", "plans/a", True),
        ("plans/**", "plans/a/b/c.md", True),
        ("plans/**", "plans", False),
        ("agent-output/*/**", "agent-output/p", False),
        ("agent-output/*/**", "agent-output/p/01.md", True),
        (".beads/issues.jsonl", ".beads/issues.jsonl", True),
        (".beads/issues.jsonl", "x/.beads/issues.jsonl", False),
    ])  # fmt: skip
    def test_fits(self, pattern: str, relpath: str, fit: bool) -> None:
        assert fits(pattern, relpath) is fit

    @pytest.mark.parametrize(("table", "why"), [
        ({"files": ()}, "files: expected a list of paths (at least one)"),
        ({"files": ("a/*.json",)}, "files: 'a/*.json': `*` stands for a whole name"),
        ({"files": ("a/**/b",)}, "files: 'a/**/b': `*` stands for a whole name"),
        ({"files": ("/abs",)}, "files: '/abs' is not a workspace-relative path"),
        ({"files": ("a//b",)}, "files: 'a//b' has an empty, `.` or `..` segment"),
        ({"files": ("a",), "roots": "a"}, "roots: expected a list of paths"),
        ({"files": ("a",), "where": ()}, "not a mapping of roots, files, companions"),
        (("a",), "not a mapping of roots, files, companions"),
    ])  # fmt: skip
    def test_a_bad_table_is_refused_with_its_reason(self, table: object, why: str) -> None:
        found = check(table, Entry(registry.FORMAT_PATHS, "x", "m:T"))
        assert found is not None and found.startswith(why)

    def test_a_good_table_passes(self) -> None:
        assert check({"roots": ["a"], "files": ["a/*/s.json"], "companions": ["a/**"]},
                     Entry(registry.FORMAT_PATHS, "x", "m:T")) is None  # fmt: skip


def _every_format(ws: Path) -> None:
    """A state file of each format the demo lacks, and lookalikes that are none."""
    files = {
        "specs/001-feature/tasks.md": "- [ ] T001 one\n",
        "specs/_template/tasks.md": "- [ ] T001 one\n",
        ".kiro/specs/login/tasks.md": "- [ ] 1. one\n",
        ".taskmaster/tasks/tasks.json": '{"master": {"tasks": []}}',
        "tasks/tasks.json": '{"master": {"tasks": []}}',
        ".beads/issues.jsonl": '{"id": "b-1", "status": "open"}\n',
        "plans/notes/execution-state.json": "{}",
        "plans/epic-0050/.hidden/execution-state.json": "{}",
        "docs/stories/epic-0051/execution-state.json": '{"stories": {}}',
    }
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)


class TestStateFiles:
    """state_files finds what every format's `find` finds, in the same order."""

    def test_it_finds_what_find_finds(self, tmp_path: Path) -> None:
        ws = demo_workspace(tmp_path)
        _every_format(ws)
        expected = find_state_files(str(ws), all_adapters(plugins=False))
        found = state_files(str(ws), lambda relpath: False)
        assert list(found) == list(expected) and len(found) > 9
        assert all(found[rel] is expected[rel] for rel in found)
        known = state_files(str(ws), lambda relpath: relpath in expected)
        assert list(known) == list(expected) and set(known.values()) == {None}

    def test_known_files_import_no_format(self, tmp_path: Path) -> None:
        """Every file known (unchanged since the last look): no format is imported; one
        not known imports its own format alone."""
        ws = demo_workspace(tmp_path)
        code = (
            "import json, sys\n"
            "from storyd.core.formats import state_files\n"
            f"known = state_files({str(ws)!r}, lambda rel: True)\n"
            "before = sorted(sys.modules)\n"
            f"one = state_files({str(ws)!r}, lambda rel: not rel.startswith('_docs/'))\n"
            "print(json.dumps([len(known), before, sorted(sys.modules),"
            " [r for r, a in one.items() if a]]))\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=True)  # fmt: skip
        count, before, after, read = json.loads(done.stdout)
        assert count == 5 and [FORMAT_MODULES[m] for m in before if m in FORMAT_MODULES] == []
        assert [FORMAT_MODULES[m] for m in after if m in FORMAT_MODULES] == ["autodev"]
        assert read == ["_docs/_autodev_state.md"]


def test_a_path_loads_only_the_formats_it_may_belong_to(tmp_path: Path) -> None:
    """claiming() imports the formats whose paths a path fits (a companion's too)."""
    code = (
        "import json, sys\n"
        "from storyd.core.formats import claiming\n"
        "print(json.dumps([[a.name for a in claiming(p, plugins=False)] for p in sys.argv[1:]]"
        " + [sorted(sys.modules)]))\n"
    )
    asked = ["plans/epic-1/execution-state.json", "plans/epic-1/stories/s.md",
             ".taskmaster/state.json", "src/main.py"]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, *asked], capture_output=True,
                          text=True, timeout=60, check=True, env=dict(os.environ))  # fmt: skip
    *names, modules = json.loads(done.stdout)
    assert names == [["epic"], ["epic"], ["task-master"], []]
    assert sorted(FORMAT_MODULES[m] for m in modules if m in FORMAT_MODULES) == [
        "epic", "task-master"]


@pytest.mark.parametrize(("pattern", "folder", "lead"), [
    ("plans/*/execution-state.json", "plans", True),
    ("plans/*/execution-state.json", "plans/epic-1", True),
    ("plans/*/execution-state.json", "plans/epic-1/stories", False),
    ("plans/*/execution-state.json", "docs", False),
    ("_docs/_autodev_state.md", "_docs", True),
    ("_docs/_autodev_state.md", "_docs/01_document", False),
    ("memory/state/phase.json", "memory/reports", False),
    ("plans/**", "plans/a/b/c", True),
    ("agent-output/*/**", "agent-output/p/q", True),
])  # fmt: skip
def test_a_walk_enters_only_folders_a_pattern_leads_into(
        pattern: str, folder: str, lead: bool) -> None:
    from storyd.core.formats.declared import leads

    assert leads(pattern, folder) is lead
    drawn = [p for p in _paths(5_000, 33) if p.startswith(folder + "/")]
    if not lead:  # nothing below a folder it does not lead into can fit it
        assert not any(fits(pattern, p) for p in drawn)
