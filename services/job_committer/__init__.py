"""job-committer: the manifest committer protocol as a service, and the table commit after it.

    python -m lakewarden_services.job_committer

Spark drivers (``lakewarden.clients.CommitClient``) send ``JobCommitRequest`` events to
``job.requests`` keyed by table id; the service runs the job commit of the accepted task
attempts and completes the instant (``lakewarden.table.job_commit.commit_instant``, the same
function an in-process write runs), or rolls it back, and answers with a ``JobCommitResult``
on ``job.results``. It also reads ``task.manifests``: the audit trail, early validation, and
the manifests the events carry, which it holds (``held``) so that a job commit loads them
without reading storage (checked against one listing of the saved manifests). It publishes
the timeline entries it appends to ``timeline`` and, once it has answered, the Delta version
of a table that publishes one.

``protocol`` holds the record conversions, ``held`` the announced manifests, ``worker`` the
blocking commit, ``pools`` the committer threads the commits share, ``handler`` what is done
with one event, ``loop`` the Kafka loop (commits on one lane, manifests on another, so neither
waits for the other), ``app`` the declarations, ``metrics`` the Prometheus metrics. Tests
crash it at the fault points of ``lakewarden.faults`` (``LAKEWARDEN_FAULT_PLAN``).

It keeps no state of its own: the state that matters is in storage (the timeline, the saved
manifests and the job's ``_SUCCESS``), so a restarted or rebalanced instance needs nothing but
the requests it has not answered, which Kafka redelivers (offsets are committed only past
answered requests); the manifests held from events are a cache it may lose.
"""
