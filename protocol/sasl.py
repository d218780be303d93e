"""The client side of SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER: the messages a client sends to log
in, shared by the native client and by the nodes (their Kafka inter-broker link, their native forwards).
Messages only: the caller carries them (in SaslAuthenticate requests, in native AUTHENTICATE commands),
so this does no I/O. The server side is gateway/security/sasl.py."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable

from millrace.protocol import scram

SCRAM_MECHANISMS = tuple(scram.HASHES)
PASSWORD_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
CLIENT_MECHANISMS = (*PASSWORD_MECHANISMS, "OAUTHBEARER")
# What a server answers an OAUTHBEARER client whose token it refuses (RFC 7628 with Kafka's status);
# the client acknowledges it with a lone \x01 and the server then fails the exchange.
INVALID_TOKEN_CHALLENGE = b'{"status":"invalid_token"}'


class SaslClientError(Exception):
    """The server's answer does not check out (a SCRAM server that does not know the credential)."""


class SaslClient:
    """One exchange: ``first()``, then ``answer(server_message)`` for each server message, which gives the
    next client message, or None once the exchange is complete from the client's side (a SCRAM server
    proven); ``done(server_message)`` where the server itself says the exchange is complete."""

    def __init__(self, mechanism: str, username: str | None = None, password: str | None = None,
                 token_provider: Callable[[], str] | None = None) -> None:
        if mechanism not in CLIENT_MECHANISMS:
            raise ValueError(f"cannot log in with {mechanism}: only {', '.join(CLIENT_MECHANISMS)}")
        if mechanism == "OAUTHBEARER" and token_provider is None:
            raise ValueError("OAUTHBEARER needs a token")
        if mechanism != "OAUTHBEARER" and (not username or password is None):
            raise ValueError(f"{mechanism} needs a username and a password")
        self.mechanism = mechanism
        self._username, self._password, self._token_provider = username, password, token_provider
        self._scram: _ScramClient | None = None
        if mechanism in SCRAM_MECHANISMS and username and password is not None:  # both checked above
            self._scram = _ScramClient(mechanism, username, password)

    def __repr__(self) -> str:
        return f"SaslClient({self.mechanism!r}, {self._username!r})"  # never the password or token

    def first(self) -> bytes:
        if self.mechanism == "PLAIN":
            return f"\0{self._username}\0{self._password}".encode()
        if self.mechanism == "OAUTHBEARER":
            assert self._token_provider is not None
            return f"n,,\x01auth=Bearer {self._token_provider()}\x01\x01".encode()
        assert self._scram is not None
        return self._scram.first().encode()

    def answer(self, server_message: bytes) -> bytes | None:
        exchange = self._scram
        if exchange is None:
            if self.mechanism == "OAUTHBEARER" and server_message == INVALID_TOKEN_CHALLENGE:
                return b"\x01"
            return None  # PLAIN and OAUTHBEARER are one message; the server's answer is empty
        try:
            if not exchange.answered:
                return exchange.final(server_message.decode()).encode()
            exchange.check_server_final(server_message.decode())
        except (_ScramRefused, UnicodeDecodeError) as e:
            raise SaslClientError(f"the server's SCRAM message does not check out: {e}") from None
        return None

    def done(self, server_message: bytes) -> None:
        """The server completed the exchange with ``server_message``: a SCRAM server proves here, if it has
        not yet, that it knows the credential (SaslClientError if it does not)."""
        exchange = self._scram
        if exchange is None or exchange.server_proven:
            return
        if not exchange.answered:
            raise SaslClientError("the server ended the exchange before proving it knows the credential")
        self.answer(server_message)


class _ScramRefused(Exception):
    """The server's SCRAM message does not read or does not check out."""


class _ScramClient:
    """The client's side of one SCRAM exchange, as Kafka's ScramSaslClient runs it (``protocol/scram.py``)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._hash = scram.hash_name(mechanism)
        self._password = password
        self._nonce = secrets.token_urlsafe(24)
        self._first_bare = f"n={scram.escape_name(username)},r={self._nonce}"
        self._expected_server_signature = b""
        self.answered = False  # the client's final message is made
        self.server_proven = False

    def first(self) -> str:
        return "n,," + self._first_bare

    def final(self, server_first: str) -> str:
        try:
            nonce, salt, iterations = scram.parse_server_first(server_first)
        except scram.ScramError as e:
            raise _ScramRefused(str(e)) from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise _ScramRefused("the server's nonce does not extend the client's")
        if iterations < scram.MIN_ITERATIONS:  # a cheaper hash of the password than the mechanism allows
            raise _ScramRefused(f"the server asks for {iterations} iterations, fewer than {scram.MIN_ITERATIONS}")
        salted = scram.salted_password(self._hash, self._password, salt, iterations)
        without_proof = f"c={scram.CHANNEL_BINDING},r={nonce}"
        signed = scram.auth_message(self._first_bare, server_first, without_proof)
        self._expected_server_signature = scram.server_signature(self._hash, scram.server_key(self._hash, salted),
                                                                 signed)
        self.answered = True
        return f"{without_proof},p={scram.b64(scram.client_proof(self._hash, salted, signed))}"

    def check_server_final(self, server_final: str) -> None:
        if server_final.startswith("e="):
            raise _ScramRefused(f"the server refused the exchange: {server_final[2:]}")
        if not server_final.startswith("v="):
            raise _ScramRefused("invalid SCRAM server final message format")
        try:
            signature = scram.unb64(server_final[2:], "server signature")
        except scram.ScramError as e:
            raise _ScramRefused(str(e)) from None
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise _ScramRefused("the server's signature does not match: it does not hold the credential")
        self.server_proven = True
