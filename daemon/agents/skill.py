"""`storyd install --skill`: the seed skill `x-internal-story-resume` as a SKILL.md that
calls `storyd-resume`, so an orchestrator switches by replacing one file.

The contract stays the seed's: the same two flags (`--story-id`, `--epic-id`, both
`--key value` and `--key=value`), the same one-line envelope on stdout, the same exit
codes (0, 1, 2, 64), nothing on stdout on a non-zero exit.
"""

from __future__ import annotations

import os

__all__ = ["MARK", "NAME", "skill_path", "skill_text"]

NAME = "x-internal-story-resume"
MARK = b"storyd install --skill"  # in every SKILL.md storyd wrote (uninstall takes only those)

_TEXT = """\
---
name: x-internal-story-resume
description: >-
  Detects the resumable state of an in-flight story from
  plans/epic-XXXX/execution-state.json and emits one JSON line {resumePoint,
  tasksCompleted, tasksPending, lastCommitSha, staleWarnings}. Read-only.
  Answered by storyd (storyd-resume), checked against git.
visibility: internal
user-invocable: false
allowed-tools: Bash
---

> 🔒 **INTERNAL SKILL**: invoked by orchestrators (x-story-implement Phase 0 resume
> detection), not by a person typing in chat. Written by `storyd install --skill`;
> `storyd uninstall --skill` removes it.

## Invocation

    Skill(skill: "x-internal-story-resume",
          args: "--story-id story-0049-0013 --epic-id 0049")

| Parameter | Required | Description |
| :--- | :--- | :--- |
| --story-id <id> | M | story-XXXX-YYYY (normalised to lowercase) |
| --epic-id <id> | M | the epic, zero-padded to 4 digits (resolves plans/epic-XXXX/) |

Both `--key value` and `--key=value` are accepted; an unknown or missing flag exits 64.

## Run

Run this from the workspace root, with `$ARGUMENTS` replaced by the arguments you were
given (each one a separate word, as given), and pass its stdout on unchanged:

```bash
@STORYD_RESUME@ $ARGUMENTS
```

`storyd-resume` asks the storyd daemon (microseconds, through its socket) and, when no
daemon runs, reads the state file directly under the writers' shared `flock`. The
answer is the same either way.

## Output

On exit 0, one JSON line on stdout:

    {"resumePoint":"phase-2-task-4","tasksCompleted":[{"id":"TASK-0049-0013-001","commitSha":"abc123"}],"tasksPending":["TASK-0049-0013-004"],"lastCommitSha":"abc123","staleWarnings":[]}

`resumePoint` is the branching signal: `fresh-start`, `all-done` or `phase-2-task-<N>`
(N: the 1-based position of the first task not DONE). Unknown task statuses print
`warn: unknown status '<value>' for task <id>; treated as PENDING` on stderr.

## Exit codes

| Code | Meaning | stderr |
| :--- | :--- | :--- |
| 0 | envelope printed | — |
| 1 | state file absent | execution-state.json not found |
| 2 | story not in the state file | Story not in execution-state.json |
| 64 | unknown or malformed flag | the usage line |
| 65 | the state file is not valid JSON or not the expected shape | file, line and column |
| 75 | a writer held the lock past 5 s | — |

Nothing is written to stdout on a non-zero exit.
"""


def skill_path(project: str | None) -> str:
    """Where the SKILL.md goes: `<DIR>/.claude/skills/...` or the user's `~/.claude/skills/...`."""
    base = os.path.realpath(project) if project is not None else os.path.expanduser("~")
    return os.path.join(base, ".claude", "skills", NAME, "SKILL.md")


def skill_text(storyd_resume: str) -> str:
    """The SKILL.md, calling this `storyd-resume` (shell-quoted)."""
    import shlex

    return _TEXT.replace("@STORYD_RESUME@", shlex.quote(storyd_resume))
