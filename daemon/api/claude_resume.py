"""`storyd resume --state-file ~/.claude/tasks/<id>`: a Claude Code task list tied to the
workspace (storyd.api.claude_ties), answered by reading it now.

The daemon does not watch these lists (they are outside every workspace), so the answer
never asks it: storyd.api.resume calls `output` first for a state file under Claude
Code's `tasks/` folder, and bin/storyd-resume leaves such a query to `storyd resume`.
Only a list tied to the workspace (or the list of an agent team working there) is
answered; any other folder there is refused (exit 64), never read. The envelope is the
unit's as for any format (`--detail`: its findings and the next task, Claude Code's
rule: in progress first, else the first pending task whose blockedBy are completed).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.core.query import Output, Query

__all__ = ["output"]


def output(query: Query) -> Output | None:
    """The answer for a state file under Claude Code's `tasks/` folder; None for any
    other state file (the usual path answers it)."""
    from storyd.core.errors import StorydError
    from storyd.core.formats.claude_lists import config_dir
    from storyd.core.query import Output

    given = query.state_file
    if given is None or not os.path.isabs(given):
        return None
    folder = os.path.normpath(given)
    if os.path.dirname(folder) != os.path.normpath(os.path.join(config_dir(), "tasks")):
        return None
    try:
        return _answer(query, folder)
    except StorydError as exc:
        return Output(exc.code, b"", (exc.message,))
    except Exception as exc:  # a bug must still give a clean exit 70, never a traceback
        return Output(70, b"", (f"internal error: {type(exc).__name__}: {exc}",))


def _answer(query: Query, folder: str) -> Output:
    from storyd.api.answers import detail_line
    from storyd.api.claude_ties import tied_units
    from storyd.core.errors import UsageError
    from storyd.core.pipeline import Options, answer
    from storyd.core.query import Output

    workspace = os.path.realpath(query.workspace)
    name = os.path.basename(folder)
    unit = next((u for u in tied_units(workspace) if u.key == name), None)
    if unit is None:
        raise UsageError(f"{folder}: not a Claude Code task list tied to {workspace} "
                         "(storyd status lists them)")  # fmt: skip
    if query.unit is not None and query.unit != name:
        raise UsageError(f"unit {query.unit!r} not in {folder} (its unit is {name!r})")
    result = answer(workspace, unit, Options(query.lock_timeout, query.staleness or "mtime"))
    if query.detail:
        return Output(0, detail_line(result.envelope, result.findings, "direct", unit),
                      tuple(result.warnings))  # fmt: skip
    return Output(0, result.line, tuple(result.warnings))
