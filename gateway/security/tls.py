"""TLS for a listener: the OpenSSL context its connections use, made from a listener's PEM settings
(``properties.SslSettings``), and the principal of a client certificate.

The context is built with pyOpenSSL (what Twisted's TLS runs on): TLS 1.2 at least, the certificate
chain and key of the key store, and, when ``ssl.client.auth`` is ``requested`` or ``required``, the
trust store's CAs to check client certificates against. ``ServerTls.getContext`` is asked once per new
connection (Twisted's old-style context factory), and rebuilds the context when a key or trust store
file changed on disk, checked at most once a second: certificates are renewed without a restart, and
connections already open keep the context they started with. A renewal that does not load (a key that
does not match its certificate, a half-written file) keeps the previous context and logs why.
"""

from __future__ import annotations

import logging
import os
import ssl as stdlib_ssl
import tempfile
import time
from collections.abc import Callable
from typing import Any, cast

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL, crypto
from twisted.internet import reactor as _reactor
from twisted.internet import ssl
from twisted.internet.interfaces import (
    IDelayedCall,
    IListeningPort,
    IOpenSSLClientConnectionCreator,
    IOpenSSLContextFactory,
    IReactorTCP,
    IReactorTime,
    ITransport,
)
from twisted.internet.protocol import Factory, ServerFactory, connectionDone
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from millrace.gateway.security.principal import ANONYMOUS, KafkaPrincipal
from millrace.gateway.security.properties import SslSettings

log = logging.getLogger(__name__)

_MIN_VERSIONS = {"TLSv1.2": SSL.TLS1_2_VERSION, "TLSv1.3": SSL.TLS1_3_VERSION}
_RELOAD_CHECK_SECONDS = 1.0


class TlsConfigError(ValueError):
    """Key material that cannot make a TLS context (never showing a key or a password)."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(f"cannot read the {what} {path}: {e.strerror}") from None


def _certificates(pem: bytes, what: str) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        certificates = []
    if not certificates:
        raise TlsConfigError(f"the {what} holds no PEM certificate")
    return certificates


def _private_key(pem: bytes, password: str | None, what: str) -> Any:
    try:
        return serialization.load_pem_private_key(pem, password.encode() if password else None)
    except (ValueError, TypeError):
        # TypeError: an encrypted key without a password, or a password for a plain key.
        raise TlsConfigError(f"the {what} holds no private key that loads with the configured key password") from None


def _key_store(settings: SslSettings) -> tuple[list[x509.Certificate], Any, str]:
    """The key store's certificate chain and private key, and what to call it in an error."""
    if settings.keystore_location:
        chain_pem = key_pem = _read(settings.keystore_location, "key store")
        what = f"key store {settings.keystore_location}"
    elif settings.keystore_certificate_chain and settings.keystore_key:
        chain_pem = settings.keystore_certificate_chain.encode()
        key_pem = settings.keystore_key.value.encode()
        what = "ssl.keystore.certificate.chain/ssl.keystore.key"
    else:
        raise TlsConfigError("a TLS listener needs ssl.keystore.location, or ssl.keystore.certificate.chain "
                             "and ssl.keystore.key")
    password = settings.key_password.value if settings.key_password else None
    return _certificates(chain_pem, what), _private_key(key_pem, password, what), what


def build_context(settings: SslSettings) -> SSL.Context:
    """A server context from ``settings``; TlsConfigError when the key material is unusable."""
    chain, key, what = _key_store(settings)
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(min(_MIN_VERSIONS[v] for v in settings.enabled_protocols))
    context.set_max_proto_version(max(_MIN_VERSIONS[v] for v in settings.enabled_protocols))
    # pyOpenSSL takes cryptography's certificates and keys as they are.
    context.use_certificate(chain[0])
    for extra in chain[1:]:
        context.add_extra_chain_cert(extra)
    try:
        context.use_privatekey(key)
        context.check_privatekey()
    except SSL.Error:
        raise TlsConfigError(f"the private key of the {what} does not match its certificate") from None
    if settings.client_auth != "none":
        if settings.truststore_location:
            trusted = _certificates(_read(settings.truststore_location, "trust store"),
                                    f"trust store {settings.truststore_location}")
        elif settings.truststore_certificates:
            trusted = _certificates(settings.truststore_certificates.encode(), "ssl.truststore.certificates")
        else:
            raise TlsConfigError(f"ssl.client.auth={settings.client_auth} needs a trust store "
                                 "(ssl.truststore.location or ssl.truststore.certificates)")
        store = context.get_cert_store()
        assert store is not None  # a new context always has one
        for certificate in trusted:
            store.add_cert(crypto.X509.from_cryptography(certificate))
        mode = SSL.VERIFY_PEER
        if settings.client_auth == "required":
            mode |= SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        context.set_verify(mode, None)
    # Sessions are resumed only within one context: a reloaded one starts afresh.
    context.set_session_id(b"millrace")
    return context


@implementer(IOpenSSLContextFactory)
class ServerTls:
    """A listener's TLS context for Twisted's ``listenSSL``, rebuilt when its files change."""

    def __init__(self, settings: SslSettings) -> None:
        self.settings = settings
        self._files = [p for p in (settings.keystore_location, settings.truststore_location) if p]
        self._context = build_context(settings)  # a broken configuration fails the start, loudly
        self._stamps = self._file_stamps()
        self._checked = time.monotonic()

    def _file_stamps(self) -> tuple[tuple[int, int] | None, ...]:
        stamps: list[tuple[int, int] | None] = []
        for path in self._files:
            try:
                st = os.stat(path)
                stamps.append((st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def getContext(self) -> SSL.Context:  # noqa: N802 - Twisted's name
        now = time.monotonic()
        if self._files and now - self._checked >= _RELOAD_CHECK_SECONDS:
            self._checked = now
            stamps = self._file_stamps()
            if stamps != self._stamps:
                self._stamps = stamps
                try:
                    self._context = build_context(self.settings)
                    log.info("TLS key material reloaded from %s", ", ".join(self._files))
                except TlsConfigError as e:
                    log.error("TLS key material changed but does not load (still using the previous): %s", e)
        return self._context


class _HandshakeDeadlineProtocol(TLSMemoryBIOProtocol):
    """A TLS connection that must finish its handshake within its factory's timeout, or is dropped."""

    factory: TlsHandshakeDeadline
    _deadline: IDelayedCall | None = None

    def makeConnection(self, transport: ITransport) -> None:  # noqa: N802 - Twisted's name
        timeout_s = self.factory.timeout_s
        if timeout_s > 0:
            self._deadline = self.factory.clock.callLater(timeout_s, self._handshake_overdue)
        super().makeConnection(transport)

    def _handshake_overdue(self) -> None:
        self._deadline = None
        # The client's Finished message arrives last: until then the handshake is not done.
        if self.getHandle().get_peer_finished() is None:
            peer = self.getPeer()
            log.info("closing connection from %s:%s: TLS handshake not done within %d ms "
                     "(millrace.authentication.timeout.ms)", getattr(peer, "host", "?"), getattr(peer, "port", "?"),
                     round(self.factory.timeout_s * 1000))
            self.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802 - Twisted's name
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        super().connectionLost(reason)


class TlsHandshakeDeadline(TLSMemoryBIOFactory):
    """What ``listenSSL`` builds around a listener's factory, plus a deadline for the handshake: before
    it is done no protocol above sees a byte, so neither a login deadline nor an idle timer there can
    tell a client that trickles its ClientHello, or sends nothing, from one that is slow to ask."""

    protocol = _HandshakeDeadlineProtocol

    def __init__(self, context: IOpenSSLContextFactory, wrapped: Factory, timeout_ms: int,
                 clock: IReactorTime | None = None) -> None:
        super().__init__(context, False, wrapped)
        self.timeout_s = timeout_ms / 1000
        self.clock = clock or IReactorTime(_reactor)


def listen_tls(port: int, factory: Factory, context: IOpenSSLContextFactory, interface: str,
               handshake_timeout_ms: int) -> IListeningPort:
    """``reactor.listenSSL`` with a deadline for each connection's handshake (0: none)."""
    tls = cast(ServerFactory[Any], TlsHandshakeDeadline(context, factory, handshake_timeout_ms))
    return IReactorTCP(_reactor).listenTCP(port, tls, interface=interface)


def certificate_principal(certificate: crypto.X509 | None, settings: SslSettings) -> KafkaPrincipal:
    """The principal of a client certificate: its subject as RFC 2253 text through
    ``ssl.principal.mapping.rules``; ANONYMOUS without a certificate (Kafka's answer)."""
    if certificate is None:
        return ANONYMOUS
    subject = certificate.to_cryptography().subject.rfc4514_string()
    return settings.principal_mapper.principal(subject)


def client_tls(settings: SslSettings) -> Callable[[str], IOpenSSLClientConnectionCreator]:
    """How this process connects to a Kafka TLS listener (a node to another node's, the users command to
    a server's): the trust store's CAs (without one, the system's, as Kafka clients fall back to the JVM's)
    check the server's certificate and its host name (Kafka's default
    ``ssl.endpoint.identification.algorithm=https``), and the key store's certificate, when there is one,
    is presented (for a listener requiring client certificates). TlsConfigError for key material that
    does not load."""
    if settings.truststore_location:
        trusted_pem: bytes | None = _read(settings.truststore_location, "trust store")
    elif settings.truststore_certificates:
        trusted_pem = settings.truststore_certificates.encode()
    else:
        trusted_pem = None
    root: Any = ssl.platformTrust()
    if trusted_pem is not None:
        root = ssl.trustRootFromCertificates([ssl.Certificate(crypto.X509.from_cryptography(c))
                                              for c in _certificates(trusted_pem, "trust store")])
    if not settings.keystore_location and not settings.keystore_certificate_chain:
        return lambda host: ssl.optionsForClientTLS(host, trustRoot=root)
    build_context(settings)  # the key store loads and its key matches its certificate, or this fails loudly
    chain, key, _ = _key_store(settings)
    presented = ssl.PrivateCertificate.fromCertificateAndKeyPair(
        ssl.Certificate(crypto.X509.from_cryptography(chain[0])), ssl.KeyPair(crypto.PKey.from_cryptography_key(key)))
    return lambda host: ssl.optionsForClientTLS(host, trustRoot=root, clientCertificate=presented)


def client_ssl_context(settings: SslSettings) -> stdlib_ssl.SSLContext:
    """``client_tls`` for a blocking socket (a node dialling another node's native listener from a worker
    thread: ``store/cluster/connection.py`` runs TLS over memory BIOs): TLS 1.2 at least, the server's
    certificate checked against the trust store's CAs (without one, the system's) and the host name
    dialled, the key store's certificate presented where the server asks for one. TlsConfigError for key
    material that does not load."""
    try:
        if settings.truststore_location:
            context = stdlib_ssl.create_default_context(cafile=settings.truststore_location)
        elif settings.truststore_certificates:
            context = stdlib_ssl.create_default_context(cadata=settings.truststore_certificates)
        else:
            context = stdlib_ssl.create_default_context()
    except (OSError, stdlib_ssl.SSLError) as e:
        raise TlsConfigError(f"no CA certificate of the trust store loads: {e}") from None
    context.minimum_version = stdlib_ssl.TLSVersion.TLSv1_2
    if not settings.keystore_location and not settings.keystore_certificate_chain:
        return context
    build_context(settings)  # the key store loads and its key matches its certificate, or this fails loudly
    password = settings.key_password.value if settings.key_password else None
    try:
        if settings.keystore_location:
            context.load_cert_chain(settings.keystore_location, password=password)
        else:  # inline PEM: the ssl module loads key material from files only (one of the owner's, removed)
            assert settings.keystore_certificate_chain is not None and settings.keystore_key is not None
            with tempfile.NamedTemporaryFile("w", suffix=".pem") as pem:  # created 0600
                pem.write(settings.keystore_key.value + "\n" + settings.keystore_certificate_chain)
                pem.flush()
                context.load_cert_chain(pem.name, password=password)
    except (OSError, stdlib_ssl.SSLError) as e:
        raise TlsConfigError(f"the key store's certificate chain and key do not load ({type(e).__name__})") from None
    return context
