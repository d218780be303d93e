"""The HTTP listener: health, Prometheus metrics, a JSON view of segments, and streams (describe,
list, manual split and merge).

Endpoints:

- ``GET /health``: container states; 503 unless every container runs.
- ``GET /metrics``: Prometheus text (``gateway/shared/metrics.py``; every series is in ``docs/metrics.md``).
- ``GET /api/segments``: every segment the store holds, with sizes.
- ``GET /api/streams``: ``{"scopes": [...]}``.
- ``GET /api/streams/SCOPE``: ``{"scope": ..., "streams": [...]}``.
- ``GET /api/streams/SCOPE/STREAM``: the stream's description (````StreamDescriptionReply`` as JSON).
- ``POST /api/streams/SCOPE/STREAM/split`` with ``{"segment": name|id|number, "pieces": N}`` or
  ``{"segment": ..., "at": [key, ...]}``; ``POST .../merge`` with ``{"segments": [...]}``: scale
  manually, answering the new description.

Errors answer ``{"error": message, "type": exception class}``: 404 for unknown scopes, streams,
segments or paths, 400 for malformed or impossible requests (InvalidScaleError, ValueError), 409 when
the stream's state conflicts (ScaleConflictError: another scale got there first; a sealed stream).

Access (``HttpAccess``, when the HTTP listener authenticates or an authorizer is configured): the site's
root is a guard that asks ``endpoint_permission`` what a request needs, authenticates it (``Authorization:
Basic`` or ``Bearer``, ``security/http_auth.py``) and asks the server's one Authorizer (``Broker.acls``)
before the endpoint's resource is reached. Reads are open unless
``millrace.http.authentication.required.for.reads`` (a topic's records excepted: they are authorized as
a Fetch is, ``endpoint_permission``); every other request needs a principal: 401 with
``WWW-Authenticate`` when credentials are missing or wrong (the same answer for either), 403 when the
Authorizer refuses (without an authorizer every authenticated principal may do everything). On a listener
that does not authenticate, with an authorizer, mutating requests are asked as User:ANONYMOUS, as Kafka
asks for a PLAINTEXT listener's clients. An authenticated mutating request must send its body as
``application/json`` (415 otherwise): a cross-site HTML form cannot, so a browser holding Basic credentials
for the site cannot be made to scale a stream by another site's page. Without ``HttpAccess`` the site is
open, as before.

Limits (``gateway.shared.limits``): a request body longer than ``millrace.http.max.request.body.bytes`` is
answered 413 and the connection closed, before the body is read (a declared length) or as soon as it
passes the bound (a chunked body). A request with a body that needs a principal has its credentials
checked before its body is read (the connection stops reading meanwhile): without valid ones it is
answered 401 and the connection closed, the body unread; from an address past
``millrace.authentication.failures.max`` failed logins it is answered 429 without any check. Such early
answers are written by ``_LimitedRequest`` straight to the connection, which then closes.

Controller and scaler calls block on table-segment I/O, so they run on the server's controller pool
and the resource answers later (NOT_DONE_YET); so do the stream metrics (``gateway/shared/metrics.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import unquote

from prometheus_client.core import Metric
from twisted.internet import defer, protocol, reactor, task, tcp, threads
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime, ITransport
from twisted.python.failure import Failure
from twisted.web import http, resource, server

from millrace.gateway.native.controller_commands import PartitionsOf, describe_stream
from millrace.gateway.security.acls import CLUSTER_NAME, AclOperation, Authorizer, ResourceType, client_host
from millrace.gateway.security.http_auth import HttpAuthenticator
from millrace.gateway.security.principal import ANONYMOUS, KafkaPrincipal
from millrace.gateway.shared.limits import (
    AUTHENTICATION_TIMEOUT_MS,
    ConnectionGuards,
    ConnectionLimits,
    LoginFailures,
)
from millrace.gateway.shared.metrics import (
    CONTENT_TYPE,
    MetricsSources,
    reactor_families,
    render,
    worker_families,
)
from millrace.protocol.messages import to_header
from millrace.store.containers.container import SegmentContainer
from millrace.store.containers.rates import SegmentRates
from millrace.store.contracts import SegmentInfo
from millrace.store.controller import Controller, InvalidScaleError, ScaleConflictError, StreamSealedError
from millrace.store.errors import ScopeNotFoundError, SegmentNotFoundError, StreamNotFoundError
from millrace.streams.futures import to_deferred
from millrace.streams.scaling import StreamScaling

if TYPE_CHECKING:
    from millrace.gateway.http.console import Console

log = logging.getLogger(__name__)


class _NotFoundError(LookupError):
    """An API path that names nothing."""


# Most specific first: InvalidScaleError is also a ValueError.
_HTTP_STATUS: list[tuple[tuple[type[BaseException], ...], int]] = [
    ((_NotFoundError, StreamNotFoundError, ScopeNotFoundError, SegmentNotFoundError), 404),
    ((ScaleConflictError, StreamSealedError), 409),
    ((InvalidScaleError, ValueError, KeyError, TypeError), 400),
]


@dataclass
class StreamViews:
    """What the stream resources need from the server: the controller, the pool its blocking calls
    run on, the scaler for manual splits and merges (the Kafka gateway's, which also moves partition
    writers), and the Kafka topics' partition slices."""

    controller: Controller
    pool: ThreadPoolExecutor
    scaler: StreamScaling
    partitions_of: PartitionsOf | None = None

    def blocking(self, fn: Callable[..., Any], *args: Any) -> defer.Deferred:
        """Run ``fn`` on the pool; the Deferred fires on the reactor thread."""
        try:
            return to_deferred(self.pool.submit(fn, *args))
        except RuntimeError as exc:  # the pool is shut down: the server is stopping
            return defer.fail(exc)

    def describe(self, scope: str, stream: str) -> dict[str, Any]:
        return to_header(describe_stream(self.controller, scope, stream, self.partitions_of))


def _json(request: server.Request, status: int, body: Any) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return json.dumps(body).encode()


def _error_status(exc: BaseException | None) -> int:
    for classes, status in _HTTP_STATUS:
        if isinstance(exc, classes):
            return status
    return 500


def answer_later(request: server.Request, d: defer.Deferred,
                 status_of: Callable[[BaseException | None], int] = _error_status) -> int:
    """Finish ``request`` with the JSON ``d`` gives, or a JSON error whose status ``status_of`` picks;
    returns NOT_DONE_YET."""
    gone = []
    request.notifyFinish().addErrback(lambda _: gone.append(True))

    def ok(body: Any) -> None:
        if not gone:
            request.write(_json(request, 200, body))
            request.finish()

    def failed(failure: Failure) -> None:
        exc = failure.value
        status = status_of(exc)
        if status == 500:
            log.error("HTTP %s %s failed", request.method.decode(), request.uri.decode(), exc_info=exc)
        if not gone:
            message = str(exc) or type(exc).__name__
            if isinstance(exc, KeyError):
                message = f"missing {exc}"  # str(KeyError) is just the quoted key
            request.write(_json(request, status, {"error": message, "type": type(exc).__name__}))
            request.finish()

    d.addCallbacks(ok, failed)
    return server.NOT_DONE_YET


class NodeView(Protocol):
    """What the HTTP site reads of the node it runs on. On the reactor: the containers running here and
    their segments (``containers``, ``list_segments``, ``get_info`` of a listed segment: in memory); on
    the worker pool (the stream series): any segment's info and rates. A ``SegmentStore`` offers it as it
    is; a cluster node's view (``cluster_server.NodeHttpView``) reads its own containers and asks the
    router for other segments, since its ``SegmentService`` has no containers of its own to show."""

    @property
    def containers(self) -> Sequence[SegmentContainer]: ...

    def list_segments(self) -> list[str]: ...

    def get_info(self, name: str) -> SegmentInfo: ...

    def segment_rates(self, name: str) -> SegmentRates: ...

    def container_id_of(self, name: str) -> int: ...


class _Health(resource.Resource):
    isLeaf = True

    def __init__(self, store: NodeView) -> None:
        super().__init__()
        self.store = store

    def render_GET(self, request: server.Request) -> bytes:  # noqa: N802 - Twisted's name
        states = {c.container_id: c.state for c in self.store.containers}
        healthy = all(s == "running" for s in states.values())
        return _json(request, 200 if healthy else 503, {"healthy": healthy, "containers": states})


class _Metrics(resource.Resource):
    """Prometheus' text, built by ``gateway/shared/metrics.py``: the reactor's series here, the stream series on
    the worker pool (controller calls block)."""

    isLeaf = True

    def __init__(self, sources: MetricsSources, views: StreamViews | None) -> None:
        super().__init__()
        self.sources = sources
        self.views = views

    def render_GET(self, request: server.Request) -> bytes | int:  # noqa: N802 - Twisted's name
        request.setHeader(b"content-type", CONTENT_TYPE.encode())
        families = reactor_families(self.sources)
        if self.views is None:
            return render(families)
        gone = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def failed(failure: Failure) -> list[Metric]:
            # The other series still help when the controller cannot answer (e.g. an offline container
            # holding a system table).
            log.warning("stream metrics unavailable: %s", failure.getErrorMessage())
            return []

        def finish(streams: list[Metric]) -> None:
            if not gone:
                request.write(render(families + streams))
                request.finish()

        d = self.views.blocking(worker_families, self.views.controller, self.sources)
        d.addErrback(failed).addCallback(finish)
        return server.NOT_DONE_YET


class _Segments(resource.Resource):
    isLeaf = True

    def __init__(self, store: NodeView) -> None:
        super().__init__()
        self.store = store

    def render_GET(self, request: server.Request) -> bytes:  # noqa: N802 - Twisted's name
        out = []
        for name in self.store.list_segments():
            info = self.store.get_info(name)
            out.append({
                "name": name,
                "container": self.store.container_id_of(name),
                "start_offset": info.start_offset,
                "length": info.length,
                "storage_length": info.storage_length,
                "sealed": info.sealed,
            })
        return _json(request, 200, {"segments": out})


def _split_request(body: dict[str, Any]) -> tuple[int | str, int, list[float] | None]:
    """(segment, pieces, at) of a split request body; ValueError if malformed."""
    segment = body["segment"]
    if "at" in body and "pieces" in body:
        raise ValueError("give either 'pieces' or 'at', not both")
    at = body.get("at")
    if at is not None:
        if not isinstance(at, list) or not at or not all(isinstance(x, (int, float)) for x in at):
            raise ValueError("'at' must be a non-empty list of keys in (0, 1)")
        at = [float(x) for x in at]
    pieces = body.get("pieces", 2)
    if not isinstance(pieces, int) or isinstance(pieces, bool):
        raise ValueError("'pieces' must be an integer")
    return segment, pieces, at


class _Streams(resource.Resource):
    """``/api/streams[/SCOPE[/STREAM[/split|/merge]]]``."""

    isLeaf = True

    def __init__(self, views: StreamViews) -> None:
        super().__init__()
        self.views = views

    @staticmethod
    def _path(request: server.Request) -> list[str]:
        return [unquote(p.decode()) for p in request.postpath or () if p]

    def render_GET(self, request: server.Request) -> int:  # noqa: N802 - Twisted's name
        path = self._path(request)
        c = self.views.controller
        if not path:
            d = self.views.blocking(lambda: {"scopes": c.list_scopes()})
        elif len(path) == 1:
            d = self.views.blocking(lambda: {"scope": path[0], "streams": c.list_streams(path[0])})
        elif len(path) == 2:
            d = self.views.blocking(self.views.describe, path[0], path[1])
        else:
            d = defer.fail(_NotFoundError(f"no resource {request.path.decode()} (GET)"))
        return answer_later(request, d)

    def render_POST(self, request: server.Request) -> int:  # noqa: N802 - Twisted's name
        path = self._path(request)
        if len(path) != 3 or path[2] not in ("split", "merge"):
            return answer_later(request, defer.fail(_NotFoundError(f"no resource {request.path.decode()} (POST)")))
        scope, stream, action = path
        try:
            body = json.loads((request.content.read() if request.content is not None else b"") or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
        except ValueError as exc:
            return answer_later(request, defer.fail(ValueError(f"bad request body: {exc}")))
        scaler = self.views.scaler

        def scale() -> dict[str, Any]:
            if action == "split":
                segment, pieces, at = _split_request(body)
                scaler.split(scope, stream, segment, pieces, at)
            else:
                segments = body["segments"]
                if not isinstance(segments, list):
                    raise ValueError("'segments' must be a list")
                scaler.merge(scope, stream, segments)
            return self.views.describe(scope, stream)

        return answer_later(request, self.views.blocking(scale))


# Access.

def stream_acl_resource(scope: str, stream: str, kafka_scope: str) -> tuple[ResourceType, str]:
    """The ACL resource a stream is authorized as: TOPIC ``S`` in the Kafka scope (the stream is that
    topic), TOPIC ``C/S`` in any other scope C (a name no Kafka topic can have: '/' is not allowed in one)."""
    return ResourceType.TOPIC, stream if scope == kafka_scope else f"{scope}/{stream}"


@dataclass(frozen=True)
class Permission:
    """What a request asks of the Authorizer."""

    operation: AclOperation
    resource_type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.operation.name} on {self.resource_type.name} {self.name!r}"


_CLUSTER_DESCRIBE = Permission(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
_CLUSTER_ALTER = Permission(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
_STREAM_ACTIONS = ("split", "merge")


def endpoint_permission(method: str, path: Sequence[str], kafka_scope: str) -> tuple[bool, Permission]:
    """(whether the request changes anything, the permission it needs), by method and path segments:

    ====================================================  ========  ======================================
    request                                               mutating  permission
    ====================================================  ========  ======================================
    GET/HEAD /health, /metrics, /api/segments,            no        DESCRIBE on CLUSTER kafka-cluster
    /api/streams, /api/streams/SCOPE, the console's
    pages (/, /static/...), /api/overview, /api/cluster,
    /api/groups, /api/reader-groups, /api/topics,
    /api/stream-list (and unknown paths)
    GET/HEAD /api/streams/SCOPE/STREAM,                   no        DESCRIBE on ``stream_acl_resource``
    /api/heatmap/SCOPE/STREAM
    GET/HEAD /api/groups/GROUP                            no        DESCRIBE on GROUP ``GROUP``
    GET/HEAD /api/reader-groups/SCOPE/GROUP               no        DESCRIBE on GROUP ``SCOPE/GROUP`` (a
                                                                    native reader group's resource)
    GET/HEAD /api/topics/TOPIC                            no        DESCRIBE on TOPIC ``TOPIC``
    GET/HEAD /api/topics/TOPIC/messages                   no        READ on TOPIC ``TOPIC`` (records)
    POST /api/streams/SCOPE/STREAM/split, .../merge       yes       ALTER on ``stream_acl_resource``
    anything else (other methods and paths)               yes       ALTER on CLUSTER kafka-cluster
    ====================================================  ========  ======================================

    A READ (records) needs a principal even where other reads are open, as a Kafka Fetch is authorized
    (``_Guard``: authenticated where the listener authenticates, ANONYMOUS to an authorizer otherwise).
    """
    path = list(path)
    streams = path[:2] == ["api", "streams"]
    if method in ("GET", "HEAD"):
        if (streams or path[:2] == ["api", "heatmap"]) and len(path) == 4:
            return False, Permission(AclOperation.DESCRIBE, *stream_acl_resource(path[2], path[3], kafka_scope))
        if path[:2] == ["api", "groups"] and len(path) == 3:
            return False, Permission(AclOperation.DESCRIBE, ResourceType.GROUP, path[2])
        if path[:2] == ["api", "reader-groups"] and len(path) == 4:
            return False, Permission(AclOperation.DESCRIBE, ResourceType.GROUP, f"{path[2]}/{path[3]}")
        if path[:2] == ["api", "topics"] and len(path) == 3:
            return False, Permission(AclOperation.DESCRIBE, ResourceType.TOPIC, path[2])
        if path[:2] == ["api", "topics"] and len(path) == 4 and path[3] == "messages":
            return False, Permission(AclOperation.READ, ResourceType.TOPIC, path[2])
        return False, _CLUSTER_DESCRIBE
    if method == "POST" and streams and len(path) == 5 and path[4] in _STREAM_ACTIONS:
        return True, Permission(AclOperation.ALTER, *stream_acl_resource(path[2], path[3], kafka_scope))
    return True, _CLUSTER_ALTER


@dataclass
class HttpAccess:
    """Who may use the HTTP API: ``authenticator`` where the HTTP listener authenticates (None: it does
    not), the server's Authorizer as it is now (None: no authorizer), the Kafka scope (for
    ``stream_acl_resource``), whether reads need a principal too, the failed logins by address that
    every listener counts (None: not counted), and how long a refusal of wrong credentials waits
    (``connection.failed.authentication.delay.ms``)."""

    authenticator: HttpAuthenticator | None
    authorizer: Callable[[], Authorizer | None]
    kafka_scope: str
    reads_authenticated: bool = False
    login_failures: LoginFailures | None = None
    failed_login_delay_s: float = 0.0

    def needs_principal(self, method: str, path: Sequence[str]) -> tuple[bool, bool, Permission]:
        """(whether the request needs a principal, whether it changes anything, the permission it needs)."""
        mutating, permission = endpoint_permission(method, path, self.kafka_scope)
        # Records are data, not descriptions: authorized like a Fetch even where other reads are open.
        needed = mutating or self.reads_authenticated or permission.operation is AclOperation.READ
        return needed, mutating, permission

    def claimed_user(self, request: server.Request) -> str | None:
        """The user a request's Basic credentials name (None for any other kind, or none)."""
        authenticator = self.authenticator
        assert authenticator is not None
        scheme, credentials = authenticator.scheme(request.getHeader(b"authorization"))
        pair = authenticator.basic_credentials(credentials) if scheme == "basic" else None
        return None if pair is None else pair[0]

    def refused(self, request: server.Request, host: str) -> bool:
        """Whether ``host`` is refused for its failed logins (``LoginFailures``), as the user it names."""
        failures = self.login_failures
        return failures is not None and failures.refused(host, self.claimed_user(request))

    def authenticate(self, request: server.Request, host: str) -> defer.Deferred[KafkaPrincipal | None]:
        """Fires with the request's principal, or None (no credentials, wrong ones, or an address refused
        for its failed logins: then no check runs). A refusal of credentials given counts as a failed
        login of ``host``."""
        authenticator = self.authenticator
        assert authenticator is not None
        failures = self.login_failures
        if self.refused(request, host):
            return defer.succeed(None)
        scheme, credentials = authenticator.scheme(request.getHeader(b"authorization"))
        user = None
        if scheme == "basic":
            pair = authenticator.basic_credentials(credentials)
            user = None if pair is None else pair[0]
            # PBKDF2 takes milliseconds: on a thread, never on the reactor.
            checked = (defer.succeed(None) if pair is None
                       else threads.deferToThread(authenticator.verify_basic, *pair, host))
        elif scheme == "bearer":
            checked = defer.succeed(authenticator.verify_bearer(credentials, host))
        else:
            return defer.succeed(None)  # no credentials: no failed login

        def count(principal: KafkaPrincipal | None) -> defer.Deferred[KafkaPrincipal | None]:
            if failures is not None:
                if principal is None:
                    failures.failed(host, user)
                else:
                    failures.succeeded(host, principal.name)
            if principal is None and self.failed_login_delay_s > 0:
                return task.deferLater(IReactorTime(reactor), self.failed_login_delay_s, lambda: None)
            return defer.succeed(principal)

        return checked.addCallback(count)


class _AuthenticationRequiredError(Exception):
    """401: no credentials, or credentials that do not check out (never saying which)."""


class _NotAuthorizedError(Exception):
    """403: the principal lacks the permission."""


def _refuse(request: server.Request, status: int, message: str, error_type: str,
            challenges: Sequence[bytes] = ()) -> bytes:
    for challenge in challenges:
        request.responseHeaders.addRawHeader(b"www-authenticate", challenge)
    return _json(request, status, {"error": message, "type": error_type})


class _Guard(resource.Resource):
    """The site's root when access is checked: each request is authenticated and authorized as
    ``endpoint_permission`` says before it reaches ``root``'s resource for its path."""

    isLeaf = True

    def __init__(self, root: resource.Resource, access: HttpAccess) -> None:
        super().__init__()
        self.root = root
        self.access = access

    def _serve(self, request: server.Request) -> bytes | int:
        return resource.getChildForRequest(self.root, request).render(request)

    def render(self, request: server.Request) -> bytes | int:
        access = self.access
        path = [unquote(p.decode()) for p in request.postpath or () if p]
        needs_principal, mutating, permission = access.needs_principal(request.method.decode("latin-1"), path)
        authenticator = access.authenticator
        if not needs_principal or (authenticator is None and access.authorizer() is None):
            return self._serve(request)
        host = _client_host(request)
        failures = access.login_failures
        blocked = access.refused(request, host)  # then no check runs (``authenticate``)
        early = request.early_principal if isinstance(request, _LimitedRequest) else None
        if authenticator is None:
            principal: defer.Deferred = defer.succeed(ANONYMOUS)
        elif early is not None:  # checked before the body was read (``_LimitedRequest``)
            principal = early
        else:
            principal = access.authenticate(request, host)
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def decide(who: KafkaPrincipal | None) -> bytes | int:
            if gone:
                return server.NOT_DONE_YET  # the client left while it was authenticated: do nothing for it
            if who is None:
                raise _AuthenticationRequiredError()
            authorizer = access.authorizer()
            if authorizer is not None and not authorizer.authorize(who, host, permission.operation,
                                                                  permission.resource_type, permission.name):
                log.info("HTTP %s %s from %s: %s lacks %s", request.method.decode("latin-1"),
                         request.path.decode("latin-1"), host, who, permission)
                raise _NotAuthorizedError(f"{who} is not authorized: {permission} is needed")
            if mutating and authenticator is not None and not _json_body(request):
                return _refuse(request, 415, "send the request body as application/json", "UnsupportedMediaType")
            return self._serve(request)

        def refused(failure: Failure) -> bytes:
            if failure.check(_AuthenticationRequiredError):
                if blocked and failures is not None:
                    request.setHeader(b"retry-after", _retry_after(failures))
                    return _refuse(request, 429, "too many failed logins from this address", "TooManyRequests")
                challenges = authenticator.challenges if authenticator is not None else ()
                return _refuse(request, 401, "authentication required", "AuthenticationRequired", challenges)
            if failure.check(_NotAuthorizedError):
                return _refuse(request, 403, str(failure.value), "NotAuthorized")
            if failure.check(resource.UnsupportedMethod):
                return _refuse(request, 405, f"method {request.method.decode('latin-1')} not allowed here",
                               "MethodNotAllowed")
            log.error("HTTP %s %s failed", request.method.decode("latin-1"), request.path.decode("latin-1"),
                      exc_info=failure.value)
            return _refuse(request, 500, "internal error", type(failure.value).__name__)

        def finish(body: object) -> None:
            if gone or not isinstance(body, bytes):  # NOT_DONE_YET: the resource finishes the request
                return
            request.setHeader(b"content-length", str(len(body)).encode())
            request.write(body)
            request.finish()

        principal.addCallback(decide).addErrback(refused).addCallback(finish)
        return server.NOT_DONE_YET


def _retry_after(failures: LoginFailures) -> bytes:
    return str(max(1, round(failures.window_s))).encode()


class _LimitedRequest(server.Request):
    """A request held to the site's limits before its body is read (module docstring): Twisted calls
    ``gotLength`` once the headers are in, before any of the body."""

    site: LimitedSite

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.early_principal: defer.Deferred | None = None  # credentials checked before the body was read
        self._refused = False  # answered early: nothing more is read or served
        self._processing = False
        self._body_bytes = 0

    def _site(self) -> LimitedSite:
        return cast(LimitedSite, self.channel.site)  # type: ignore[attr-defined]  # Site.buildProtocol sets it

    def _transport(self) -> ITransport:
        transport = self.channel.transport
        assert transport is not None  # the channel is connected while it reads a request
        return transport

    def gotLength(self, length: int | None) -> None:  # noqa: N802 - Twisted's name
        site = self._site()
        access = site.access
        authenticator = access.authenticator if access is not None else None
        checked = False  # whether this request's credentials are checked before its body is read
        if length != 0 and access is not None and authenticator is not None:
            # The request line as the channel read it (the request itself learns it only with the body).
            method = bytes(getattr(self.channel, "_command", b"")).decode("latin-1")
            raw_path = bytes(getattr(self.channel, "_path", b"")).split(b"?", 1)[0]
            path = [unquote(p.decode("latin-1")) for p in raw_path.split(b"/") if p]
            checked = access.needs_principal(method, path)[0]
        if checked:
            assert access is not None and authenticator is not None
            host = _peer_host(self._transport())
            failures = access.login_failures
            if failures is not None and access.refused(self, host):
                self._answer_early(429, b"Too Many Requests", "too many failed logins from this address",
                                   "TooManyRequests", [(b"retry-after", _retry_after(failures))])
                return
            scheme, credentials = authenticator.scheme(self.getHeader(b"authorization"))
            if not (scheme == "bearer" or (scheme == "basic" and authenticator.basic_credentials(credentials))):
                self._answer_early(401, b"Unauthorized", "authentication required", "AuthenticationRequired",
                                   [(b"www-authenticate", c) for c in authenticator.challenges])
                return
        if length is not None and length > site.max_body_bytes:
            self._answer_early(413, b"Content Too Large", "the request body is larger than "
                               f"{site.max_body_bytes} bytes", "ContentTooLarge")
            return
        super().gotLength(length)
        if not checked:
            return  # no body to keep unread (the guard checks the request as it is), or nothing to check
        assert access is not None and authenticator is not None
        transport = IPushProducer(self._transport())
        transport.pauseProducing()  # no body is read until the credentials are checked
        challenges = authenticator.challenges

        def verdict(principal: KafkaPrincipal | None) -> KafkaPrincipal | None:
            if self._processing or self._refused:  # the body had already arrived: the guard answers
                return principal
            if principal is None:
                self._answer_early(401, b"Unauthorized", "authentication required", "AuthenticationRequired",
                                   [(b"www-authenticate", c) for c in challenges])
            else:
                transport.resumeProducing()
            return principal

        self.early_principal = access.authenticate(self, host).addCallback(verdict)

    def handleContentChunk(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        if self._refused:
            return
        self._body_bytes += len(data)
        limit = self._site().max_body_bytes
        if self._body_bytes > limit:  # a chunked body, whose length was not declared
            self._answer_early(413, b"Content Too Large", f"the request body is larger than {limit} bytes",
                               "ContentTooLarge")
            return
        super().handleContentChunk(data)

    def process(self) -> None:
        if self._refused:
            return
        self._processing = True
        super().process()

    def _answer_early(self, status: int, reason: bytes, message: str, error_type: str,
                      headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """Answer before the request is whole (the request's own response machinery needs it whole) and
        close: what the client still sends is never parsed nor kept. On plain TCP the close lingers
        (``EARLY_ANSWER_LINGER_SECONDS``, as a web server's lingering close): the connection stops
        writing after the answer and drops what it still reads, since closing a socket with unread bytes
        resets it, and a reset can destroy the answer before the client has read it."""
        self._refused = True
        self.content = BytesIO()
        self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the answer
        body = json.dumps({"error": message, "type": error_type}).encode()
        lines = [b"HTTP/1.1 %d %s" % (status, reason), b"content-type: application/json",
                 b"content-length: %d" % len(body), b"connection: close",
                 *(name + b": " + value for name, value in headers)]
        transport = self._transport()
        transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        log.info("HTTP request from %s answered %d before its body was read: %s", _peer_host(transport), status,
                 message)
        channel = self.channel
        channel.dataReceived = _drop  # type: ignore[method-assign]  # nothing more is parsed or kept
        if isinstance(transport, tcp.Connection):
            transport.loseWriteConnection()
            transport.resumeProducing()  # read (and drop) what comes while the answer leaves
            channel.callLater(EARLY_ANSWER_LINGER_SECONDS, transport.loseConnection)
        else:
            transport.loseConnection()


def _drop(data: bytes) -> None:
    """A refused request's connection: what the client still sends."""


EARLY_ANSWER_LINGER_SECONDS = 2.0  # how long a connection answered early still reads (and drops) input


class _LimitedChannel(http.HTTPChannel):
    """An HTTP connection that must send its first request's headers, where its credentials are, within
    ``millrace.authentication.timeout.ms`` (its TLS handshake has the same deadline below it); between
    requests it is held to ``connections.max.idle.ms`` as any listener's connection (Twisted's timeout)."""

    site: LimitedSite
    _first_headers: IDelayedCall | None = None

    def connectionMade(self) -> None:  # noqa: N802 - Twisted's name
        super().connectionMade()
        timeout_s = self.site.headers_timeout_s
        if timeout_s > 0:
            self._first_headers = self.callLater(timeout_s, lambda: self._headers_overdue(timeout_s))

    def allHeadersReceived(self) -> None:  # noqa: N802 - Twisted's name
        self._stop_deadline()
        super().allHeadersReceived()

    def _headers_overdue(self, timeout_s: float) -> None:
        self._first_headers = None
        transport = self.transport
        if transport is not None:
            log.info("closing HTTP connection from %s: no request within %d ms (%s)", _peer_host(transport),
                     round(timeout_s * 1000), AUTHENTICATION_TIMEOUT_MS)
            transport.loseConnection()

    def _stop_deadline(self) -> None:
        if self._first_headers is not None and self._first_headers.active():
            self._first_headers.cancel()
        self._first_headers = None

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:  # noqa: N802 - Twisted's name
        self._stop_deadline()
        super().connectionLost(reason)


class LimitedSite(server.Site):
    """The HTTP site with its limits (``_LimitedRequest``, ``_LimitedChannel``): the largest request body,
    ``access`` to check credentials with before a body is read, how long a connection may take to send
    its first request's headers and stay idle between requests (``ConnectionLimits``)."""

    # HTTP/1.1 channels (Twisted's default wraps one to offer HTTP/2, which this site does not)
    protocol = _LimitedChannel  # type: ignore[assignment]

    def __init__(self, root: resource.Resource, limits: ConnectionLimits, access: HttpAccess | None) -> None:
        idle_ms = limits.connections_max_idle_ms
        super().__init__(root, requestFactory=_LimitedRequest, timeout=idle_ms / 1000 if idle_ms > 0 else None)
        self.max_body_bytes = limits.http_max_request_body_bytes
        self.headers_timeout_s = limits.authentication_timeout_ms / 1000
        self.access = access


def _peer_host(transport: Any) -> str:
    host = str(getattr(transport.getPeer(), "host", ""))
    try:
        return client_host(host)
    except ValueError:
        return host


def _client_host(request: server.Request) -> str:
    """The client's IP address as ACLs name hosts."""
    host = str(getattr(request.getClientAddress(), "host", ""))
    try:
        return client_host(host)
    except ValueError:
        return host


def _json_body(request: server.Request) -> bool:
    content_type = (request.getHeader(b"content-type") or b"").split(b";")[0].strip().lower()
    return content_type == b"application/json"


def http_site(store: NodeView, views: StreamViews | None = None, access: HttpAccess | None = None,
              console: Console | None = None, metrics: MetricsSources | None = None,
              guards: ConnectionGuards | None = None) -> server.Site:
    """The HTTP site; without ``views`` (no controller) only the store's resources exist; with ``access``
    every request is authenticated and authorized as it says (``_Guard``); ``console`` adds the web
    console at ``/`` and its JSON resources under ``/api`` (``gateway/http/console/``); ``metrics``: what
    ``/metrics`` reads (None: the store's containers only); ``guards``: the server's limits (None: the
    defaults)."""
    root = resource.Resource()
    root.putChild(b"health", _Health(store))
    root.putChild(b"metrics", _Metrics(metrics if metrics is not None else MetricsSources(store), views))
    api = resource.Resource()
    root.putChild(b"api", api)
    api.putChild(b"segments", _Segments(store))
    if views is not None:
        api.putChild(b"streams", _Streams(views))
    if console is not None:
        console.mount(root, api)
    limits = (guards if guards is not None else ConnectionGuards()).limits
    return LimitedSite(root if access is None else _Guard(root, access), limits, access)
