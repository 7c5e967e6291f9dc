"""Kafka refusing our credentials, as its own error.

librdkafka reports a refused SASL login asynchronously: an ``_AUTHENTICATION`` error event is
handed to the client's ``error_cb`` (served by ``poll``/``flush``) while the request that
needed the connection times out later as a generic "Broker transport failure". Without this
module a wrong password read "Cannot list topics ... Help: is the broker up?".

``AuthWatch`` is the ``error_cb`` of lakewarden's Kafka clients (admin, producer, consumer): it
remembers the first authentication failure; the code that sees a request fail asks it
(``raise_if_refused``) and raises ``KafkaAuthenticationError`` instead of the generic error:
one line naming the servers, the user, the mechanism and the broker's reason, never the
password (it is removed from the broker's text should it ever appear there).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from lakewarden.errors import ConfigurationError
from lakewarden.extras import missing_extra
from lakewarden.settings import KafkaSettings

try:
    from confluent_kafka import KafkaError
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

__all__ = ["AuthWatch", "KafkaAuthenticationError", "is_authentication_failure"]

# librdkafka's own code for a failed SASL/SSL authentication, and the broker's (Kafka's
# SASL_AUTHENTICATION_FAILED, 58) when a request is answered with it.
_AUTH_CODES: Final = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
# "sasl_plaintext://h:p/bootstrap: SASL authentication error: <reason> (after 150ms in state
# AUTH_REQ)": the broker's reason is the interesting part.
_REASON = re.compile(
    r"authentication error:\s*(?P<reason>.*?)(?:\s*\(after \d+ms in state \w+\))?$"
)


class KafkaAuthenticationError(ConfigurationError):
    """The broker refused the configured credentials (a wrong password, an unknown user, a
    mechanism the listener does not offer). Retrying will not help: fix the settings."""

    def __init__(self, kafka: KafkaSettings, reason: str) -> None:
        user = kafka.sasl_username or "(no user)"
        mechanism = kafka.sasl_mechanism or "(no mechanism)"
        super().__init__(
            f"Kafka at {kafka.bootstrap_servers} refused to authenticate user {user!r} "
            f"(SASL {mechanism} over {kafka.security_protocol}): {reason}. Help: check "
            "LAKEWARDEN_KAFKA__SASL_USERNAME, LAKEWARDEN_KAFKA__SASL_PASSWORD and "
            "LAKEWARDEN_KAFKA__SASL_MECHANISM against the broker's users and listener."
        )
        self.reason = reason


def is_authentication_failure(error: KafkaError) -> bool:
    return error.code() in _AUTH_CODES


class AuthWatch:
    """An ``error_cb`` that remembers the first authentication failure and passes every error
    on to ``then`` (the client's own handling), if given."""

    def __init__(
        self, kafka: KafkaSettings, then: Callable[[KafkaError], None] | None = None
    ) -> None:
        self._kafka = kafka
        self._then = then
        self.refused: KafkaAuthenticationError | None = None

    def __call__(self, error: KafkaError) -> None:
        if is_authentication_failure(error) and self.refused is None:
            self.refused = self.refusal(error)
        if self._then is not None:
            self._then(error)

    def raise_if_refused(self) -> None:
        """Raises: KafkaAuthenticationError (the broker refused the credentials)."""
        if self.refused is not None:
            raise self.refused

    def refusal(self, error: KafkaError) -> KafkaAuthenticationError:
        """The named error for an authentication failure ``error``."""
        return KafkaAuthenticationError(self._kafka, self._reason(error))

    def _reason(self, error: KafkaError) -> str:
        text = str(error.str()).strip()
        found = _REASON.search(text)
        reason = found.group("reason") if found else text
        secret = self._kafka.sasl_password
        if secret is not None and secret.get_secret_value():
            reason = reason.replace(secret.get_secret_value(), "**********")
        return reason or "authentication failed"
