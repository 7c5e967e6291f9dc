"""timeline-lock's decisions as pure code: the lock state of one table and its requests.

state      ``TableLock`` and ``apply``: one request applied to one table's lock (no IO, no clock
           decisions); the only implementation of the lock's rules
protocol   between decoded ``LockRequest`` events and ``state``'s values: parsing, refusals,
           the ``LockReply`` record

The service (``lakewarden_services.timeline_lock``) runs them over Kafka; ``lakewarden replay``
re-drives them over a table's recorded requests. Both import them from here, so the library
never imports the services package.
"""
