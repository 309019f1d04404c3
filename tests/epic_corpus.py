"""The real epic state files (tests/fixtures/epic-real/corpus): listing and laying out.

The story ids are read here with a few lines of our own, independently of the adapter,
so the tests compare storyd against what the files say.
"""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "fixtures" / "epic-real" / "corpus"
ENVELOPE_KEYS = ["resumePoint", "tasksCompleted", "tasksPending", "lastCommitSha", "staleWarnings"]


def manifest() -> list[dict[str, str]]:
    """Every collected version: commit, path, blob, file (in corpus/) and expect."""
    return json.loads((CORPUS / "MANIFEST.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def shape(doc: dict[str, object]) -> str:
    """The shape's name as docs/formats.md's table spells it."""
    stories = doc.get("stories")
    if isinstance(stories, dict):
        nodes = [n for n in stories.values() if isinstance(n, dict)]
        return "stories-map-tasks" if any("tasks" in n for n in nodes) else "stories-map"
    if isinstance(stories, list):
        return "stories-array"
    if isinstance(doc.get("storyStatuses"), dict):
        return "story-statuses"
    if isinstance(doc.get("storyId"), str):
        return "single-story"
    return "no-stories"


def story_ids(doc: dict[str, object]) -> list[str]:
    """The story ids a file names, in file order."""
    stories = doc.get("stories")
    if isinstance(stories, dict):
        return [k for k, v in stories.items() if v is not None and v is not False]
    if isinstance(stories, list):
        return [s["id"] for s in stories if isinstance(s, dict) and isinstance(s.get("id"), str)]
    statuses = doc.get("storyStatuses")
    if isinstance(statuses, dict):
        return list(statuses)
    story = doc.get("storyId")
    return [story] if isinstance(story, str) else []


def load(entry: dict[str, str]) -> dict[str, object]:
    """One corpus file, parsed."""
    return json.loads((CORPUS / entry["file"]).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def lay_out(entry: dict[str, str], workspace: Path, folder: str | None = None) -> str:
    """Copy one corpus file to its producer path in `workspace`; the workspace-relative path."""
    name = folder or entry["path"].split("/")[1]
    target = workspace / "plans" / name / "execution-state.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes((CORPUS / entry["file"]).read_bytes())
    return f"plans/{name}/execution-state.json"


def epic_of(path: str) -> str:
    """The epic id of a producer path: plans/epic-0024-artifact-persistence/... gives 0024."""
    return path.split("/")[1][5:].split("-", 1)[0]
