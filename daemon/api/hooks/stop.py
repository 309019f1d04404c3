"""`storyd hook stop`: hold a stop while the session left a state file behind git.

For Claude Code's and Codex's Stop and SubagentStop, VS Code's Stop, Cursor's stop and
Gemini's AfterAgent. It blocks (in the agent's shape: storyd.api.hooks.payload) when a unit
of the workspace has a finding whose code is in `[hooks] block_stop_on` (by default: a
commit names a task still pending, a journal completed what the state calls in progress,
a checkpoint's output exists while the state says running) AND the session made that
lag: the state file (or a file its units are read from) changed since the session began,
or the commit the finding names landed after it (storyd.api.sessions keeps where it
began). Older lag is not the session's: session-start's context already told the agent.
A state file that no longer parses holds nothing back (with or without the daemon,
whose last good units of it are `stale`): the post-tool-use hook told the agent.
Never in plan mode, for a read-only subagent, or a second time (`stop_hook_active`,
Cursor's `loop_count`). The reason names each task, its evidence and the fix, printed
with the absolute path of the storyd running the hook, so it runs with any PATH.

Claims: a `claim-lost` the session's post-tool-use found (it wrote a unit's state while
another owner held the current grant) holds the stop too, once per record, whenever
`block_stop_on` is not empty; only when a claims database exists.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.api.hooks.hookio import Trust
    from storyd.api.hooks.payload import Hook
    from storyd.config import Config

__all__ = ["codes", "lagging", "reason"]

_EVIDENCE = ("commit", "journal", "output")  # evidence keys worth naming, in this order
Lag = tuple[dict[str, object], dict[str, object]]


def codes(cfg: Config) -> frozenset[str]:
    """The finding codes a stop can be held for (`[hooks] block_stop_on`): the only ones
    it reads, so a direct scan runs only the detectors that declare one of them."""
    return frozenset(cfg.hooks.block_stop_on)


def _fix(storyd: list[str], workspace: str, unit: dict[str, object], code: str) -> str:
    from storyd.core.words import shell_join  # shlex.join without shlex's `re`

    argv = [
        *storyd, "reconcile", "--apply", "--workspace", workspace,
        "--state-file", str(unit.get("stateFile")), "--unit", str(unit.get("unit")),
        "--only", code,
    ]  # fmt: skip
    return shell_join(argv)


def _claim_fix(storyd: list[str], workspace: str, finding: dict[str, object]) -> str:
    from storyd.core.words import shell_join

    argv = [*storyd, "claims", "--workspace", workspace]
    return (f"{finding.get('holder')} holds it: check with {shell_join(argv)}, then undo "
            "your write to that unit or agree with the holder")


def reason(workspace: str, lags: list[Lag], storyd: list[str] | None = None) -> str:
    """The block's reason: each lagging task, its evidence and the command that fixes it."""
    lines = [
        f"storyd: this session left the state file behind git in {workspace}; record the "
        "work before you stop (or the next session resumes from the wrong task):"
    ]
    for unit, finding in lags:
        task = f" task {finding['task']}" if finding.get("task") else ""
        lines.append(
            f"- {unit.get('stateFile')} {unit.get('unit')}{task}: "
            f"{finding.get('detector')}/{finding.get('code')}: {finding.get('message')}"
        )
        evidence = finding.get("evidence")
        if isinstance(evidence, dict):
            named = [f"{k} {evidence[k]}" for k in _EVIDENCE if evidence.get(k)]
            if named:
                lines.append(f"  evidence: {', '.join(named)}")
        if finding.get("code") == "claim-lost":
            fix = _claim_fix(storyd or ["storyd"], workspace, finding)
        else:
            fix = _fix(storyd or ["storyd"], workspace, unit, str(finding.get("code")))
        lines.append(f"  fix: {fix}")
    lines.append("(or, with storyd's MCP server connected, its reconcile_apply tool)")
    return "\n".join(lines)


def _landed_after(workspace: str, commit: object, head: object) -> bool:
    """Whether `commit` is not in the history HEAD had when the session began."""
    if not isinstance(commit, str) or not commit:
        return False
    if not isinstance(head, str) or not head:
        return True  # no commit at the start: every commit is the session's
    if commit == head:
        return False  # what git answers for a commit and itself (or for no commit at all)
    import subprocess  # (2 ms of imports) only when git must be asked

    from storyd.core.children import group  # git ends with this process

    try:
        done = subprocess.run(
            ["git", "-C", workspace, "merge-base", "--is-ancestor", commit, head],
            capture_output=True, timeout=5, check=False, process_group=group(),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 1


def _made_here(record: dict[str, object], workspace: str, lag: Lag) -> bool:
    from storyd.api import sessions

    unit, finding = lag
    if sessions.changed_since_start(record, str(unit.get("stateFile"))):
        return True
    evidence = finding.get("evidence")
    commit = evidence.get("commit") if isinstance(evidence, dict) else None
    return _landed_after(workspace, commit, record.get("head"))


def lagging(hook: Hook, trust: Trust, cfg: Config,
            units: Callable[[str], list[dict[str, object]]]) -> tuple[str, list[Lag]] | None:
    """(workspace, the lag this session made) when the stop must be held, else None."""
    from storyd.api import sessions
    from storyd.api.hooks import hookio

    block_on = codes(cfg)
    if hook.session is None:
        return None
    workspace = hookio.find_workspace(hook.folder, trust)
    if workspace is None:
        return None
    record = sessions.load(hook.session)
    event = "subagent-stop" if hook.name == "SubagentStop" else "stop"
    if record is None or record.get("workspace") != workspace:
        record = sessions.begin(hook.session, workspace, agent=hook.agent,
                                checked=bool(block_on))  # fmt: skip
        sessions.mark(record, event)
        sessions.save(record)
        return None  # where the session began is unknown: the lag is not proven its own
    sessions.keep(record, sessions.mark(record, event))
    if hook.continued or hook.quiet or not block_on:
        return None
    lags = [
        (unit, finding)
        for unit in units(workspace)
        if not unit.get("stale")  # the last good units of a file that no longer parses
        for finding in unit.get("findingList") or []  # type: ignore[attr-defined]
        if isinstance(finding, dict) and finding.get("code") in block_on
    ]
    made = [lag for lag in lags if _made_here(record, workspace, lag)]
    made += _claims_lost(hook.session, workspace)
    return (workspace, made) if made else None


def _claims_lost(session: str, workspace: str) -> list[Lag]:
    """The session's `claim-lost` records no stop blocked on yet, as lags."""
    from storyd.api.claims_path import ever_claimed

    if not ever_claimed():
        return []
    from storyd.api import claims
    from storyd.core.errors import StorydError

    try:
        found = claims.lost(owner=claims.default_owner(session), workspace=workspace,
                            untold=True)  # fmt: skip
    except StorydError:
        return []
    return [({"stateFile": lost["stateFile"], "unit": lost["unit"]},
             {"detector": "claims", **lost}) for lost in found]  # fmt: skip
