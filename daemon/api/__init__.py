"""The layer under every door: typed functions that return data and raise typed errors.

The command line, the hooks, the MCP server and the fleet view call these and render
their results; no door drives another door (docs/design.md).

    resume.py       output(argv, cwd) for `storyd resume`; ask/detail(Query) -> Resumed
    units.py        units(...) -> Units: status and list (the daemon's list, else a scan)
    check.py        check(...) -> Checked: the problems and the exit code
    epic.py         epic(workspace, epic_id) -> Epic
    reconciling.py  selection, only_codes, reconcile(...) -> Reconciled, undo
    watch.py        watch/unwatch(folders) -> a Watched per folder
    refusals.py     a daemon's ok:false answer, or an exit code, as the typed error
    render.py       text two doors print alike: bar, colours, status screen, check report
    history.py      name_unit, versions, picture, lost_progress: a unit's history (issue 33)
    history_accept.py  accept(Named): take a unit's current version as it is

Under them: client.py (the socket), answers.py and scan.py (direct reads), epicview.py,
detection.py, summaries.py, reconcile/, and history's database (history_db.py,
history_store.py), rules (history_rules.py) and git backfill (history_git.py).
"""
