"""The agents' side of `storyd install` and `storyd uninstall`: `--claude`, `--cursor`,
`--vscode`, `--codex`, `--gemini` (hooks and MCP server in each agent's files:
storyd.agents.installs) and `--skill` (the seed skill's drop-in).

Every file the command touches is planned first (read through storyd.agents.guarded,
edited in memory, checked); one refused (outside the project, not a regular file, not
valid JSON, a key twice, too big) stops the command before any file is written."""

from __future__ import annotations

import contextlib
import functools
import os

from storyd.agents import guarded
from storyd.core.errors import StorydError

__all__ = ["install", "uninstall"]


def _project(flags: dict[str, object]) -> str | None:
    from storyd.core.errors import UsageError

    project = flags.get("project")
    if project is None:
        return None
    path = os.path.realpath(os.path.expanduser(str(project)))
    if not os.path.isdir(path):
        raise UsageError(f"--project {project}: not a folder")
    return path


def _storyd() -> str:
    from storyd.core.paths import storyd_executable

    found = storyd_executable()
    if found is None:
        raise StorydError("cannot find the `storyd` executable the hooks would run")
    return found


def _skill(project: str | None, remove: bool) -> guarded.Planned:
    """Writing the SKILL.md (or removing the one storyd wrote), planned."""
    from storyd.agents.skill import MARK, skill_path, skill_text

    path = skill_path(project)
    real = guarded.resolve(path, project)
    text = None if remove else skill_text(os.path.join(os.path.dirname(_storyd()), "storyd-resume"))

    def compute(raw: bytes | None) -> tuple[bytes | None, guarded.Outcome]:
        if text is not None:
            wanted = text.encode("utf-8")
            if raw == wanted:
                return raw, guarded.Outcome(["unchanged"], changed=False)
            what = "wrote the skill" if raw is None else "updated the skill"
            return wanted, guarded.Outcome([what])
        if raw is None or MARK not in raw:
            why = "absent" if raw is None else "not written by storyd; left"
            return raw, guarded.Outcome([why], changed=False)
        return None, guarded.Outcome(["removed"], after=functools.partial(_rmdir, real))

    return guarded.Planned(path, real, guarded.read(real, path), compute)


def _rmdir(real: str) -> None:
    with contextlib.suppress(OSError):  # the folder holds other files: keep it
        os.rmdir(os.path.dirname(real))


def chosen(flags: dict[str, object]) -> list[str]:
    """The agents named by flags, in a fixed order."""
    from storyd.agents.installs import AGENTS

    return [agent for agent in AGENTS if flags.get(agent)]


def _run(flags: dict[str, object], installing: bool) -> int:
    """Plan every file, then (unless --dry-run) commit each; print what each did."""
    from storyd.agents.installs import plan

    project, dry_run = _project(flags), bool(flags.get("dry-run"))
    planned: list[guarded.Planned] = []
    for agent in chosen(flags):
        storyd = None if project is not None or not installing else _storyd()
        planned += plan(agent, storyd, project, installing)
    if flags.get("skill"):
        planned.append(_skill(project, remove=not installing))
    lines = [line for p in planned for line in (p.preview() if dry_run else p.commit())]
    if installing and flags.get("codex"):
        lines += _codex_step(project, dry_run)
    print("\n".join(lines))
    return 0


def _codex_step(project: str | None, dry_run: bool) -> list[str]:
    """After `install --codex`: what the user must still do before Codex runs the hooks
    (nothing once its config.toml shows every one trusted)."""
    from storyd.agents.codex_trust import read, step
    from storyd.agents.installs import AGENTS

    found = read(project)
    if not found.total:  # a dry run's hooks, not written yet: each one new
        found.untrusted = [event for event, *_ in AGENTS["codex"].events]
    if found.runs:
        return []
    then = "would then: " if dry_run else ""
    return [f"{found.hooks_path}: {then}{step(found)} (storyd doctor shows what is left)"]


def install(flags: dict[str, object]) -> int:
    """`storyd install --claude|--cursor|--vscode|--codex|--gemini|--skill [--project DIR]
    [--dry-run]`. A project install names `storyd` from PATH (guarded), a user install
    this machine's storyd by absolute path."""
    return _run(flags, installing=True)


def uninstall(flags: dict[str, object]) -> int:
    """`storyd uninstall --claude|--cursor|--vscode|--codex|--gemini|--skill [--project DIR]
    [--dry-run]`: only storyd's entries go; a file as storyd left it gets its old text."""
    return _run(flags, installing=False)
