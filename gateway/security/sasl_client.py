"""The login a cluster node presents to another node's listeners (Kafka's inter-broker client, and the
native forwards): a SASL mechanism with a password, whose messages ``protocol.sasl.SaslClient`` makes
(the native client's own, so there is one client side of SASL)."""

from __future__ import annotations

from dataclasses import dataclass

from millrace.protocol.sasl import PASSWORD_MECHANISMS, SaslClient

CLIENT_MECHANISMS = PASSWORD_MECHANISMS  # what a node can log in with: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512


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

    def client(self) -> SaslClient:
        """A fresh exchange for this login."""
        return SaslClient(self.mechanism, self.username, self.password)
