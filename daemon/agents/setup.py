"""The agents' side of `storyd install` and `storyd uninstall`: `--claude`, `--cursor`,
`--vscode`, `--codex`, `--gemini` (hooks and MCP server in each agent's files:
storyd.agents.installs) and `--skill` (the seed skill's drop-in)."""

from __future__ import annotations

import contextlib
import os

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


def _skill(project: str | None, dry_run: bool, remove: bool) -> list[str]:
    from storyd.agents.skill import skill_path, skill_text

    path = skill_path(project)
    try:
        with open(path, encoding="utf-8") as handle:
            old: str | None = handle.read()
    except FileNotFoundError:
        old = None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorydError(f"cannot read {path}: {exc}") from None
    prefix = "would: " if dry_run else ""
    if remove:
        if old is None or "storyd install --skill" not in old:
            return [f"{path}: {'absent' if old is None else 'not written by storyd; left'}"]
        if not dry_run:
            os.unlink(path)
            with contextlib.suppress(OSError):  # the folder holds other files: keep it
                os.rmdir(os.path.dirname(path))
        return [f"{path}: {prefix}removed"]
    resume = os.path.join(os.path.dirname(_storyd()), "storyd-resume")
    text = skill_text(resume)
    if old == text:
        return [f"{path}: unchanged"]
    if not dry_run:
        from storyd.api.reconcile.atomic import replace

        os.makedirs(os.path.dirname(path), exist_ok=True)
        replace(path, text.encode("utf-8"), hooked=False)
    return [f"{path}: {prefix}{'wrote' if old is None else 'updated'} the skill"]


def chosen(flags: dict[str, object]) -> list[str]:
    """The agents named by flags, in a fixed order."""
    from storyd.agents.installs import AGENTS

    return [agent for agent in AGENTS if flags.get(agent)]


def install(flags: dict[str, object]) -> int:
    """`storyd install --claude|--cursor|--vscode|--codex|--gemini|--skill [--project DIR]
    [--dry-run]`. A project install names `storyd` from PATH (guarded), a user install
    this machine's storyd by absolute path."""
    from storyd.agents import installs

    project, dry_run = _project(flags), bool(flags.get("dry-run"))
    lines: list[str] = []
    for agent in chosen(flags):
        storyd = None if project is not None else _storyd()
        lines += [str(c) for c in installs.install(agent, storyd, project, dry_run)]
    if flags.get("skill"):
        lines += _skill(project, dry_run, remove=False)
    print("\n".join(lines))
    return 0


def uninstall(flags: dict[str, object]) -> int:
    """`storyd uninstall --claude|--cursor|--vscode|--codex|--gemini|--skill [--project DIR]
    [--dry-run]`: only storyd's entries go; a file as storyd left it gets its old text."""
    from storyd.agents import installs

    project, dry_run = _project(flags), bool(flags.get("dry-run"))
    lines: list[str] = []
    for agent in chosen(flags):
        lines += [str(c) for c in installs.uninstall(agent, project, dry_run)]
    if flags.get("skill"):
        lines += _skill(project, dry_run, remove=True)
    print("\n".join(lines))
    return 0
