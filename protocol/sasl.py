"""The client side of SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER: the messages a client sends to log
in, shared by the native client and by the nodes (their Kafka inter-broker link, their native forwards).
Messages only: the caller carries them (in SaslAuthenticate requests, in native AUTHENTICATE commands),
so this does no I/O. The server side is gateway/security/sasl.py."""

from __future__ import annotations

from collections.abc import Callable

import scramp  # type: ignore[import-untyped]

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
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
        self._scram = (scramp.ScramClient([mechanism], username, password)
                       if mechanism in SCRAM_MECHANISMS else None)

    def __repr__(self) -> str:
        return f"SaslClient({self.mechanism!r}, {self._username!r})"  # never the password or token

    def first(self) -> bytes:
        if self.mechanism == "PLAIN":
            return f"\0{self._username}\0{self._password}".encode()
        if self.mechanism == "OAUTHBEARER":
            assert self._token_provider is not None
            return f"n,,\x01auth=Bearer {self._token_provider()}\x01\x01".encode()
        assert self._scram is not None
        return str(self._scram.get_client_first()).encode()

    def answer(self, server_message: bytes) -> bytes | None:
        scram = self._scram
        if scram is None:
            if self.mechanism == "OAUTHBEARER" and server_message == INVALID_TOKEN_CHALLENGE:
                return b"\x01"
            return None  # PLAIN and OAUTHBEARER are one message; the server's answer is empty
        try:
            if scram.stage == scramp.core.ClientStage.get_client_first:
                scram.set_server_first(server_message.decode())
                return str(scram.get_client_final()).encode()
            scram.set_server_final(server_message.decode())
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise SaslClientError(f"the server's SCRAM message does not check out: {e}") from None
        return None

    def done(self, server_message: bytes) -> None:
        """The server completed the exchange with ``server_message``: a SCRAM server proves here, if it has
        not yet, that it knows the credential (SaslClientError if it does not)."""
        scram = self._scram
        if scram is None or scram.stage == scramp.core.ClientStage.set_server_final:
            return
        if scram.stage != scramp.core.ClientStage.get_client_final:
            raise SaslClientError("the server ended the exchange before proving it knows the credential")
        self.answer(server_message)
