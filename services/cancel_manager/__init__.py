"""cancel-manager: RFC-79's cancel APIs as a service (docs/architecture.md, "cancel-manager").

A plain confluent-kafka loop (``loop``; its module doc says why not faust), its work
partitioned by table id (the key of ``cancel.requests``):

- ``CancelRequest`` (kind ``request`` or ``execute``, who, why, the table URI) ->
  ``Table.request_cancel`` / ``Table.execute_cancel`` -> the ``TimelineTransition`` of every
  entry it appended, then a ``CancelResult`` (status ``accepted``, ``already_requested``,
  ``aborted``, ``already_aborted``, ``refused_completed``, ``refused_executing``,
  ``not_cancellable``, ``not_requested``, ``unknown_instant``, ``unknown_table``,
  ``invalid_request``, ``failed``);
- ``HeartbeatExpired`` of a cancel-requested plan -> ``execute_cancel`` by itself;
- malformed events -> ``lakewarden.dlq``; the service keeps serving.

Modules: ``protocol`` (events <-> values), ``worker`` (the blocking part), ``handler`` (what
to do with one event), ``loop`` (the Kafka loop, with the ``tables`` registry of
``_common.registry``), ``app`` (settings, topics), ``metrics``.
"""
