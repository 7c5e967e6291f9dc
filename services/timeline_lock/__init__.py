"""timeline-lock: per-table leases with fencing tokens, served over Kafka.

    python -m lakewarden_services.timeline_lock

Clients (``lakewarden.clients.LockClient``) send ``LockRequest`` events to ``lock.requests``
keyed by table id and read ``LockReply`` events from one partition of ``lock.replies``.
``state`` holds the lock logic (pure), ``protocol`` the record conversions, ``handler`` what is
done with each request and on each expiry tick, ``loop`` the confluent-kafka loop, ``app`` the
declarations (topics, the compacted changelog of the locks).
"""
