"""The client side of SASL PLAIN and SCRAM: what a cluster node says to log in to another node's Kafka
listener (Kafka's inter-broker client). The messages only: the caller carries them in SaslAuthenticate
requests, so this does no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import scramp  # type: ignore[import-untyped]

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslClientError(Exception):
    """The server's answer does not check out (a SCRAM server that does not know the password)."""


@dataclass(frozen=True)
class SaslLogin:
    """A SASL identity: a mechanism, a user and the user's password."""

    mechanism: str  # one of CLIENT_MECHANISMS
    username: str
    password: str

    def __post_init__(self) -> None:
        if self.mechanism not in CLIENT_MECHANISMS:
            raise ValueError(f"cannot log in with {self.mechanism}: only {', '.join(CLIENT_MECHANISMS)}")

    def __repr__(self) -> str:
        return f"SaslLogin({self.mechanism!r}, {self.username!r})"  # never the password


class SaslClient:
    """One exchange: ``first()``, then ``answer(server_message)`` for each server message, which gives the
    next client message, or None once the exchange is complete (and the server proven, for SCRAM)."""

    def __init__(self, login: SaslLogin) -> None:
        self.login = login
        self._scram = (None if login.mechanism == "PLAIN" else
                       scramp.ScramClient([login.mechanism], login.username, login.password))

    def first(self) -> bytes:
        if self._scram is None:
            return f"\0{self.login.username}\0{self.login.password}".encode()
        return str(self._scram.get_client_first()).encode()

    def answer(self, server_message: bytes) -> bytes | None:
        scram = self._scram
        if scram is None:
            return None  # PLAIN is one message; the server's answer is empty
        try:
            if scram.stage == scramp.core.ClientStage.get_client_first:
                scram.set_server_first(server_message.decode())
                return str(scram.get_client_final()).encode()
            scram.set_server_final(server_message.decode())
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise SaslClientError(f"the server's SCRAM message does not check out: {e}") from None
        return None
