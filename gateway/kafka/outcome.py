"""What a Kafka handler returns: the response, a Deferred of it, or ``NO_RESPONSE`` for a request that
gets no response at all (a produce with acks=0). Apart from the dispatch registry so that what wraps a
handler (client quotas) can name it without reaching the registry."""

from __future__ import annotations

import enum
from typing import Any, Literal, TypeAlias

from twisted.internet.defer import Deferred

from millrace.gateway.kafka_protocol.primitives import KafkaResponse


class _NoResponse(enum.Enum):
    NO_RESPONSE = "no response"


NoResponse: TypeAlias = Literal[_NoResponse.NO_RESPONSE]
#: What a handler returns for a request that gets no response at all (a produce with acks=0).
NO_RESPONSE: NoResponse = _NoResponse.NO_RESPONSE

# A handler returns the response, a Deferred of it, or NO_RESPONSE. (Deferred's result type is
# invariant, hence Any: each handler declares its own.)
Outcome: TypeAlias = KafkaResponse | Deferred[Any] | NoResponse
