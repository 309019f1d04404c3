#!/usr/bin/env python3
"""Time `storyd resume` against the seed's bash + jq reference, side by side.

    python3 bench/bench_resume.py [--quick] [--json PATH]

Stdlib only. The project is measured from its own NON-editable venv
(bench/results/.venv-bench, rebuilt when the sources change), because an editable
install adds its finder's imports to every start-up. bench/README.md explains the rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from workloads import make_epic_workspace

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VENV = BENCH / "results" / ".venv-bench"
STAMP = VENV / "storyd-source.sha256"
REFERENCE = BENCH / "reference" / "story-resume.sh"
EPIC = "0049"
WORKER_FLAG = "--inprocess-worker"  # internal: bench_resume.py re-runs itself in the venv

FORBIDDEN = ("git", "watchdog", "structlog", "orjson", "dataclasses", "typing", "re")
WRAPPER_IMPORTS = ("re",)  # pip's console-script wrapper does `import re`
# What pip (distlib) writes for a `[project.scripts]` entry: the "before" launcher.
PIP_WRAPPER = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from storyd.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""
INPROC_TARGET_MS = 1.0
SPEEDUP_TARGET = 2.0
CLI_COST_TARGET = 1.5
TOP_IMPORTS = 10


@dataclass(frozen=True)
class Workload:
    """One generated epic and how often to run each row on it."""

    name: str
    label: str
    stories: int
    tasks: int
    runs: int  # process rows, interleaved
    calls_mtime: int  # in-process calls, mtime mode
    calls_git: int  # in-process calls, git mode (each runs git twice)
    seed_shape: bool  # the per-call targets (<= 1 ms, <= 1.5x) are set for this shape

    def quick(self) -> Workload:
        """The same workload with about a tenth of the iterations (a smoke run)."""
        def fewer(n: int) -> int:
            return max(3, n // 10)

        return Workload(self.name, self.label, self.stories, self.tasks, fewer(self.runs),
                        fewer(self.calls_mtime), fewer(self.calls_git), self.seed_shape)


WORKLOADS = (
    Workload("22x5", "seed epic-0049 shape", 22, 5, runs=100, calls_mtime=3000, calls_git=200,
             seed_shape=True),
    Workload("1000x20", "large file", 1000, 20, runs=40, calls_mtime=60, calls_git=30,
             seed_shape=False),
)


@dataclass(frozen=True)
class Row:
    """One line of a workload's table: a command (or in-process call) and its samples."""

    key: str
    label: str
    mode: str | None  # staleness mode whose envelope it prints; None for baselines
    samples: tuple[int, ...]

    @property
    def median(self) -> float:
        """Median wall time in ns."""
        return statistics.median(self.samples)

    @property
    def p99(self) -> int:
        """99th percentile wall time in ns (nearest rank)."""
        ordered = sorted(self.samples)
        return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Command:
    """A process row: what to run, and which envelope it must print."""

    key: str
    label: str
    argv: tuple[str, ...]
    mode: str | None


@dataclass(frozen=True)
class Goal:
    """A target: the row it is printed beside, the figure, and whether it is met."""

    row: str
    title: str
    bound: str
    value: str
    met: bool

    @property
    def verdict(self) -> str:
        return "MET" if self.met else "MISSED"


@dataclass(frozen=True)
class Import:
    """One `-X importtime` line: a module, its nesting depth and its times in µs."""

    name: str
    depth: int
    self_us: int
    cumulative_us: int


# --- the bench venv -------------------------------------------------------------------

_COPY_IGNORE = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info",
                                      "__pycache__", "results", ".*_cache", ".hypothesis")


def _source_digest() -> str:
    """A hash of everything that goes into the installed package."""
    digest = hashlib.sha256(sys.version.encode())
    paths = [REPO / "pyproject.toml", REPO / "README.md"]
    for folder in ("daemon", "detectors", "bin"):
        paths += sorted(p for p in (REPO / folder).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts)
    for path in paths:
        if path.exists():
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _pip(*args: str) -> None:
    """Run the bench venv's pip quietly; its output is shown only if it fails."""
    cmd = [str(VENV / "bin" / "python"), "-m", "pip", "--quiet", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"pip {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


def ensure_venv() -> str:
    """The bench venv, (re)built when absent or stale; returns how it was obtained.

    storyd is installed from a copy of the work tree (so no build/ or egg-info lands in
    it), and setuptools is removed afterwards: its distutils-precedence.pth would add an
    import to every start-up, as it does not in a pipx-style venv.
    """
    digest = _source_digest()
    installed = (VENV / "bin" / "storyd").exists() and STAMP.exists()
    if installed and STAMP.read_text().strip() == digest:
        return "reused"
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    with tempfile.TemporaryDirectory(prefix="storyd-src-") as tmp:
        source = Path(tmp) / "storyd"
        shutil.copytree(REPO, source, ignore=_COPY_IGNORE)
        _pip("install", str(source))
    _pip("uninstall", "--yes", "setuptools")
    STAMP.write_text(digest + "\n")
    return "built"


def _venv_python() -> str:
    return str(VENV / "bin" / "python")


def pip_wrapper() -> Path:
    """pip's generated console-script wrapper for `storyd`, written into the bench venv
    (storyd now ships its own launcher; this is the "before" row)."""
    path = VENV / "bin" / "storyd-pip-wrapper"
    path.write_text(PIP_WRAPPER.format(python=_venv_python()), encoding="utf-8")
    path.chmod(0o755)
    return path


def _pth_files() -> list[str]:
    """The .pth files in the bench venv (each one is start-up work)."""
    return sorted(p.name for p in VENV.glob("lib/python3*/site-packages/*.pth"))


# --- processes --------------------------------------------------------------------------


def child_env(scratch: Path) -> dict[str, str]:
    """The environment for every timed process: no PYTHON* variables, no daemon socket."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTHON") and k != "STORYD_SOCKET"}
    for name in ("runtime", "config"):
        (scratch / name).mkdir(mode=0o700, exist_ok=True)
    env["XDG_RUNTIME_DIR"] = str(scratch / "runtime")
    env["XDG_CONFIG_HOME"] = str(scratch / "config")
    return env


def capture(argv: tuple[str, ...], cwd: Path, env: dict[str, str]) -> bytes:
    """Run once and return stdout; a non-zero exit stops the benchmark."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()}")
    return done.stdout


def time_run(argv: tuple[str, ...], cwd: Path, env: dict[str, str]) -> int:
    """Wall time of one run in ns, from spawn to exit, output to /dev/null."""
    start = time.perf_counter_ns()
    code = subprocess.call(argv, cwd=cwd, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter_ns() - start
    if code != 0:
        sys.exit(f"{' '.join(argv)} exited {code} while timing")
    return elapsed


def measure_interleaved(commands: list[Command], runs: int, warmup: int, cwd: Path,
                        env: dict[str, str]) -> list[Row]:
    """Time every command `runs` times, round-robin with a rotating start, so that
    machine noise and drift fall on all rows alike."""
    for command in commands:
        for _ in range(warmup):
            time_run(command.argv, cwd, env)
    samples: dict[str, list[int]] = {c.key: [] for c in commands}
    for i in range(runs):
        shift = i % len(commands)
        for command in commands[shift:] + commands[:shift]:
            samples[command.key].append(time_run(command.argv, cwd, env))
    return [Row(c.key, c.label, c.mode, tuple(samples[c.key])) for c in commands]


# --- in process (runs inside the bench venv) ---------------------------------------------


def _worker(spec_json: str) -> None:
    """Inside the bench venv: time `storyd.api.answers.resume_epic` in a loop; print JSON."""
    import storyd
    from storyd.api import answers

    spec = json.loads(spec_json)
    options = answers.Options(staleness=spec["mode"])
    answer = None
    for _ in range(spec["warmup"]):
        answer = answers.resume_epic(spec["workspace"], EPIC, spec["story"], options)
    clock = time.perf_counter_ns
    samples = []
    for _ in range(spec["calls"]):
        start = clock()
        answer = answers.resume_epic(spec["workspace"], EPIC, spec["story"], options)
        samples.append(clock() - start)
    line = answer.line.decode() if answer else ""
    json.dump({"samples": samples, "line": line, "module": storyd.__file__}, sys.stdout)


def measure_inprocess(workspace: Path, story: str, mode: str, *, calls: int, warmup: int,
                      env: dict[str, str]) -> tuple[list[int], bytes, str]:
    """Samples, the envelope line and daemon's file, from a worker in the bench venv."""
    spec = {"workspace": str(workspace), "story": story, "mode": mode,
            "calls": calls, "warmup": warmup}
    argv = (_venv_python(), str(Path(__file__).resolve()), WORKER_FLAG, json.dumps(spec))
    result = json.loads(capture(argv, workspace, env))
    return result["samples"], result["line"].encode(), result["module"]


# --- the rows ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """One generated workspace and how to query it: the flags and the no-wrapper entry."""

    workspace: Path
    story: str
    query: tuple[str, ...]  # --story-id … --epic-id … --workspace …
    entry: tuple[str, ...]  # runs storyd.cli without the console-script wrapper
    entry_label: str
    note: str

    def storyd(self, *flags: str) -> tuple[str, ...]:
        """The installed launcher (bin/storyd): `storyd resume <flags> <query>`."""
        return (str(VENV / "bin" / "storyd"), "resume", *flags, *self.query)

    def wrapped(self, *flags: str) -> tuple[str, ...]:
        """The same through pip's generated console-script wrapper (the "before")."""
        return (str(pip_wrapper()), "resume", *flags, *self.query)

    def bare(self, *flags: str) -> tuple[str, ...]:
        """The same through the no-wrapper entry."""
        return (*self.entry, "resume", *flags, *self.query)


MTIME = ("--direct", "--staleness", "mtime")
GIT = ("--direct",)


def prepare(workload: Workload, root: Path, env: dict[str, str]) -> tuple[Setup, bytes]:
    """Generate the workspace, pick its middle story; return it with the reference's output.

    The no-wrapper entry is `python -m storyd` when that prints the envelope, else
    the same call through `python -c` (daemon/cli/__init__.py may lack a __main__ guard).
    """
    workspace, ids = make_epic_workspace(root, workload.stories, workload.tasks, EPIC)
    story = ids[len(ids) // 2]
    query = ("--story-id", story, "--epic-id", EPIC, "--workspace", str(workspace))
    expected = capture(("bash", str(REFERENCE), *query), workspace, env)
    module = Setup(workspace, story, query, (_venv_python(), "-m", "storyd"),
                   "python -m storyd resume", "")
    if capture(module.bare(*MTIME), workspace, env) == expected:
        return module, expected
    inline = (_venv_python(), "-c",
              "import sys; from storyd.cli import main; sys.exit(main(sys.argv[1:]))")
    note = ("note: `python -m storyd` prints nothing (daemon/cli/__init__.py has no __main__ "
            "guard), so that row runs `python -c 'from storyd.cli import main; ...'` instead")
    return Setup(workspace, story, query, inline, "python -c 'storyd.cli.main()' resume",
                 note), expected


def process_commands(setup: Setup) -> list[Command]:
    """The process rows, baselines first and the reference last."""
    return [
        Command("true", "/bin/true (spawn floor)", ("/bin/true",), None),
        Command("python-pass", "python3 -c pass (bench venv)", (_venv_python(), "-c", "pass"),
                None),
        Command("storyd-mtime", "storyd resume --direct --staleness mtime (bin/storyd)",
                setup.storyd(*MTIME), "mtime"),
        Command("wrapper-mtime", "pip's console-script wrapper, same flags (before)",
                setup.wrapped(*MTIME), "mtime"),
        Command("storyd-git", "storyd resume --direct (git mode, default)",
                setup.storyd(*GIT), "git"),
        Command("bare-mtime", f"{setup.entry_label} --direct --staleness mtime",
                setup.bare(*MTIME), "mtime"),
        Command("reference", "reference: bash + jq (story-resume.sh)",
                ("bash", str(REFERENCE), *setup.query), "mtime"),
    ]


def verify(outputs: dict[str, tuple[str | None, bytes]]) -> None:
    """Check that every row of a staleness mode printed the same envelope, byte for byte."""
    first: dict[str, tuple[str, bytes]] = {}
    for key, (mode, out) in outputs.items():
        if mode is None:
            continue
        other, expected = first.setdefault(mode, (key, out))
        if out != expected:
            sys.exit(f"{key} and {other} print different {mode}-mode envelopes:\n"
                     f"{out!r}\n{expected!r}")


# --- imports -----------------------------------------------------------------------------


def parse_importtime(stderr: str) -> list[Import]:
    """The `import time:` lines of `python -X importtime`, in the order printed."""
    found = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:"):].split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        found.append(Import(name.strip(), depth, int(self_us), int(cumulative_us)))
    return found


def ancestors(imports: list[Import], index: int) -> list[Import]:
    """Who imported imports[index], outermost first (a parent prints after its children)."""
    found = []
    depth = imports[index].depth
    for later in imports[index + 1:]:
        if later.depth < depth:
            found.append(later)
            depth = later.depth
    return found[::-1]


def forbidden_imports(imports: list[Import]) -> list[tuple[str, str]]:
    """Each forbidden top-level module imported, with how it came in, e.g.
    ("re", "via subprocess > locale; subprocess: 9.8 ms cumulative")."""
    found = []
    for index, entry in enumerate(imports):
        if entry.name not in FORBIDDEN:
            continue
        chain = ancestors(imports, index)
        if not chain:
            found.append((entry.name, "imported directly"))
            continue
        root = chain[0]
        via = " > ".join(i.name for i in chain)
        found.append((entry.name, f"via {via}; {root.name}: "
                                  f"{root.cumulative_us / 1000:.1f} ms cumulative"))
    return found


def profile(argv: tuple[str, ...], cwd: Path, env: dict[str, str]) -> list[Import]:
    """One run under the bench venv's `python -X importtime`; argv is a script or a
    python command line (whose own interpreter is replaced by that one)."""
    args = argv[1:] if argv[0] == _venv_python() else argv
    done = subprocess.run((_venv_python(), "-X", "importtime", *args), cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} under -X importtime exited {done.returncode}")
    return parse_importtime(done.stderr)


def import_checks(setup: Setup, env: dict[str, str]) -> list[dict[str, object]]:
    """Run the resume path under -X importtime; a check fails on a forbidden import it
    does not allow (pip's wrapper, the "before" row, may import `re`: it does)."""
    runs = [
        ("storyd resume --direct --staleness mtime (bin/storyd launcher)", setup.storyd(*MTIME),
         ()),
        ("pip's console-script wrapper, same flags (before)", setup.wrapped(*MTIME),
         WRAPPER_IMPORTS),
        (f"{setup.entry_label} --direct --staleness mtime (no wrapper)",
         setup.bare(*MTIME), ()),
        (f"{setup.entry_label} --direct (git mode, default; story file newer than its "
         "DONE tasks, so git runs)", setup.bare(*GIT), ()),
    ]
    checks = []
    for label, argv, allowed in runs:
        found = forbidden_imports(profile(argv, setup.workspace, env))
        described = []
        for name, how in found:
            note = ", allowed: the console-script wrapper's own import" if name in allowed else ""
            described.append(f"{name} ({how}{note})")
        checks.append({"run": label, "found": described,
                       "ok": all(name in allowed for name, _ in found)})
    return checks


@dataclass(frozen=True)
class ImportSummary:
    """Median -X importtime figures of one command over several runs, in ms."""

    runs: int
    modules: dict[str, tuple[float, float]]  # name -> (self, cumulative)
    total_ms: float  # the sum of self times

    def top(self, count: int = TOP_IMPORTS) -> list[tuple[str, float, float]]:
        """The `count` modules with the largest self time: (name, self, cumulative)."""
        ranked = sorted(self.modules.items(), key=lambda item: item[1][0], reverse=True)
        return [(name, own, cumulative) for name, (own, cumulative) in ranked[:count]]

    def as_dict(self) -> dict[str, object]:
        return {"runs": self.runs, "modules": len(self.modules), "total_self_ms": self.total_ms,
                "top_self": [{"module": n, "self_ms": s, "cumulative_ms": c}
                             for n, s, c in self.top()]}


def summarize_imports(argv: tuple[str, ...], cwd: Path, env: dict[str, str],
                      runs: int) -> ImportSummary:
    """Profile a command `runs` times; keep each module's median self and cumulative time."""
    selfs: dict[str, list[int]] = {}
    cumulative: dict[str, list[int]] = {}
    totals = []
    for _ in range(runs):
        imports = profile(argv, cwd, env)
        totals.append(sum(i.self_us for i in imports))
        for entry in imports:
            selfs.setdefault(entry.name, []).append(entry.self_us)
            cumulative.setdefault(entry.name, []).append(entry.cumulative_us)
    modules = {name: (statistics.median(selfs[name]) / 1000,
                      statistics.median(cumulative[name]) / 1000) for name in selfs}
    return ImportSummary(runs, modules, statistics.median(totals) / 1000)


# --- the report ---------------------------------------------------------------------------


def ms(ns: float) -> str:
    """A duration in ms with about three significant digits."""
    value = ns / 1e6
    if value < 1:
        return f"{value:.3f} ms"
    if value < 10:
        return f"{value:.2f} ms"
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


def cli_cost(rows: dict[str, Row], key: str = "storyd-mtime") -> tuple[float, float]:
    """A CLI row's wall time over the bare interpreter's: (median ratio, p99 ratio)."""
    cli, bare = rows[key], rows["python-pass"]
    return cli.median / bare.median, cli.p99 / bare.p99


def goals(workload: Workload, rows: dict[str, Row]) -> list[Goal]:
    """The targets that apply to a workload, measured."""
    found = []
    speedup = rows["reference"].median / rows["storyd-mtime"].median
    if workload.seed_shape:
        inproc = rows["inproc-mtime"].median / 1e6
        found.append(Goal("inproc-mtime", "in-process direct read, mtime",
                          f"<= {INPROC_TARGET_MS:g} ms", f"{inproc:.3f} ms",
                          inproc <= INPROC_TARGET_MS))
    found.append(Goal("storyd-mtime", "storyd resume process vs bash + jq",
                      f">= {SPEEDUP_TARGET:g}x faster", f"{speedup:.1f}x",
                      speedup >= SPEEDUP_TARGET))
    if workload.seed_shape:
        cost, _ = cli_cost(rows)
        found.append(Goal("cli-cost", "CLI wall / python3 -c pass", f"<= {CLI_COST_TARGET:g}x",
                          f"{cost:.2f}x", cost <= CLI_COST_TARGET))
    return found


def print_table(result: dict[str, object], workload: Workload, rows: list[Row],
                beside: dict[str, Goal]) -> None:
    """One workload's plain-text table, with each target beside its row."""
    print(f"\n== {workload.name} ({workload.label}): {workload.stories} stories x "
          f"{workload.tasks} tasks, state file {result['state_bytes'] / 1024:,.0f} KiB, "
          f"query {result['story']} -> {result['summary']}")
    costs = [("storyd-mtime", "CLI cost: storyd resume (mtime) / python3 -c pass", "cli-cost"),
             ("wrapper-mtime", "CLI cost through pip's wrapper (before)", ""),
             ("bare-mtime", "CLI cost of python -m storyd", "")]
    width = max(*(len(label) for _, label, _ in costs), *(len(r.label) for r in rows))
    line = f"{{:<{width}}} {{:>5}} {{:>10}} {{:>10}} {{:>8}}  {{}}"

    def target(key: str, default: str = "") -> str:
        goal = beside.get(key)
        return f"{goal.bound}: {goal.verdict}" if goal else default

    print(line.format("row", "n", "median", "p99", "vs ref", "target"))
    ref = next(r for r in rows if r.key == "reference")
    for row in rows:
        print(line.format(row.label, len(row.samples), ms(row.median), ms(row.p99),
                          f"{ref.median / row.median:.1f}x", target(row.key)).rstrip())
    for key, label, goal in costs:
        median_ratio, p99_ratio = cli_cost({r.key: r for r in rows}, key)
        print(line.format(label, "", f"{median_ratio:.2f}x", f"{p99_ratio:.2f}x", "",
                          target(goal, "(for information)")))
    print("vs ref = reference median / row median (how many times faster than bash + jq)")


def summarize_envelope(line: bytes) -> str:
    """`phase-2-task-4, 3 done / 2 pending, 3 stale warnings` for the table's title."""
    env = json.loads(line)
    return (f"{env['resumePoint']}, {len(env['tasksCompleted'])} done / "
            f"{len(env['tasksPending'])} pending, {len(env['staleWarnings'])} stale warnings "
            f"in mtime mode")


def print_summary(measured: list[tuple[str, Goal]], checks: list[dict[str, object]],
                  imports: dict[str, ImportSummary]) -> None:
    """The targets, the import-path checks and the top self-time imports."""
    print("\n== targets")
    for name, goal in measured:
        print(f"  {goal.title + ' ' + goal.bound + ', ' + name:<58} {goal.value:>9}  "
              f"{goal.verdict}")
    print("\n== import path (-X importtime): forbidden = " + ", ".join(FORBIDDEN))
    for check in checks:
        print(f"  {'PASS' if check['ok'] else 'FAIL'}  {check['run']}")
        print(f"        forbidden imports: {'; '.join(check['found']) or 'none'}")
    resume, bare = imports["launcher"], imports["python3 -c pass"]
    print(f"\n== top {TOP_IMPORTS} imports by self time: storyd resume --direct --staleness mtime "
          f"(bin/storyd launcher), median of {resume.runs} runs")
    print("  modules imported, and the sum of their self times (-X importtime inflates them): "
          + "; ".join(f"{label} {len(found.modules)}, {found.total_ms:.1f} ms"
                      for label, found in imports.items()))
    print(f"  {'self':>9} {'cumul.':>9}  module")
    for name, own, cumulative in resume.top():
        startup = "  (also at bare start-up)" if name in bare.modules else ""
        print(f"  {own:>6.2f} ms {cumulative:>6.2f} ms  {name}{startup}")


# --- the run -----------------------------------------------------------------------------


def inprocess_rows(workload: Workload, setup: Setup, warmup: int,
                   env: dict[str, str]) -> tuple[list[Row], dict[str, bytes], str]:
    """The in-process rows (mtime and git mode), their envelopes, and daemon's file."""
    rows, lines = [], {}
    module = ""
    for mode, calls in (("mtime", workload.calls_mtime), ("git", workload.calls_git)):
        samples, lines[mode], module = measure_inprocess(
            setup.workspace, setup.story, mode, calls=calls, warmup=warmup, env=env)
        suffix = "" if mode == "mtime" else " (git mode, default)"
        rows.append(Row(f"inproc-{mode}", f"in-process answers.resume_epic, {mode}{suffix}",
                        mode, tuple(samples)))
    return rows, lines, module


def run_workload(workload: Workload, root: Path, env: dict[str, str],
                 warmup: int) -> tuple[dict[str, object], list[Goal], Setup]:
    """Generate one workload, check that every row prints the same envelope, time it."""
    setup, expected = prepare(workload, root, env)
    commands = process_commands(setup)
    outputs = {"reference": ("mtime", expected)}  # first: the one the others must match
    outputs.update({c.key: (c.mode, capture(c.argv, setup.workspace, env)) for c in commands})
    inproc, lines, module = inprocess_rows(workload, setup, warmup, env)
    outputs.update({f"inproc-{mode}": (mode, line) for mode, line in lines.items()})
    verify(outputs)
    timed = measure_interleaved(commands, workload.runs, warmup, setup.workspace, env)
    rows = timed[:2] + inproc + timed[2:]
    by_key = {r.key: r for r in rows}
    measured = goals(workload, by_key)
    state = setup.workspace / "plans" / f"epic-{EPIC}" / "execution-state.json"
    result = {
        "workload": workload.name, "stories": workload.stories, "tasks": workload.tasks,
        "story": setup.story, "summary": summarize_envelope(expected), "module": module,
        "state_bytes": state.stat().st_size,
        "cli_cost": {key: dict(zip(("median", "p99"), cli_cost(by_key, key), strict=True))
                     for key in ("storyd-mtime", "wrapper-mtime", "bare-mtime")},
        "rows": [{"key": r.key, "label": r.label, "n": len(r.samples), "median_ns": r.median,
                  "p99_ns": r.p99, "samples_ns": list(r.samples)} for r in rows],
        "targets": [{"target": f"{g.title} {g.bound}", "value": g.value, "met": g.met}
                    for g in measured],
    }
    print_table(result, workload, rows, {g.row: g for g in measured})
    return result, measured, setup


def _tool_version(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).splitlines()[0].strip() if done.returncode == 0 else "?"


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next((line.split(":", 1)[1].strip() for line in info
                          if line.startswith("model name")), "?")
    except OSError:
        model = "?"
    return f"{model}, {os.cpu_count()} cores"


def print_header(venv_state: str, quick: bool) -> dict[str, str]:
    """What was measured, with which tools, on which machine."""
    meta = {
        "python": _tool_version(_venv_python(), "--version"),
        "venv": f"{VENV.relative_to(REPO)} ({venv_state}; non-editable; .pth files: "
                f"{', '.join(_pth_files()) or 'none'})",
        "reference": f"{REFERENCE.relative_to(REPO)} ({_tool_version('bash', '--version')}; "
                     f"{_tool_version('jq', '--version')})",
        "git": _tool_version("git", "--version"),
        "cpu": _cpu(),
        "load": " ".join(f"{v:.2f}" for v in os.getloadavg()) + " (1, 5, 15 min averages)",
        "mode": "quick (smoke run)" if quick else "full",
    }
    print("storyd resume benchmark")
    for key, value in meta.items():
        print(f"  {key:<9} {value}")
    return meta


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations: a smoke run")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run every workload, the import checks, print the tables; 1 if an import check fails."""
    args = parse_args(argv)
    began = time.monotonic()
    meta = print_header(ensure_venv(), args.quick)
    warmup = 1 if args.quick else 3
    repeats = 3 if args.quick else 7
    with tempfile.TemporaryDirectory(prefix="storyd-bench-") as tmp:
        env = child_env(Path(tmp))
        results, measured, setups = [], [], []
        for workload in WORKLOADS:
            result, found, setup = run_workload(workload.quick() if args.quick else workload,
                                                Path(tmp), env, warmup)
            results.append(result)
            measured += [(workload.name, goal) for goal in found]
            setups.append(setup)
        checks = import_checks(setups[0], env)
        imports = {label: summarize_imports(argv, setups[0].workspace, env, repeats)
                   for label, argv in (("launcher", setups[0].storyd(*MTIME)),
                                       ("pip wrapper", setups[0].wrapped(*MTIME)),
                                       (setups[0].entry_label.removesuffix(" resume"),
                                        setups[0].bare(*MTIME)),
                                       ("python3 -c pass", (_venv_python(), "-c", "pass")))}
    print_summary(measured, checks, imports)
    if setups[0].note:
        print(f"\n{setups[0].note}")
    print(f"daemon imported from {results[0]['module']}")
    print(f"total {time.monotonic() - began:.0f} s")
    if args.json:
        write_json(args.json, {"meta": meta, "workloads": results, "import_checks": checks,
                               "imports": {k: v.as_dict() for k, v in imports.items()}})
    return 0 if all(check["ok"] for check in checks) else 1


def write_json(path: Path, dump: dict[str, object]) -> None:
    """Everything printed, plus the raw samples, as one JSON document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dump, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == WORKER_FLAG:
        _worker(sys.argv[2])
    else:
        sys.exit(main(sys.argv[1:]))
