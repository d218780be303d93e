"""SaslHandshake (key 17) and SaslAuthenticate (key 36): a connection's SASL exchange on a SASL listener
(``sessions.Session`` keeps its state). Kafka's answers: ILLEGAL_SASL_STATE where no exchange can run
(a listener without SASL, a message out of turn), UNSUPPORTED_SASL_MECHANISM with the enabled list, and
SASL_AUTHENTICATION_FAILED with the mechanism's one message whatever was wrong. Each of those closes the
connection once the answer is sent. After a SaslHandshake v0 the exchange runs in bare length-prefixed
frames instead of SaslAuthenticate requests (``KafkaConnection``), as Kafka still serves it."""

from __future__ import annotations

import logging

from twisted.internet import defer, task

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.registry import api
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from millrace.gateway.kafka_protocol.messages.sasl_handshake import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from millrace.gateway.security.sasl import IllegalSaslState, SaslAuthenticationError, UnsupportedSaslMechanism
from millrace.gateway.shared.limits import loggable_name

log = logging.getLogger(__name__)


@api(SaslHandshakeRequest, 0, 1)
def handle_sasl_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    session = ctx.session
    if session is None or not session.listener.uses_sasl or (session.authenticated and not session.ends):
        # A listener without SASL, or a session that never ends (so never re-authenticates): nothing to
        # hand-shake. A session ends with connections.max.reauth.ms or with its credential (a token).
        if session is not None:
            ctx.when_sent(session.close)
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    enabled = list(session.listener.sasl_mechanisms)
    try:
        session.handshake(request.mechanism, raw_tokens=ctx.api_version == 0)
    except UnsupportedSaslMechanism:
        log.info("Kafka connection from %s asked for SASL mechanism %s; enabled: %s", ctx.peer,
                 loggable_name(request.mechanism), enabled)
        ctx.when_sent(session.close)
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)


@api(SaslAuthenticateRequest, 0, 2)
def handle_sasl_authenticate(ctx: RequestContext, request: SaslAuthenticateRequest,
                             ) -> SaslAuthenticateResponse | defer.Deferred[SaslAuthenticateResponse]:
    session = ctx.session
    if session is None or not session.listener.uses_sasl:
        if session is not None:
            ctx.when_sent(session.close)
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message="SASL is not enabled on this listener", auth_bytes=b"")
    try:
        answer, lifetime_ms = session.authenticate(request.auth_bytes)
    except SaslAuthenticationError as e:
        # The reason names what was wrong (never a secret): for an operator's log, not for the client.
        log.info("SASL authentication from %s failed: %s", ctx.peer, e.reason)
        ctx.when_sent(session.close)
        failed = SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=e.message,
                                          auth_bytes=b"")
        delay = session.failed_login()  # connection.failed.authentication.delay.ms
        return task.deferLater(ctx.broker.partitions.clock, delay, lambda: failed) if delay > 0 else failed
    except IllegalSaslState as e:
        log.info("SASL exchange from %s out of turn: %s", ctx.peer, e)
        ctx.when_sent(session.close)
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=str(e), auth_bytes=b"")
    return SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None, auth_bytes=answer,
                                    session_lifetime_ms=lifetime_ms)
