"""publisher: publishes the Delta Lake log of the tables it owns (``lakewarden.publish``), a
plain confluent-kafka loop service with the cleaner's runtime (``_common.table_loop``).

Tables are split between the instances of one consumer group by table id. A table's URI is
learned from the registrations writers send on ``clean.requests`` (a ``CleanRequest`` names
it; writers register every table they write to) and kept in the changelogged ``tables``
registry, partitioned like that topic, so the instance owning the partition owns the table
and reads its registration back when it is assigned the partition.
What makes an instance publish a table:

- a ``TimelineTransition`` whose transition is ``completed`` (a new Delta version is due);
- a registration (the table may have versions to catch up);
- the periodic sweep of every table the instance owns (a lost event costs one sweep).

Work is queued per table (events for a queued table merge into its one entry) and run on a
pool of worker threads, up to ``LAKEWARDEN_PUBLISHER_CONCURRENCY`` tables at once (default 8:
a sync mostly waits on storage) and never one table twice at once: ``DeltaPublisher.sync``,
which writes versions
create-if-absent and in order, so an event delivered twice, a rebalance, or two instances
publishing one table at once write one log. Tables with publishing off are skipped.

Modules: ``protocol`` (events -> triggers), ``handler`` (what to do with one event, and the
queue), ``worker`` (one table's sync), ``loop`` (the Kafka loop), ``app`` (settings,
topics), ``settings``, ``metrics``.
"""
