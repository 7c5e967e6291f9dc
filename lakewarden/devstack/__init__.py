"""The local stack: a real Kafka broker, a real S3 endpoint and the services, on 127.0.0.1.

Used by ``lakewarden dev up|down|status`` and by the test fixtures in ``tests/conftest.py``.
Each part is a background process with a pid file and a log file in its state folder, started
in its own process group and stopped by pid (SIGTERM, then SIGKILL).
"""

from lakewarden.devstack.config import DevSettings
from lakewarden.devstack.errors import DevStackError
from lakewarden.devstack.kafka import KafkaBroker
from lakewarden.devstack.s3 import SeaweedS3
from lakewarden.devstack.services import SERVICES, ServiceSpec
from lakewarden.devstack.stack import DevStack, PartHealth

__all__ = [
    "SERVICES",
    "DevSettings",
    "DevStack",
    "DevStackError",
    "KafkaBroker",
    "PartHealth",
    "SeaweedS3",
    "ServiceSpec",
]
