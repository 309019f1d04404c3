"""The long-running daemon: `storyd serve` and nothing else imports this package.

The flow, from the disk to the socket:

    watcher.Watcher      watchdog events  ─┐
    watcher.Refresher    the one thread that reads files into the cache, debounced
    engine.Engine        the cache of pre-rendered answers, its events and replay
    service.Daemon       workspaces, warm-up, direct reads for misses (a thread pool)
    ops.Server           what each request reads and answers (protocol.py's bytes)
    transport.Transport  the socket: framing, ordering, back-pressure, peers
    runtime.Runtime      one run: systemd (systemd.py), SIGHUP reload, shutdown
    notify               drift and resolved events to the log, the desktop, a hook
    wiring               detectors and engines assembled from a configuration
    log, fastjson        structlog set-up; orjson behind the JSON reader

Nothing here is on the `storyd resume` path (tests/test_resume_imports.py): the top
level of `daemon` is that path and the plugin API (`daemon.model`, `daemon.errors`,
`daemon.formats`).
"""
