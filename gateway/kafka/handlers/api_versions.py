"""ApiVersions (key 18): advertises exactly the registry's APIs and version ranges."""

from __future__ import annotations

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import REGISTRY, api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse

API_VERSIONS = ApiVersionsRequest.API_KEY


def api_versions_response(error: ErrorCode = ErrorCode.NONE) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=int(error),
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
            for h in sorted(REGISTRY.values(), key=lambda h: h.api_key)
        ],
    )


@api(ApiVersionsRequest, 0, 4)
def handle_api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return api_versions_response()
