"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them, for both sides: the server's
exchange (gateway/security/sasl.py) and the client's (protocol/sasl.py) are built on these.

Kafka's choices, which a general SCRAM library does not make: a password's UTF-8 bytes are salted as they
are, without SASLprep; names are ASCII with ``=2C`` and ``=3D`` escapes and are not SASLprepped either;
any salt the server stores is used, however short (Kafka's AlterUserScramCredentials takes a salt of any
length, and its clients log in with it); the client refuses a server asking for fewer iterations than
the mechanism's minimum, so a server cannot make a password cheaper to guess.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from types import MappingProxyType

HASHES: Mapping[str, str] = MappingProxyType({"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"})
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, for both mechanisms
CHANNEL_BINDING = "biws"  # base64 of the gs2 header "n,,": no channel binding, no authorization id

# Kafka's ClientFinalMessage grammar: the channel binding, the nonce, optional extensions, the proof.
_CLIENT_FINAL = re.compile(r"c=(?P<channel>[a-zA-Z0-9+/]+={0,2}),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
                           r"(?:,[A-Za-z]+=[^,]*)*,p=(?P<proof>[a-zA-Z0-9+/]+={0,2})")
# Kafka's ServerFirstMessage grammar: nonce, salt, iterations, optional extensions.
_SERVER_FIRST = re.compile(r"(?:m=[^,]*,)?r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+),s=(?P<salt>[a-zA-Z0-9+/]+={0,2}),"
                           r"i=(?P<iterations>[0-9]+)(?:,.*)?")


class ScramError(ValueError):
    """A SCRAM message that does not read, or does not check out."""


def hash_name(mechanism: str) -> str:
    try:
        return HASHES[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r} (supported: {', '.join(HASHES)})") from None


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, Hi(password, salt, i): PBKDF2 over the password's UTF-8 bytes."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def client_key(hash_name: str, salted: bytes) -> bytes:
    return hmac.digest(salted, b"Client Key", hash_name)


def stored_key(hash_name: str, salted: bytes) -> bytes:
    return hashlib.new(hash_name, client_key(hash_name, salted)).digest()


def server_key(hash_name: str, salted: bytes) -> bytes:
    return hmac.digest(salted, b"Server Key", hash_name)


def client_proof(hash_name: str, salted: bytes, auth_message: str) -> bytes:
    """ClientKey XOR HMAC(StoredKey, AuthMessage): what proves the client knows the password."""
    key = client_key(hash_name, salted)
    signature = hmac.digest(hashlib.new(hash_name, key).digest(), auth_message.encode(), hash_name)
    return bytes(a ^ b for a, b in zip(key, signature, strict=True))


def proof_matches(hash_name: str, stored: bytes, auth_message: str, proof: bytes) -> bool:
    """Whether ``proof`` comes from the password ``stored`` (StoredKey) was derived from; constant time."""
    signature = hmac.digest(stored, auth_message.encode(), hash_name)
    if len(proof) != len(signature):
        return False
    recovered_client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    return hmac.compare_digest(hashlib.new(hash_name, recovered_client_key).digest(), stored)


def server_signature(hash_name: str, server: bytes, auth_message: str) -> bytes:
    """HMAC(ServerKey, AuthMessage): what proves the server holds the credential."""
    return hmac.digest(server, auth_message.encode(), hash_name)


def auth_message(client_first_bare: str, server_first: str, client_final_without_proof: str) -> str:
    return f"{client_first_bare},{server_first},{client_final_without_proof}"


def escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ScramError(f"the {what} is not base64") from None


def server_first_message(nonce: str, salt: bytes, iterations: int) -> str:
    return f"r={nonce},s={b64(salt)},i={iterations}"


def parse_server_first(message: str) -> tuple[str, bytes, int]:
    """(nonce, salt, iterations) of a server-first message; ScramError if it does not read."""
    if message.startswith("e="):
        raise ScramError(f"the server refused the exchange: {message[2:]}")
    fields = _SERVER_FIRST.fullmatch(message)
    if fields is None:
        raise ScramError("invalid SCRAM server first message format")
    return fields["nonce"], unb64(fields["salt"], "salt"), int(fields["iterations"])


def parse_client_final(message: str) -> tuple[str, str, str, bytes]:
    """(channel binding, nonce, the message without its proof, proof) of a client-final message."""
    fields = _CLIENT_FINAL.fullmatch(message)
    if fields is None:
        raise ScramError("invalid SCRAM client final message format")
    return fields["channel"], fields["nonce"], message[:fields.start("proof") - len(",p=")], unb64(fields["proof"],
                                                                                                  "proof")
