"""How the native client proves who it is: TLS to ``tls://`` endpoints (a CA file to check the server
with, a certificate and key for mutual TLS) and SASL on the native wire (``AUTH_HANDSHAKE`` then
``AUTHENTICATE`` messages, as Kafka's SaslHandshake and SaslAuthenticate): PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER (a token, or a ``token_provider`` called for a fresh one at each authentication).

A ``ClientSecurity`` is shared by every connection of a ``ConnectionPool``: each new connection (a
reconnect too) authenticates with it before it carries any request, and re-authenticates on the
connection before its session ends (an OAUTHBEARER token's expiry, ``connections.max.reauth.ms``).
Passwords and tokens never appear in a ``repr`` or an error message.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from millrace.protocol.sasl import PASSWORD_MECHANISMS, SaslClient


@dataclass(frozen=True)
class ClientSecurity:
    """Credentials and TLS settings of a client (every field optional)."""

    mechanism: str | None = None  # None: no SASL
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token_provider: Callable[[], str] | None = field(default=None, repr=False)
    ca_file: str | None = None  # PEM CAs the server's certificate is checked against (default: the system's)
    certfile: str | None = None  # the client's certificate chain (mutual TLS)
    keyfile: str | None = None
    check_hostname: bool = True

    @classmethod
    def of(cls, *, username: str | None = None, password: str | None = None, mechanism: str | None = None,
           token: str | None = None, token_provider: Callable[[], str] | None = None, ca_file: str | None = None,
           certfile: str | None = None, keyfile: str | None = None, check_hostname: bool = True,
           ) -> ClientSecurity | None:
        """What ``StreamManager``'s keyword arguments ask for (None: nothing); ValueError if they do not fit."""
        if token is not None and token_provider is not None:
            raise ValueError("give token or token_provider, not both")
        if token is not None:
            token_provider = _constant(token)
        if token_provider is not None:
            if username is not None or password is not None:
                raise ValueError("a token authenticates by itself: no username or password with it")
            mechanism = mechanism or "OAUTHBEARER"
            if mechanism != "OAUTHBEARER":
                raise ValueError(f"a token is sent with OAUTHBEARER, not {mechanism}")
        elif username is not None or password is not None:
            if not username or password is None:
                raise ValueError("username and password go together")
            mechanism = mechanism or "SCRAM-SHA-512"
            if mechanism not in PASSWORD_MECHANISMS:
                raise ValueError(f"mechanism {mechanism!r}: one of {', '.join(PASSWORD_MECHANISMS)} with a password")
        else:
            mechanism = None
        if (certfile is None) != (keyfile is None) and keyfile is not None:
            raise ValueError("keyfile needs certfile")
        if mechanism is None and ca_file is None and certfile is None:
            return None
        return cls(mechanism, username, password, token_provider, ca_file, certfile, keyfile, check_hostname)

    def tls_context(self) -> ssl.SSLContext:
        """A client TLS context: the server checked against ``ca_file`` (or the system's CAs) and its host
        name; the client's certificate presented where one is given."""
        context = ssl.create_default_context(cafile=self.ca_file)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        if self.certfile is not None:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context

    def exchange(self) -> SaslClient:
        """A fresh SASL exchange with these credentials (``protocol.sasl``, the nodes' own client side)."""
        assert self.mechanism is not None
        return SaslClient(self.mechanism, self.username, self.password, self.token_provider)


def _constant(token: str) -> Callable[[], str]:
    return lambda: token
