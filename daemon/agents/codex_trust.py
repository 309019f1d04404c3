"""Whether Codex will run storyd's hooks: the trust Codex records in the user's config.toml.

Codex runs a hook that no admin manages only once the user has reviewed and trusted it
(https://developers.openai.com/codex/hooks, "Review and trust hooks": `/hooks` in the
CLI; until then the hook is skipped without a word). It records that trust in the
user's config.toml (`$CODEX_HOME/config.toml`, else `~/.codex/config.toml`):

    [hooks.state."/home/me/.codex/hooks.json:post_tool_use:0:0"]
    trusted_hash = "sha256:..."     # the definition the user trusted
    enabled = false                 # a hook the user turned off

keyed by the hooks file's absolute path, the event's snake_case label and the handler's
place: its group's index in the event's list, its own index in the group (openai/codex,
codex-rs/hooks/src/engine/discovery.rs and lib.rs `hook_key`). A project's
`.codex/hooks.json` is loaded only once the project is trusted (`[projects."<path>"]
trust_level = "trusted"`), and its hooks' trust is kept in the user's file too (a
project's own `[hooks.state]` is ignored).

storyd reads this and never writes it: trusting is the user's review. The hash is
Codex's over the hook's definition, so a hook storyd changed after the user trusted it
(installed from another venv) is recorded as trusted here and shown as modified in
`/hooks`; storyd does not recompute Codex's hash, and says so.
"""

from __future__ import annotations

import os
import re

__all__ = ["Trust", "read", "step"]

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class Trust:
    """storyd's Codex hooks in one scope and what Codex's config.toml says of each.

    hooks_path  the hooks.json holding them
    total       how many storyd handlers it holds
    untrusted   the events of those with no trust recorded
    disabled    the events of those the user turned off
    project     for a project: whether Codex trusts the project (None: the user's files)
    """

    __slots__ = ("disabled", "hooks_path", "project", "total", "untrusted")

    def __init__(self, hooks_path: str, total: int, untrusted: list[str],
                 disabled: list[str], project: bool | None) -> None:  # fmt: skip
        self.hooks_path = hooks_path
        self.total = total
        self.untrusted = untrusted
        self.disabled = disabled
        self.project = project

    @property
    def runs(self) -> bool:
        """Whether Codex runs every storyd hook here (as far as its config.toml shows)."""
        return not self.untrusted and not self.disabled and self.project is not False


def _label(event: str) -> str:
    """Codex's key label of an event: PostToolUse -> post_tool_use."""
    return _CAMEL.sub("_", event).lower()


def _ours(hooks_path: str, project: str | None) -> list[tuple[str, int, int]]:
    """(event, group index, handler index) of every storyd handler in a Codex hooks.json."""
    from storyd.agents.installs import ours
    from storyd.agents.settings_file import SettingsFile

    hooks = (SettingsFile(hooks_path, project).load().data or {}).get("hooks")
    found: list[tuple[str, int, int]] = []
    for event, groups in hooks.items() if isinstance(hooks, dict) else ():
        for gi, group in enumerate(groups if isinstance(groups, list) else ()):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for hi, handler in enumerate(handlers if isinstance(handlers, list) else ()):
                if ours(handler):
                    found.append((event, gi, hi))
    return found


def _table(data: dict[str, object], *names: str) -> dict[str, object]:
    for name in names:
        value = data.get(name)
        if not isinstance(value, dict):
            return {}
        data = value
    return data


def _spellings(path: str) -> list[str]:
    """A path as written and as resolved: Codex keys by the one it was given."""
    return list(dict.fromkeys((path, os.path.realpath(path))))


def read(project: str | None) -> Trust:
    """What Codex's config.toml says of storyd's hooks in `project`'s (None: the user's)
    hooks.json (`total` 0: there are none). A broken file raises storyd's DataError."""
    from storyd.agents.installs import AGENTS, paths
    from storyd.agents.settings_file import TomlFile

    hooks_path = paths(AGENTS["codex"], project)[0]
    mine = _ours(hooks_path, project)
    config = TomlFile(paths(AGENTS["codex"], None)[1]).load().data
    states = _table(config, "hooks", "state")
    untrusted: list[str] = []
    disabled: list[str] = []
    for event, gi, hi in mine:
        keys = [f"{p}:{_label(event)}:{gi}:{hi}" for p in _spellings(hooks_path)]
        state = next((s for k in keys if isinstance(s := states.get(k), dict)), {})
        if state.get("enabled") is False:
            disabled.append(event)
        elif not isinstance(state.get("trusted_hash"), str):
            untrusted.append(event)
    trusted_project = None
    if project is not None:
        levels = _table(config, "projects")
        trusted_project = any(
            isinstance(entry := levels.get(p), dict) and entry.get("trust_level") == "trusted"
            for p in _spellings(project)
        )
    return Trust(hooks_path, len(mine), untrusted, disabled, trusted_project)


def step(trust: Trust) -> str:
    """What the user must still do for Codex to run storyd's hooks (one line)."""
    todo = []
    if trust.project is False:
        todo.append("trust this project when Codex asks (it loads a project's .codex/ "
                    "only then)")  # fmt: skip
    if trust.untrusted:
        count = len(trust.untrusted)
        todo.append(f"type /hooks and trust storyd's {count} new or changed "
                    f"hook{'s' if count > 1 else ''} "
                    f"({', '.join(dict.fromkeys(trust.untrusted))})")  # fmt: skip
    if trust.disabled:
        todo.append(f"turn on the ones you turned off in /hooks "
                    f"({', '.join(dict.fromkeys(trust.disabled))})")  # fmt: skip
    return "Codex runs no hook until you trust it: start codex, " + "; ".join(todo)
