"""The long-running daemon: `storyd serve` (daemon/cli/commands/serve.py) and nothing else
imports this package (tests/test_house.py holds the rule).

The flow, from the disk to the socket; assembly.py builds every part, in this order:

    watcher.Watcher      watchdog events  ─┐
    refresher.Refresher  the one thread that reads files into the cache, debounced
    engine.Engine        the cache of pre-rendered answers, composed of one part per job:
      reads.Reads            a file read now, under its lock; its last good read
      install.Installer      a file's new snapshot, built aside and installed at once
      forward.Forwarder      what changed, as unit events on the event log (events.py)
      workspaces.Workspaces  the tracked workspaces and the passes over them
      queries.Queries        what the ops read from the cache
    service.Daemon       workspaces, warm-up, direct reads for misses (a thread pool)
      misses                 what a miss answers from: the asked unit, the freshest parse
    ops.Server           what each request reads and answers (protocol.py's bytes)
    transport.Transport  the socket: framing, ordering, back-pressure, peers
      subscribers            the event subscriptions it owns (Transport.subscribe)
      bind                   the socket's folder, the single-instance lock, bind_socket
    runtime.Runtime      one run: signals, systemd (systemd.py), reload, shutdown
    notify               drift and resolved events to the log, the desktop, a hook
    reconciler           the reconcile op's plan, auto-apply, `reconciled` events
    fleet_sink           the fleet's sink (the `fleet` extra)
    fastjson             orjson behind the JSON reader

Nothing here is on the `storyd resume` path (tests/test_resume_imports.py): the top
level of `daemon` is that path and the plugin API (`storyd.core.model`, `storyd.core.errors`,
`storyd.core.formats`).
"""
