"""The one dispatch registry. Each module in ``gateway.kafka.handlers`` registers the APIs it serves
with the version range it implements; ApiVersions is built from this table and nothing else, so it
advertises exactly what is implemented."""

from __future__ import annotations

import enum
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from twisted.internet.defer import Deferred

from millrace.gateway.kafka_protocol.messages import API_KEYS
from millrace.gateway.kafka_protocol.primitives import KafkaRequest, KafkaResponse

if TYPE_CHECKING:
    from millrace.gateway.kafka.broker import RequestContext


class _NoResponse(enum.Enum):
    NO_RESPONSE = "no response"


NoResponse: TypeAlias = Literal[_NoResponse.NO_RESPONSE]
#: What a handler returns for a request that gets no response at all (a produce with acks=0).
NO_RESPONSE: NoResponse = _NoResponse.NO_RESPONSE

# A handler gets the request context and the decoded request, and returns the response, a Deferred of it,
# or NO_RESPONSE. (Deferred's result type is invariant, hence Any: each handler declares its own.)
Outcome: TypeAlias = KafkaResponse | Deferred[Any] | NoResponse
R = TypeVar("R", bound=KafkaRequest)
Handler: TypeAlias = Callable[["RequestContext", R], Outcome]


@dataclass(frozen=True)
class ApiHandler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler[Any]


REGISTRY: dict[int, ApiHandler] = {}


def api(request: type[R], min_version: int, max_version: int) -> Callable[[Handler[R]], Handler[R]]:
    """Register ``fn`` as the handler of ``request``'s API for versions [min_version, max_version]."""
    api_key = request.API_KEY
    info = API_KEYS[api_key]
    if min_version < info.min_version or max_version > info.max_version:
        raise ValueError(f"{info.name}: versions {min_version}..{max_version} exceed the spec's range")

    def register(fn: Handler[R]) -> Handler[R]:
        if api_key in REGISTRY:
            raise ValueError(f"{info.name} registered twice")
        REGISTRY[api_key] = ApiHandler(api_key, info.name, min_version, max_version, fn)
        return fn

    return register


def load_handlers() -> dict[int, ApiHandler]:
    """Import every handler module (each registers itself) and return the registry."""
    from millrace.gateway.kafka import handlers

    for module in pkgutil.iter_modules(handlers.__path__):
        importlib.import_module(f"{handlers.__name__}.{module.name}")
    return REGISTRY
