"""The one dispatch registry. Each module in ``gateway.kafka.handlers`` registers the APIs it serves
with the version range it implements; ApiVersions is built from this table and nothing else, so it
advertises exactly what is implemented."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from millrace.gateway.kafka.outcome import Outcome
from millrace.gateway.kafka_protocol.messages import API_KEYS
from millrace.gateway.kafka_protocol.primitives import KafkaRequest

if TYPE_CHECKING:
    from millrace.gateway.kafka.broker import RequestContext

R = TypeVar("R", bound=KafkaRequest)
# A handler gets the request context and the decoded request, and returns an ``Outcome``.
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
