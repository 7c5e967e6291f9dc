"""lakewarden services: one process per service (``services/<name>/``), built on the shared
scaffolding in ``lakewarden_services._common``. Installed by the ``services`` extra
(``pip install 'lakewarden[services]'``); each has a console script, ``lakewarden-<name>``."""

from lakewarden.extras import require_extra

# Before any service module imports prometheus_client or confluent_kafka.
require_extra("services", "Running the lakewarden services")
