"""cleaner: cleans the tables it owns (``Table.clean``), a plain confluent-kafka loop service.

Tables are split between the instances of one consumer group by table id: a table is
registered (its URI learned) by a ``CleanRequest`` on ``clean.requests`` and kept in the
``tables`` registry, changelogged and partitioned like that topic, so the instance that owns
the partition owns the table and reads its registration back when it is assigned the
partition (nothing is forgotten on a rebalance or a restart). What makes an instance clean a
table:

- a ``CleanRequest`` (clean now, with its policy and orphan choice);
- a ``TimelineTransition`` that leaves garbage (a completed write, a rollback, an abort);
- a ``HeartbeatExpired`` (the instant is rolled back at once, dead by the monitor's word);
- the periodic sweep of every table the instance owns.

Work is queued per table (triggers for a table already queued merge into its one entry) and
run one table at a time on the clean thread. One table is never cleaned twice at once: within
an instance by the queue, across instances (a rebalance, an event delivered to a non-owner) by
the table lock and the clean instant itself (a clean is appended only when none is pending and
the log did not move since it was planned; a pending one is resumed, never re-planned).

Modules: ``protocol`` (events -> triggers), ``handler`` (what to do with one event),
``queue`` (tables waiting), ``worker`` (one table's clean), ``loop`` (the Kafka loop, the
runtime it shares with the publisher: ``_common.table_loop``), ``app`` (settings, topics),
``settings``, ``metrics``.
"""
