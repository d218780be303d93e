"""Who a native connection is and what it may do: the native listener secured as a Kafka listener named
NATIVE is (``security.properties.native_listener_settings``), with the same credentials (PLAIN users,
the SCRAM table, the OAUTHBEARER validator) and the same ACLs (``authorization``).

Invariants (Kafka's SaslServerAuthenticator's, on the native wire):
- a connection has a ``NativeSession`` only when the listener uses TLS or SASL or an authorizer is on;
  without one (PLAINTEXT, no authorizer) every request is served as before and costs one attribute test;
- before it authenticates, a connection that must (SASL listener, or an authorizer and no certificate
  principal) is served HELLO, AUTH_HANDSHAKE and AUTHENTICATE only, in frames no larger than
  ``sasl.server.max.receive.size`` (so is any connection with a session until it authenticated, or, where
  it need not, until its first request showed the TLS handshake done), and within
  ``millrace.authentication.timeout.ms``; anything else is answered AUTHENTICATION_FAILED and the connection
  closed. An address with ``millrace.authentication.failures.max`` failed logins (on any listener) within
  the window is refused without the mechanism running. A failed exchange is answered once with the mechanism's one message (never the reason, which
  goes to the debug log without a secret) and the connection is closed;
- a session lasts ``connections.max.reauth.ms`` and no longer than an OAUTHBEARER token; the client
  authenticates again on the connection (as the same principal) before it ends, and a request after the
  end is refused as above;
- every request of a session carries the session's principal (``Request.principal``) to its handler and
  to any node it is forwarded to; only an authenticated super user (``super.users``: a cluster node
  forwarding a client's request, logged in as the inter-broker user) may send a principal of its own, in
  a forwarded request, so a client cannot act as another;
- with an authorizer, ``authorization.RULES`` decides every request before its handler runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from millrace.gateway.native.authorization import NativeAuthorizer
from millrace.gateway.security.acl_table import AclTable
from millrace.gateway.security.acls import client_host
from millrace.gateway.security.principal import ANONYMOUS, KafkaPrincipal
from millrace.gateway.security.properties import SslSettings
from millrace.gateway.security.sasl import (
    BearerTokenValidator,
    CredentialStore,
    SaslAuthenticationError,
    SaslServer,
    UnsupportedSaslMechanism,
    sasl_server,
)
from millrace.gateway.security.tls import certificate_principal
from millrace.gateway.shared.limits import LoginFailures
from millrace.protocol import messages as m
from millrace.protocol.errors import AuthenticationError
from millrace.protocol.wire import Command

log = logging.getLogger(__name__)

#: What a connection may send before it has authenticated.
PRE_AUTHENTICATION = frozenset({Command.HELLO, Command.AUTH_HANDSHAKE, Command.AUTHENTICATE})


@dataclass(frozen=True)
class NativeSecurity:
    """How the native listener authenticates and authorizes (one per listener)."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanisms: tuple[str, ...] = ()
    credentials: CredentialStore | None = None
    bearer_validator: BearerTokenValidator | None = None
    ssl: SslSettings | None = None
    reauth_ms: int = 0
    max_pre_auth_bytes: int = 524288
    acls: Callable[[], AclTable | None] = lambda: None  # the broker's ACLs, when an authorizer is on
    kafka_scope: str = "kafka"
    # ``super.users``: who may forward a request for another principal (the authorizer's, when one is on)
    super_users: frozenset[KafkaPrincipal] = frozenset()
    # Failed logins by address, shared with every listener (None: not counted)
    login_failures: LoginFailures | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def active(self) -> bool:
        """Whether connections need a session at all."""
        return self.uses_sasl or self.ssl is not None or self.acls() is not None


class NativeSession:
    """One connection's security state (reactor thread only, like its connection)."""

    def __init__(self, security: NativeSecurity, peer_host: str, close: Callable[[], None]) -> None:
        self.security = security
        self.close = close
        self.principal: KafkaPrincipal = ANONYMOUS
        self.authenticated = False  # by SASL, or by a client certificate
        self._certificate_read = security.ssl is None
        self._exchange: SaslServer | None = None
        self._expires_at: float | None = None
        try:
            self.host = client_host(peer_host)
        except ValueError:
            self.host = peer_host

    @property
    def must_authenticate(self) -> bool:
        return self.security.uses_sasl or self.security.acls() is not None

    def peer_certificate(self, transport: Any) -> None:
        """The TLS client certificate, once the handshake is done: the principal of a TLS listener
        without SASL (ANONYMOUS without a certificate). ValueError if no mapping rule names it."""
        if self._certificate_read:
            return
        self._certificate_read = True
        certificate = getattr(transport, "getPeerCertificate", lambda: None)()
        if self.security.ssl is not None and not self.security.uses_sasl and certificate is not None:
            self.principal = certificate_principal(certificate, self.security.ssl)
            self.authenticated = True

    # -- admission --------------------------------------------------------------------------------------
    def admit(self, request: m.Request) -> Callable[[object], object] | None:
        """Whether ``request`` may be served: AuthenticationError (the connection then closes) or
        AuthorizationError if not; for a listing, what filters its answer. Sets the request's principal."""
        command = request.command
        if command in PRE_AUTHENTICATION:
            return None
        if self._expires_at is not None and time.monotonic() >= self._expires_at:
            raise AuthenticationError("the session expired: authenticate again before it ends")
        if not self.authenticated and self.must_authenticate:
            raise AuthenticationError(f"{command.name} before authentication: this listener requires "
                                      f"authentication ({', '.join(self.security.sasl_mechanisms) or 'TLS'})")
        acting = self.principal
        table = self.security.acls()
        asserted = request.principal
        trusted = table.authorizer.super_users if table is not None else self.security.super_users
        # Only an authenticated super user is believed (whoever else sends a principal is served as itself).
        if asserted is not None and request.forwarded and self.authenticated and acting in trusted:
            acting = KafkaPrincipal.parse(asserted)  # a node forwarding a client's request, for that client
        else:
            object.__setattr__(request, "principal", str(acting))  # a fresh object: nothing else holds it
        if table is None:
            return None
        return NativeAuthorizer(table.authorizer, acting, self.host, self.security.kafka_scope).check(request)

    # -- SASL -----------------------------------------------------------------------------------------------
    def handshake(self, request: m.AuthHandshake) -> m.AuthHandshakeReply:
        security = self.security
        if not security.uses_sasl or security.credentials is None:
            raise AuthenticationError(f"SASL authentication is not enabled on this listener "
                                      f"({security.security_protocol})")
        try:
            self._exchange = sasl_server(request.mechanism, security.sasl_mechanisms, security.credentials,
                                         security.bearer_validator)
        except UnsupportedSaslMechanism as exc:
            raise AuthenticationError(str(exc)) from None
        return m.AuthHandshakeReply(mechanisms=security.sasl_mechanisms)

    def authenticate(self, payload: bytes) -> tuple[m.AuthenticateReply, bytes]:
        """One message of the exchange: the reply and the mechanism's answer. AuthenticationError (with
        the mechanism's one message) when the exchange fails."""
        exchange = self._exchange
        if exchange is None:
            raise AuthenticationError("AUTHENTICATE before AUTH_HANDSHAKE")
        failures = self.security.login_failures
        claimed = exchange.claimed_user(payload) if failures is not None else None
        if failures is not None and failures.refused(self.host, claimed):
            # Refused before the mechanism runs: the address has used up its failed logins for now.
            self._exchange = None
            log.info("native SASL/%s authentication from %s refused: %d failed logins within %g s",
                     exchange.mechanism, self.host, failures.most, failures.window_s)
            raise AuthenticationError(exchange.failure_message)
        try:
            answer = exchange.step(payload)
        except SaslAuthenticationError as exc:
            if failures is not None:
                failures.failed(self.host, claimed)
            log.info("native SASL/%s authentication from %s failed: %s", exchange.mechanism, self.host, exc.reason)
            raise AuthenticationError(exc.message) from None
        except Exception as exc:  # noqa: BLE001 - a message out of turn
            log.info("native SASL authentication from %s failed: %s", self.host, type(exc).__name__)
            raise AuthenticationError(exchange.failure_message) from None
        if not exchange.complete:
            return m.AuthenticateReply(complete=False), answer
        principal = exchange.principal
        assert principal is not None
        self._exchange = None
        if self.authenticated and principal != self.principal:
            log.info("native re-authentication from %s as %s, not %s: refused", self.host, principal, self.principal)
            raise AuthenticationError("re-authenticated as another principal")
        self.principal, self.authenticated = principal, True
        if failures is not None:
            failures.succeeded(self.host, principal.name)
        lifetime = _session_lifetime_ms(self.security.reauth_ms, exchange.credential_expires_at_ms)
        self._expires_at = None if lifetime is None else time.monotonic() + lifetime / 1000
        return m.AuthenticateReply(complete=True, principal=str(principal),
                                   session_lifetime_ms=lifetime), answer


def _session_lifetime_ms(reauth_ms: int, credential_expires_at_ms: int | None) -> int | None:
    """As ``kafka.sessions.session_lifetime_ms`` (the lesser of the two set; an expired credential: 0)."""
    if credential_expires_at_ms is None:
        return reauth_ms or None
    remaining = max(0, int(credential_expires_at_ms - time.time() * 1000))
    return min(remaining, reauth_ms) if reauth_ms else remaining
