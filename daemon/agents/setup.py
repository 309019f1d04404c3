"""The agents' side of `storyd install` and `storyd uninstall`: `--claude` (hooks and
MCP server in Claude Code's settings) and `--skill` (the seed skill's drop-in)."""

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


def install(flags: dict[str, object]) -> int:
    """`storyd install --claude|--skill [--project DIR] [--dry-run]`."""
    from storyd.agents import claude_settings

    project, dry_run = _project(flags), bool(flags.get("dry-run"))
    lines: list[str] = []
    if flags.get("claude"):
        lines += [str(c) for c in claude_settings.install(_storyd(), project, dry_run)]
    if flags.get("skill"):
        lines += _skill(project, dry_run, remove=False)
    print("\n".join(lines))
    return 0


def uninstall(flags: dict[str, object]) -> int:
    """`storyd uninstall --claude|--skill [--project DIR] [--dry-run]`."""
    from storyd.agents import claude_settings

    project, dry_run = _project(flags), bool(flags.get("dry-run"))
    lines: list[str] = []
    if flags.get("claude"):
        lines += [str(c) for c in claude_settings.uninstall(project, dry_run)]
    if flags.get("skill"):
        lines += _skill(project, dry_run, remove=True)
    print("\n".join(lines))
    return 0
