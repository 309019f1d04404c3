"""State-file generators for storyd's benchmarks: realistic epic workspaces on disk.

`make_epic_workspace` writes what an orchestrator following seed 000 leaves behind:
plans/epic-XXXX/execution-state.json (pretty-printed, as jq writes it) holding
`stories.<story-id>.tasks.<task-id>` nodes with a status, a 40-hex commitSha and an
ISO-8601 completedAt, plus one plans/epic-XXXX/<story-id>.md file per story.

By default the workspace is also a git repository whose single commit (dated before
every completedAt) holds the story files, while the files' mtimes are "now". That is
a fresh clone: the seed's mtime rule flags every DONE task as stale, and storyd's git
mode answers from the commit date instead (and so runs git). Generation is
deterministic for a given seed, except for the mtimes and the commit's hash.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

__all__ = [
    "MAX_STORIES",
    "PLANNED_AT",
    "make_epic_workspace",
    "story_id",
    "task_id",
]

MAX_STORIES = 10_000  # a story id has four digits: story-XXXX-YYYY
MAX_TASKS = 999  # a task id has three: TASK-XXXX-YYYY-ZZZ
PLANNED_AT = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # when the epic was planned
_GIT_IDENTITY = ("-c", "user.name=storyd bench", "-c", "user.email=bench@storyd.invalid")


def story_id(epic: str, number: int) -> str:
    """`story-0049-0013` for epic "0049" and number 13."""
    return f"story-{epic}-{number:04d}"


def task_id(epic: str, story_number: int, number: int) -> str:
    """`TASK-0049-0013-001` for epic "0049", story 13 and task 1."""
    return f"TASK-{epic}-{story_number:04d}-{number:03d}"


def _iso(moment: datetime) -> str:
    """ISO-8601 in UTC with a Z, as the orchestrators write completedAt."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _done_count(index: int, stories: int, tasks: int, rng: random.Random) -> int:
    """How many leading tasks of a story are DONE.

    A mix: about a third of the stories all done, a sixth not started, the rest in
    flight. The middle story is always in flight (about 60% done), so a benchmark
    that queries it exercises every step of the seed (both lists, a resume point,
    a last commit and staleness).
    """
    if index == stories // 2:
        return max(1, min(tasks - 1, round(tasks * 0.6)))
    roll = rng.random()
    if roll < 1 / 3:
        return tasks
    if roll < 1 / 2:
        return 0
    return rng.randint(1, max(1, tasks - 1))


def _task_node(done: bool, first_pending: bool, finished: datetime, rng: random.Random) -> dict:
    """One task's node: DONE with sha and time, IN_PROGRESS for the first pending, else PENDING."""
    if done:
        return {
            "status": "DONE",
            "commitSha": f"{rng.getrandbits(160):040x}",
            "completedAt": _iso(finished),
        }
    return {"status": "IN_PROGRESS" if first_pending else "PENDING", "commitSha": None}


def _story_node(epic: str, number: int, *, tasks: int, done: int, start: datetime,
                rng: random.Random) -> dict:
    """One story's node with its tasks in order; DONE tasks finish 20-90 minutes apart."""
    nodes = {}
    finished = start
    for t in range(1, tasks + 1):
        finished += timedelta(minutes=rng.randint(20, 90))
        nodes[task_id(epic, number, t)] = _task_node(t <= done, t == done + 1, finished, rng)
    status = "DONE" if done == tasks else "PENDING" if done == 0 else "IN_PROGRESS"
    return {"status": status, "branch": f"feat/{story_id(epic, number)}", "tasks": nodes}


def _story_markdown(sid: str, tasks: int) -> str:
    """A short story file: a title, a goal and the task checklist."""
    lines = [f"# {sid}", "", "## Goal", "", "Carve one responsibility out of the orchestrator.", ""]
    lines += ["## Tasks", ""] + [f"- [ ] task {t:03d}" for t in range(1, tasks + 1)]
    return "\n".join(lines) + "\n"


def _numbers(stories: int) -> range:
    """Story numbers 0001.., or 0000-9999 when all 10,000 four-digit numbers are needed."""
    return range(stories) if stories == MAX_STORIES else range(1, stories + 1)


def _commit_all(workspace: Path, when: datetime) -> None:
    """`git init` and one commit of everything, authored and committed at `when`."""
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S+0000")
    env = {**os.environ, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    for args in (
        ("-c", "init.defaultBranch=main", "init", "-q"),
        ("add", "-A"),
        (*_GIT_IDENTITY, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "Plan the epic"),
    ):
        subprocess.run(["git", *args], cwd=workspace, env=env, check=True,
                       stdout=subprocess.DEVNULL)


def make_epic_workspace(
    root: str | os.PathLike[str],
    stories: int,
    tasks: int,
    epic: str = "0049",
    *,
    git: bool = True,
    seed: int = 49,
    compact: bool = False,
) -> tuple[Path, list[str]]:
    """Write a workspace with one epic of `stories` x `tasks`; return it and its story ids.

    The workspace is a new folder `epic-<epic>-<stories>x<tasks>` under `root`. The story
    ids are in file order; the middle one (`ids[len(ids) // 2]`) is in flight. With `git`,
    the workspace is a repository whose one commit predates every completedAt. With
    `compact` the state file is one line (10,000 x 5 pretty-printed is 8.8 MB, over
    the default 8 MiB state-file cap; compact, 6.3 MB).
    """
    if not 1 <= stories <= MAX_STORIES or not 1 <= tasks <= MAX_TASKS:
        msg = f"stories must be 1-{MAX_STORIES} and tasks 1-{MAX_TASKS}, got {stories}x{tasks}"
        raise ValueError(msg)
    rng = random.Random(seed)
    workspace = Path(root) / f"epic-{epic}-{stories}x{tasks}"
    folder = workspace / "plans" / f"epic-{epic}"
    folder.mkdir(parents=True)
    ids = []
    nodes = {}
    for index, number in enumerate(_numbers(stories)):
        sid = story_id(epic, number)
        ids.append(sid)
        start = PLANNED_AT + timedelta(hours=index)
        done = _done_count(index, stories, tasks, rng)
        nodes[sid] = _story_node(epic, number, tasks=tasks, done=done, start=start, rng=rng)
        (folder / f"{sid}.md").write_text(_story_markdown(sid, tasks), encoding="utf-8")
    state = {"epicId": epic, "updatedAt": _iso(PLANNED_AT + timedelta(hours=stories + 48)),
             "stories": nodes}
    text = json.dumps(state, indent=None if compact else 2, ensure_ascii=False) + "\n"
    (folder / "execution-state.json").write_text(text, encoding="utf-8")
    if git:
        _commit_all(workspace, PLANNED_AT - timedelta(days=1))
    return workspace, ids
