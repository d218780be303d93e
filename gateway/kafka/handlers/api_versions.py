"""ApiVersions (key 18): advertises exactly the registry's APIs and version ranges."""

from __future__ import annotations

from typing import Any

from millrace.gateway.kafka.registry import REGISTRY, api
from millrace.gateway.kafka_protocol.codec import response_class
from millrace.gateway.kafka_protocol.errors import ErrorCode

API_VERSIONS = 18


def api_versions_response(error: ErrorCode = ErrorCode.NONE) -> Any:
    cls = response_class(API_VERSIONS)
    return cls(
        error_code=int(error),
        api_keys=[
            cls.ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
            for h in sorted(REGISTRY.values(), key=lambda h: h.api_key)
        ],
    )


@api(API_VERSIONS, 0, 4)
def handle_api_versions(ctx: Any, request: Any) -> Any:
    return api_versions_response()
