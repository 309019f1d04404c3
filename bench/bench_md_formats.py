"""OpenSpec, Backlog.md, Codex ExecPlans, BMAD and GSD: a direct read of each convention's largest
real file against parsing it alone (the measure of bench_formats.py's part 2).

    python bench/bench_md_formats.py [--reads 41]

The files are the shared corpora's (../shared/corpus/realworld4, realworld3's
codex-execplan), laid out in a temporary workspace, never copied into the project. A
direct read is what `storyd resume --direct` reads: the adapter's `load` on a fresh
Source (locked reads, tasks, findings, next task); the envelope's rendering, the same
for every format, is printed apart. Parsing alone is the format's parser on text already
in memory: OpenSpec's and the ExecPlan's `parse`; for Backlog.md the YAML subset's
`front_matter` of each task file and `parse` of the config (the largest task file with
its config, and the largest backlog whole); for BMAD the YAML subset's `nested` of the
largest sprint-status.yaml (alone), and of a sprint with its largest story file's
`Status:` line; for GSD the largest STATE.md's front matter and Current Position with
its commit's ROADMAP.md; for Claude Code's task lists `json.loads` of every file of the
largest list. Interleaved, medians (and the ratio of minimums, steadier when the
machine is shared). For Claude Code's list, its floor too: the four system calls per
task file every read must make (open without following a link, fstat for the regular
file check and the signature, a bounded read, close), then storyd's JSON parser
(storyd.core.jsonio, the one the read uses), nothing built; and its yardstick as a list
of files: reading and parsing them alone, the fewest system calls a plain read makes
(open, read, close) and `json.loads` of each, nothing checked. A list of 54 files is
mostly its system calls: the floor alone is over 2x of `json.loads` of bytes already in
memory, which no read of the files can meet (docs/formats.md, "Largest real list").
Target: within 2x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import realworld3  # noqa: E402
import realworld4  # noqa: E402

from storyd.api.answers import Options, resume_unit  # noqa: E402
from storyd.core.formats import (  # noqa: E402
    adapter_for,
    bmad,
    execplan,
    gsd,
    openspec,
    yamlsubset,
)
from storyd.core.formats.base import Source  # noqa: E402

CONFIG = "backlog/config.yml"


def _largest(rows: list[dict[str, object]]) -> dict[str, object]:
    return max(rows, key=lambda e: int(str(e["bytes"])))


def _cases(root: Path) -> list[tuple[str, str, str, Callable[[], object], int]]:
    """(name, file, workspace, parse-alone callable, bytes) per convention."""
    cases = []
    spec = _largest([e for e in realworld4.entries("openspec")
                     if str(e["path"]).endswith("tasks.md")])
    ws = root / "openspec"
    relpath = realworld4.lay_out(spec, ws)
    text = (ws / relpath).read_text(encoding="utf-8")
    cases.append(("openspec", relpath, str(ws), lambda t=text: openspec.parse(t),
                  len(text.encode())))
    configs = [e for e in realworld4.entries("backlog-md") if str(e["path"]) == CONFIG]
    sizes = {str(c["repo"]): sum(int(str(e["bytes"])) for e in realworld4.entries("backlog-md")
                                 if e["repo"] == c["repo"]) for c in configs}
    config = max(configs, key=lambda c: sizes[str(c["repo"])])
    ws = root / "backlog"
    paths = realworld4.lay_out_commit(config, ws)
    texts = {p: (ws / p).read_text(encoding="utf-8") for p in paths}

    def backlog(texts: dict[str, str] = texts) -> object:
        return [yamlsubset.parse(t) if p == CONFIG else yamlsubset.front_matter(t)
                for p, t in texts.items()]

    size = sum(len(t.encode()) for t in texts.values())
    cases.append(("backlog-md (whole backlog)", CONFIG, str(ws), backlog, size))
    task = _largest([e for e in realworld4.entries("backlog-md") if "id" in e])
    ws = root / "backlog-one"
    relpath = realworld4.lay_out(task, ws)
    [own] = [e for e in configs if e["repo"] == task["repo"]]
    realworld4.lay_out(own, ws)
    one = {p: (ws / p).read_text(encoding="utf-8") for p in (CONFIG, relpath)}
    cases.append(("backlog-md (largest task file)", CONFIG, str(ws),
                  lambda t=one: backlog(t), sum(len(t.encode()) for t in one.values())))
    plan = _largest([e for e in realworld3.entries("codex-execplan")
                     if str(e["path"]).startswith(".agent/")])
    ws = root / "execplan"
    relpath = realworld3.lay_out(plan, ws)
    text = (ws / relpath).read_text(encoding="utf-8")
    cases.append(("execplan", relpath, str(ws), lambda t=text, r=relpath: execplan.parse(t, r),
                  len(text.encode())))
    cases.extend(_bmad_gsd(root))
    cases.append(_claude_tasks(root))
    return cases


def _claude_tasks(root: Path) -> tuple[str, str, str, Callable[[], object], int]:
    """Claude Code's largest real task list (one JSON file per task, committed under
    `tasks/`), laid out as `.claude/tasks/`: its first task file answers for the list;
    parsing alone is `json.loads` of every file."""
    rows = realworld3.entries("claude-tasks")
    folders: dict[tuple[str, str, str], list[dict[str, object]]] = {}
    for e in rows:
        if str(e["path"]).endswith(".json"):
            key = (str(e["repo"]), str(e["commit"]), str(e["path"]).rsplit("/", 1)[0])
            folders.setdefault(key, []).append(e)
    biggest = max(folders.values(), key=len)
    ws = root / "claude-tasks"
    folder = ws / ".claude" / "tasks"
    folder.mkdir(parents=True)
    for e in biggest:
        name = str(e["path"]).rsplit("/", 1)[1]
        (folder / name).write_bytes((realworld3.CORPUS / str(e["file"])).read_bytes())
    paths = [f".claude/tasks/{p.name}" for p in folder.iterdir()]
    blobs = [(ws / p).read_bytes() for p in paths]
    first = min(paths, key=lambda p: int(p.rsplit("/", 1)[1].split(".")[0]))
    return (f"claude-tasks ({len(paths)} task files)", first, str(ws),
            lambda b=blobs: [json.loads(x) for x in b], sum(len(b) for b in blobs))


def _claude_floor(ws: str) -> Callable[[], object]:
    """The least a direct read of the list does: per task file the four system calls
    with read_task_files' flags, then storyd's JSON parser (`loads` per file); no unit
    built."""
    import os

    from storyd.core import jsonio
    from storyd.core.formats import claude_tasks

    folder = os.path.join(ws, ".claude", "tasks")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY

    def floor() -> object:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            found = []
            for name in claude_tasks.task_names(os.listdir(dfd)):
                fd = os.open(name, flags, dir_fd=dfd)
                try:  # read_task_files' read: the size fstat gave and one byte more
                    found.append(jsonio.loads(os.read(fd, os.fstat(fd).st_size + 1)))
                finally:
                    os.close(fd)
            return found
        finally:
            os.close(dfd)

    return floor


def _claude_read_and_parse(ws: str) -> Callable[[], object]:
    """Parsing the list alone, as files: open, read and close each task file the folder
    lists (no link, type or size check, no signature) and `json.loads` it."""
    import os

    folder = os.path.join(ws, ".claude", "tasks")

    def read_and_parse() -> object:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            found = []
            for name in sorted(os.listdir(dfd)):
                fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
                try:
                    found.append(json.loads(os.read(fd, 65536)))
                finally:
                    os.close(fd)
            return found
        finally:
            os.close(dfd)

    return read_and_parse


def _bmad_gsd(root: Path) -> list[tuple[str, str, str, Callable[[], object], int]]:
    """BMAD's largest sprint-status.yaml alone and its largest story file with its sprint;
    GSD's largest STATE.md with its commit's ROADMAP.md."""
    cases = []
    rows = realworld4.entries("bmad")
    sprint = _largest([e for e in rows if str(e["path"]).endswith(".yaml")])
    ws = root / "bmad"
    relpath = realworld4.lay_out(sprint, ws)
    text = (ws / relpath).read_text(encoding="utf-8")
    cases.append(("bmad (largest sprint-status)", relpath, str(ws),
                  lambda t=text: yamlsubset.nested(t), len(text.encode())))
    story = _largest([e for e in rows if str(e["path"]).endswith(".md")])
    ws = root / "bmad-story"
    paths = realworld4.lay_out_commit(story, ws)
    [state] = [p for p in paths if p.endswith(".yaml")]
    texts = {p: (ws / p).read_text(encoding="utf-8") for p in paths}

    def sprint_and_stories(texts: dict[str, str] = texts) -> object:
        return [yamlsubset.nested(t) if p.endswith(".yaml") else bmad.story_status(t)
                for p, t in texts.items()]

    cases.append(("bmad (largest story file + sprint)", state, str(ws), sprint_and_stories,
                  sum(len(t.encode()) for t in texts.values())))
    big = _largest([e for e in realworld4.entries("gsd") if str(e["path"]).endswith("STATE.md")])
    ws = root / "gsd"
    paths = realworld4.lay_out_commit(big, ws)
    state_text = (ws / gsd.STATE).read_text(encoding="utf-8")
    roadmap = (ws / gsd.ROADMAP).read_text(encoding="utf-8") if gsd.ROADMAP in paths else ""

    def state_and_roadmap(s: str = state_text, r: str = roadmap) -> object:
        end = s.find("\n---", 3)
        return yamlsubset.nested(s[4:end], 2), gsd.position(s[end + 4 :]), gsd.Roadmap(r)

    cases.append(("gsd (largest STATE.md + ROADMAP.md)", gsd.STATE, str(ws), state_and_roadmap,
                  len(state_text.encode()) + len(roadmap.encode())))
    return cases


def _time(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=41)
    args = parser.parse_args()
    if not (realworld4.CORPUS / "MANIFEST.json").is_file():
        sys.exit(f"bench_md_formats: no corpus at {realworld4.CORPUS}")
    with tempfile.TemporaryDirectory(prefix="storyd-md-formats-") as root:
        cases = _cases(Path(root))
        options = Options()
        samples: dict[str, tuple[list[float], ...]] = {c[0]: ([], [], []) for c in cases}
        claude = next(c for c in cases if c[0].startswith("claude-tasks"))
        floor, floors = _claude_floor(claude[2]), []
        files_alone, read_and_parse = _claude_read_and_parse(claude[2]), []
        for _name, relpath, ws, alone, _ in cases:  # warm: imports, the registry
            resume_unit(ws, relpath, None, options)
            alone()
        for _ in range(args.reads):
            for name, relpath, ws, alone, _ in cases:
                adapter = adapter_for(relpath)
                samples[name][0].append(_time(lambda a=adapter, w=ws, r=relpath:
                                              a.load(Source(w), r)))
                samples[name][1].append(_time(alone))
                samples[name][2].append(_time(lambda w=ws, r=relpath:
                                              resume_unit(w, r, None, options)))
                if name == claude[0]:
                    floors.append(_time(floor))
                    read_and_parse.append(_time(files_alone))
    print(f"direct read vs parsing alone, {args.reads} interleaved reads, medians (and "
          "minimums, steadier on a shared machine)")
    print("| format | file | bytes | direct ms | parse alone ms | ratio | ratio of minimums "
          "| with envelope ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, relpath, _, _, size in cases:
        direct, alone, whole = (statistics.median(s) * 1000 for s in samples[name])
        low = min(samples[name][0]) / min(samples[name][1])
        print(f"| {name} | {relpath} | {size:,} | {direct:.2f} | {alone:.2f} | "
              f"{direct / alone:.2f}x | {low:.2f}x | {whole:.2f} |")
    alone = samples[claude[0]][1]
    print(f"\nclaude-tasks floor (4 system calls per file + storyd's JSON parser): "
          f"{statistics.median(floors) * 1000:.2f} ms, "
          f"{statistics.median(floors) / statistics.median(alone):.2f}x "
          f"(ratio of minimums {min(floors) / min(alone):.2f}x)")
    direct = samples[claude[0]][0]
    print(f"claude-tasks read and parse alone (open, read, close, json.loads per file): "
          f"{statistics.median(read_and_parse) * 1000:.2f} ms; the direct read "
          f"{statistics.median(direct) / statistics.median(read_and_parse):.2f}x of it "
          f"(ratio of minimums {min(direct) / min(read_and_parse):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
