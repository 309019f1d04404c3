"""Where storyd's own formats keep their files, declared apart from the formats' modules.

Each table is the entry point of its format in the group `storyd.format_paths`
(daemon/entry_points.txt) and says, without importing the format (storyd.core.formats.
declared reads it):

    roots       the folders its `find` walks (the adapter's `roots`, the same tuple)
    files       patterns every one of its state files fits (`matches` true: fits one)
    companions  patterns every other file its `owner` maps to a state file fits

A pattern's `/`-separated segments are names, `*` (any one name) or, last, `**` (any
path below). tests/test_registry.py holds each table to its adapter.
"""

from __future__ import annotations

__all__ = [
    "AUTODEV", "BACKLOG_MD", "BEADS", "CHECKPOINT", "EPIC", "EXECPLAN", "ISSUE_PLAN", "KIRO",
    "OPENSPEC", "SESSION", "SPEC_KIT", "TASK_MASTER",
]  # fmt: skip

EPIC = {
    "roots": ("plans", "docs/stories"),
    "files": ("plans/*/execution-state.json", "docs/stories/*/execution-state.json"),
    "companions": ("plans/**", "docs/stories/**"),
}
SESSION = {
    "roots": ("agent-output",),
    "files": ("agent-output/*/00-session-state.json",),
    "companions": ("agent-output/*/**",),
}
ISSUE_PLAN = {
    "roots": (".claude/plans",),
    "files": (".claude/plans/*/execution-state.json",),
    "companions": (".claude/plans/*/journal.md", ".claude/plans/*/tasks.md"),
}
AUTODEV = {
    "roots": ("_docs",),
    "files": ("_docs/_autodev_state.md",),
    "companions": ("_docs/**",),
}
CHECKPOINT = {
    "roots": ("memory",),
    "files": ("memory/state/phase.json",),
    "companions": ("memory/state/*", "memory/reports/**"),
}
SPEC_KIT = {"roots": ("specs",), "files": ("specs/*/tasks.md",)}
KIRO = {"roots": (".kiro/specs",), "files": (".kiro/specs/*/tasks.md",)}
TASK_MASTER = {
    "roots": (".taskmaster/tasks", "tasks"),
    "files": (".taskmaster/tasks/tasks.json", "tasks/tasks.json"),
    "companions": (".taskmaster/state.json",),
}
BEADS = {"roots": (".beads",), "files": (".beads/issues.jsonl", ".beads/metadata.json")}
OPENSPEC = {
    "roots": ("openspec/changes",),
    "files": ("openspec/changes/*/tasks.md", "openspec/changes/archive/*/tasks.md"),
}
BACKLOG_MD = {
    "roots": ("backlog",),
    "files": ("backlog/config.yml",),
    "companions": ("backlog/tasks/**", "backlog/completed/**"),
}
EXECPLAN = {
    "roots": (".agent", "plans", "docs/plans", "docs/exec-plans", "docs/execplans"),
    "files": (".agent/plans/*", ".agent/execplans/*", "plans/*", "docs/plans/*",
              "docs/exec-plans/*", "docs/exec-plans/*/*", "docs/execplans/*"),
}

__all__ += ["CLAUDE_TASKS"]
CLAUDE_TASKS = {
    "roots": (".claude/tasks",),
    "files": (".claude/tasks/*", ".claude/tasks/*/*"),
}

__all__ += ["BMAD", "GSD"]
BMAD = {
    "roots": ("_bmad-output/implementation-artifacts", "docs"),
    "files": ("_bmad-output/implementation-artifacts/sprint-status.yaml",
              "docs/sprint-status.yaml", "docs/sprint-artifacts/sprint-status.yaml",
              "docs/implementation-artifacts/sprint-status.yaml",
              "docs/bmad/process/sprint-status.yaml"),
    "companions": ("_bmad-output/implementation-artifacts/*",
                   "_bmad-output/implementation-artifacts/stories/*", "docs/*",
                   "docs/stories/*", "docs/sprint-artifacts/*", "docs/sprint-artifacts/stories/*",
                   "docs/implementation-artifacts/*", "docs/implementation-artifacts/stories/*",
                   "docs/bmad/process/*", "docs/bmad/process/stories/*"),
}
GSD = {
    "roots": (".planning",),
    "files": (".planning/STATE.md",),
    "companions": (".planning/**",),
}
