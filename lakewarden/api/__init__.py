"""The user-facing layer: ``Table``, the clean instant and the one factory of the
coordinator, above every package they drive.

table         ``Table`` (create, open, write, read, changes, clean, table services) and ``read``
clean         the clean instant: roll back dead writes, cancel expired plans, plan, delete,
              ``completed`` (``clean_expiry`` finds and cancels the expired plans)
connection    ``connect`` / ``shared_connection``: the coordinator from settings (the Kafka
              coordinator comes from ``lakewarden.clients``; storage from
              ``lakewarden.storage.open_storage``)

They sit here, not in ``lakewarden.table``, because they call down into the table services,
the error table, publishing and the clients, all of which build on ``lakewarden.table``; so no
import, not even one inside a function, runs back up (``tests/unit/test_import_graph.py``
lists the layers). Users reach them as ``lakewarden.Table`` / ``lakewarden.table.Table``.
"""
