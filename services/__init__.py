"""lakewarden services: one faust-streaming app per service (``services/<name>/``), built on
the shared scaffolding in ``lakewarden_services._common``."""
