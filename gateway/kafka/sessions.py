"""Who a Kafka connection is: its listener, its principal, and where it stands in authentication.

Invariants (Kafka's, from its SaslServerAuthenticator):
- On a SASL listener a connection may send only ApiVersions, SaslHandshake and SaslAuthenticate until
  an exchange succeeds, and no frame larger than ``sasl.server.max.receive.size``; anything else closes it
  (``KafkaConnection``). Nothing a handler serves is reachable before that.
- One exchange at a time: SaslHandshake picks the mechanism, SaslAuthenticate carries its messages. A
  failed exchange is answered once (SASL_AUTHENTICATION_FAILED, with the mechanism's generic message) and
  the connection closes after the answer; the reason goes to the debug log, never a secret.
- Re-authentication (KIP-368): with ``connections.max.reauth.ms`` set, a session lasts that long, and one
  authenticated by an expiring credential (an OAUTHBEARER token) no longer than the credential: the lesser
  of the two, as Kafka's SaslServerAuthenticator computes it. The client authenticates again on the same
  connection (as the same principal) before it ends, and a request after the end closes the connection.
- On a TLS listener the principal is the client certificate's (``ssl.principal.mapping.rules``) unless
  SASL names one; without a certificate it is ANONYMOUS, as on PLAINTEXT.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from millrace.gateway.security.oauth import JwtValidator
from millrace.gateway.security.principal import ANONYMOUS, KafkaPrincipal
from millrace.gateway.security.properties import ListenerSettings, SslSettings
from millrace.gateway.security.sasl import (
    BearerTokenValidator,
    CredentialStore,
    IllegalSaslState,
    SaslAuthenticationError,
    SaslServer,
    sasl_server,
)
from millrace.gateway.security.tls import certificate_principal
from millrace.gateway.shared.limits import LoginFailures

API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 18, 17, 36
#: What a connection may send before it has authenticated (Kafka's answer to anything else: close).
PRE_AUTHENTICATION_APIS = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})


@dataclass(frozen=True)
class KafkaListener:
    """One Kafka listener as its connections see it: name, protocol, the address Metadata gives clients
    who came in on it, and how it authenticates."""

    name: str
    security_protocol: str
    advertised_host: str
    advertised_port: int
    sasl_mechanisms: tuple[str, ...] = ()
    credentials: CredentialStore | None = None
    ssl: SslSettings | None = None
    reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions end only with their credential)
    max_pre_auth_bytes: int = 524288  # sasl.server.max.receive.size
    bearer_validator: BearerTokenValidator | None = None  # OAUTHBEARER's token checks, where enabled

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @classmethod
    def from_settings(cls, settings: ListenerSettings, advertised_host: str, advertised_port: int,
                      credentials: CredentialStore | None, reauth_ms: int, max_pre_auth_bytes: int) -> KafkaListener:
        """Blocking where the listener serves OAUTHBEARER: its JWKS file is read (a ``JwksError`` if unusable)."""
        validator = JwtValidator(settings.oauthbearer) if settings.oauthbearer is not None else None
        return cls(settings.name, settings.security_protocol, advertised_host, advertised_port,
                   settings.sasl_mechanisms, credentials, settings.ssl, reauth_ms, max_pre_auth_bytes, validator)


class Session:
    """One connection's security state. Owned by the reactor thread, like its connection."""

    def __init__(self, listener: KafkaListener, close: Callable[[], None],
                 authenticated: Callable[[], None] = lambda: None, failures: LoginFailures | None = None,
                 failed_login: Callable[[], float] = lambda: 0.0) -> None:
        self.listener = listener
        # A login failed: the connection stops reading; the answer waits the returned seconds
        self.failed_login = failed_login
        self.host = ""  # the client's address, once connected: what failed logins are counted by
        self._failures = failures
        self.close = close  # closes the connection once what was written has been sent
        self._on_authenticated = authenticated  # the connection lifts its pre-authentication frame limit
        self.principal: KafkaPrincipal = ANONYMOUS
        self.authenticated = not listener.uses_sasl
        self._exchange: SaslServer | None = None
        # After a SaslHandshake v0 the exchange's messages come as bare length-prefixed frames, not as
        # SaslAuthenticate requests (Kafka before 1.0; librdkafka before 2.x checks v0 is served).
        self.raw_tokens = False
        self._certificate_read = listener.ssl is None
        self._expires_at: float | None = None  # time.monotonic() when the session ends (re-authentication)

    def admits(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be served now. A session past its lifetime admits only
        re-authentication; an unauthenticated one only the pre-authentication APIs."""
        if self._expires_at is not None and time.monotonic() >= self._expires_at and api_key not in (
                SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            return False
        return self.authenticated or api_key in PRE_AUTHENTICATION_APIS

    def peer_certificate(self, certificate: Any) -> None:
        """The TLS client certificate (or None), once the handshake is done: the principal unless SASL
        names another."""
        if not self._certificate_read:
            self._certificate_read = True
            assert self.listener.ssl is not None
            if not self.listener.uses_sasl:
                self.principal = certificate_principal(certificate, self.listener.ssl)

    @property
    def certificate_read(self) -> bool:
        return self._certificate_read

    @property
    def ends(self) -> bool:
        """Whether the session has an end (and so may re-authenticate before it)."""
        return self._expires_at is not None

    def handshake(self, mechanism: str, raw_tokens: bool = False) -> None:
        """SaslHandshake: start an exchange of ``mechanism`` (its messages bare frames when ``raw_tokens``);
        UnsupportedSaslMechanism if the listener does not enable it."""
        assert self.listener.credentials is not None
        self._exchange = sasl_server(mechanism, self.listener.sasl_mechanisms, self.listener.credentials,
                                     self.listener.bearer_validator)
        self.raw_tokens = raw_tokens

    def authenticate(self, message: bytes | memoryview) -> tuple[bytes, int]:
        """SaslAuthenticate: the mechanism's answer and, once the exchange completes, the session's lifetime
        in ms (0: no limit). Raises the mechanism's SaslAuthenticationError / IllegalSaslState."""
        exchange = self._exchange
        if exchange is None:
            raise IllegalSaslState("SaslAuthenticate before SaslHandshake")
        failures = self._failures
        claimed = exchange.claimed_user(message) if failures is not None else None
        if failures is not None and failures.refused(self.host, claimed):
            # Refused before the mechanism runs: the address has used up its failed logins for now.
            self.raw_tokens = False
            self._exchange = None
            raise SaslAuthenticationError(exchange.failure_message, f"{failures.most} failed logins from "
                                          f"{self.host} within {failures.window_s:g} s: not checked")
        try:
            answer = exchange.step(message)
        except SaslAuthenticationError:
            self.raw_tokens = False
            if failures is not None:
                failures.failed(self.host, claimed)
            raise
        except Exception:
            self.raw_tokens = False
            raise
        if not exchange.complete:
            return answer, 0
        self.raw_tokens = False
        assert exchange.principal is not None
        if self.authenticated and self._expires_at is not None and exchange.principal != self.principal:
            # KIP-368: a connection's principal never changes; re-authenticating as another one fails.
            raise SaslAuthenticationError(exchange.failure_message,
                                          f"re-authenticated as {exchange.principal}, not {self.principal}")
        self.principal = exchange.principal
        if failures is not None:
            failures.succeeded(self.host, exchange.principal.name)
        if not self.authenticated:
            self.authenticated = True
            self._on_authenticated()
        self._exchange = None
        lifetime = session_lifetime_ms(self.listener.reauth_ms, exchange.credential_expires_at_ms)
        self._expires_at = None if lifetime is None else time.monotonic() + lifetime / 1000
        return answer, lifetime or 0


def session_lifetime_ms(reauth_ms: int, credential_expires_at_ms: int | None,
                        now_ms: float | None = None) -> int | None:
    """How long a session lasts (None: for ever): ``connections.max.reauth.ms`` (0: unset) and the
    credential's remaining lifetime, the lesser of those set, never negative (Kafka's
    calcCompletionTimesAndReturnSessionLifetimeMs). A credential already expired makes a session that
    has ended: the client is told 0 and its next request closes the connection."""
    if credential_expires_at_ms is None:
        return reauth_ms or None
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    remaining = max(0, int(credential_expires_at_ms - now_ms))
    return min(remaining, reauth_ms) if reauth_ms else remaining
