"""Many machines, one view: unit summaries and events published to NATS JetStream.

Optional (`pip install 'storyd[fleet]'`, the nats-py client) and off unless the
configuration has a `[fleet]` table. Nothing here imports `nats` at module level: only
the publisher's thread and the `storyd fleet` readers do.

    config.py     [fleet]: the Fleet values and their checker
    names.py      bucket, stream, subjects and keys (one spelling of each)
    summary.py    what leaves the machine: a unit's summary and an event, whitelisted
    backlog.py    the bounded backlog of events waiting for the server
    connect.py    nats.connect options from [fleet] (credentials, TLS), and error lines
    publisher.py  the publishing thread with its own asyncio loop
    sink.py       attach(): the daemon's sink feeding the publisher, and its stats
    reader.py     what `storyd fleet status|events` read from the server
    view.py       `fleet status` rendering and the cross-machine flags
    claims_kv.py  claims across machines: the `storyd-claims` bucket (issue 45)
    claims_repo.py  a workspace's repository name, one for every clone (the claims' key)

See docs/fleet.md.
"""
