"""Server side SASL exchanges as small state machines, apart from the transport: a connection hands each
SaslAuthenticate payload (or legacy unframed token) to ``SaslServer.step`` and sends back what it returns,
until ``complete``; ``principal`` then says who the client is.

A failure raises ``SaslAuthenticationError``: its message is the one the client may read, the same for
every cause within a mechanism (Kafka's words), and its ``reason`` says what went wrong for a debug log,
never with a password in it. A step after completion or failure raises ``IllegalSaslState``.

- PLAIN (RFC 4616, Kafka's PlainSaslServer): ``authzid NUL authcid NUL password``, checked against
  ``CredentialStore.plain_users`` (the ``user_<name>`` options of PlainLoginModule) in constant time;
  the authzid must be empty or the user's own name.
- SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), on ``protocol/scram.py``'s primitives, with
  Kafka's grammar: only the gs2 header ``n,,`` (no channel binding, no authzid), no extensions (the
  ``tokenauth=true`` extension would ask for delegation tokens, which are not supported). Any non-empty
  salt is used, however short, as Kafka uses what AlterUserScramCredentials stored. A client first
  message longer than ``SCRAM_MAX_CLIENT_FIRST_BYTES`` or a user name longer than
  ``SCRAM_MAX_USERNAME_BYTES`` (UTF-8, as sent) is refused before it is parsed: SASLprep and the log
  see bounded names only (a log line shows a short prefix of a name: ``limits.loggable_name``). An
  unknown user goes through the whole exchange with a made-up credential and fails where a wrong
  password fails.
  The broker keeps ``ScramCredential``s, never passwords; a credential is derived from the password's
  UTF-8 bytes without SASLprep, as Kafka's clients and broker derive it.
- OAUTHBEARER (RFC 7628, Kafka's OAuthBearerSaslServer): ``n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A...]^A``,
  the token checked by the listener's ``BearerTokenValidator`` (``oauth.JwtValidator``). An invalid token is
  answered with the error challenge ``{"status":"invalid_token"}``; the client acknowledges it with ``^A``
  and the exchange fails with that JSON as its message, which is all Kafka tells the client. The authzid
  must be empty or the token's principal; extensions are accepted and ignored, as Kafka's validator does.
  The token's expiry bounds the session (``SaslServer.credential_expires_at_ms``, KIP-368).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NoReturn, Protocol

from millrace.gateway.security.principal import KafkaPrincipal, user_principal
from millrace.gateway.shared.limits import loggable_name
from millrace.protocol import scram

PlainUsers = Mapping[str, str]  # user name -> password

SCRAM_HASHES: Mapping[str, str] = scram.HASHES
SCRAM_DEFAULT_ITERATIONS = 4096
SCRAM_MIN_ITERATIONS = scram.MIN_ITERATIONS  # Kafka's ScramMechanism.minIterations
SCRAM_MAX_ITERATIONS = 16384  # Kafka refuses to store credentials with more
# Bounds on what an unauthenticated client makes the server parse: SASLprep costs about 2 us a character
# (a 500 KB name held the reactor for 0.85 s). Kafka's user names are short (a principal's name); clients
# send a nonce of 24 to 48 characters.
SCRAM_MAX_USERNAME_BYTES = 256
SCRAM_MAX_CLIENT_FIRST_BYTES = 1024
_SALT_BYTES = 32  # new salts, and the made-up credentials of unknown users alike

# Kafka's ClientFirstMessage grammar, with the gs2 flag and the authzid widened so that refusing them
# can say why: ASCII names with =2C/=3D escapes, printable nonces, alphabetic extension keys.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(
    rf"(?P<flag>[^,]*),(?:a=(?P<authzid>{_SASLNAME}))?,n=(?P<saslname>{_SASLNAME}),"
    r"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,[A-Za-z]+=[\x01-\x2b\x2d-\x7f]+)*)")


class SaslAuthenticationError(Exception):
    """An exchange failed. ``str()`` is what the client is told; ``reason`` is for a debug log."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class IllegalSaslState(Exception):
    """A message arrived after the exchange completed or failed."""


class UnsupportedSaslMechanism(ValueError):
    """A SaslHandshake asked for a mechanism the listener does not enable (UNSUPPORTED_SASL_MECHANISM)."""

    def __init__(self, mechanism: str, enabled: Sequence[str]) -> None:
        super().__init__(f"Unsupported SASL mechanism {mechanism}; enabled mechanisms are {list(enabled)}")
        self.mechanism = mechanism
        self.enabled = tuple(enabled)


# Credentials.

@dataclass(frozen=True)
class ScramCredential:
    """What a broker keeps of a SCRAM password (RFC 5802): enough to check a client's proof and sign the
    answer, not to log in as the user."""

    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def __post_init__(self) -> None:
        _check_iterations(self.iterations)
        if not self.salt:
            raise ValueError("a SCRAM salt must not be empty")


def scram_credential(mechanism: str, password: str, iterations: int = SCRAM_DEFAULT_ITERATIONS,
                     salt: bytes | None = None) -> ScramCredential:
    """The credential of ``password`` for ``mechanism`` (a fresh random salt unless one is given)."""
    _check_iterations(iterations)
    salt = os.urandom(_SALT_BYTES) if salt is None else salt
    return credential_from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations),
                                           salt, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, Hi(password, salt, iterations): what AlterUserScramCredentials carries."""
    return scram.salted_password(_scram_hash(mechanism), password, salt, iterations)


def credential_from_salted_password(mechanism: str, salted_password: bytes, salt: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential from RFC 5802's SaltedPassword: what AlterUserScramCredentials carries."""
    hash_name = _scram_hash(mechanism)
    return ScramCredential(salt, scram.stored_key(hash_name, salted_password),
                           scram.server_key(hash_name, salted_password), iterations)


class CredentialStore(Protocol):
    """Where the servers look users up: PLAIN passwords and SCRAM credentials."""

    @property
    def plain_users(self) -> PlainUsers: ...

    def scram(self, user: str, mechanism: str) -> ScramCredential | None: ...


class InMemoryCredentialStore:
    """A ``CredentialStore`` in memory: PLAIN users as given, SCRAM credentials set one by one."""

    def __init__(self, plain_users: PlainUsers | None = None) -> None:
        self._plain = dict(plain_users or {})
        self._scram: dict[tuple[str, str], ScramCredential] = {}

    @property
    def plain_users(self) -> PlainUsers:
        return MappingProxyType(self._plain)

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram.get((user, mechanism))

    def set_scram(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        _scram_hash(mechanism)
        self._scram[(user, mechanism)] = credential

    def delete_scram(self, user: str, mechanism: str) -> bool:
        return self._scram.pop((user, mechanism), None) is not None

    def __repr__(self) -> str:
        scram = sorted(f"{user}/{mechanism}" for user, mechanism in self._scram)
        return f"InMemoryCredentialStore(plain users {sorted(self._plain)}, SCRAM credentials {scram})"


# Servers.

class SaslServer(ABC):
    """One client's exchange for one mechanism."""

    mechanism: str
    failure_message: str  # what the client is told, whatever went wrong

    def __init__(self) -> None:
        self.complete = False
        self.failed = False
        self.principal: KafkaPrincipal | None = None
        # When the credential stops being valid (ms since the epoch), for mechanisms whose credentials
        # expire (OAUTHBEARER's token): the session must end by then (Kafka's CREDENTIAL_LIFETIME_MS).
        self.credential_expires_at_ms: int | None = None

    def step(self, response: bytes | memoryview) -> bytes:
        """Take the client's next message; return the challenge or final answer to send (may be empty)."""
        if self.complete or self.failed:
            state = "complete" if self.complete else "failed"
            raise IllegalSaslState(f"SASL/{self.mechanism} message after the exchange {state}")
        try:
            return self._step(bytes(response))
        except BaseException:
            self.failed = True
            raise

    @abstractmethod
    def _step(self, response: bytes) -> bytes: ...

    def claimed_user(self, response: bytes | memoryview) -> str | None:
        """The user name the client's next message claims, found without checking anything (None where
        the mechanism names none so cheaply): what failed logins are also counted by."""
        return None

    def _fail(self, reason: str) -> NoReturn:
        raise SaslAuthenticationError(self.failure_message, reason)

    def _succeed(self, user: str) -> None:
        self.complete = True
        self.principal = user_principal(user)


class PlainSaslServer(SaslServer):
    mechanism = "PLAIN"
    failure_message = "Authentication failed: Invalid username or password"

    def __init__(self, users: PlainUsers) -> None:
        super().__init__()
        self._users = users

    def claimed_user(self, response: bytes | memoryview) -> str | None:
        tokens = bytes(response).split(b"\0")
        return tokens[1].decode("utf-8", "replace") if len(tokens) == 3 else None

    def _step(self, response: bytes) -> bytes:
        try:
            tokens = response.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            self._fail("the SASL/PLAIN message is not UTF-8")
        if len(tokens) != 3:
            self._fail(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            self._fail("username not specified")
        if not password:
            self._fail("password not specified")
        expected = self._users.get(username)
        # Compared for unknown users too, so the time taken does not tell which names exist.
        matches = hmac.compare_digest(password.encode(), (_NO_PASSWORD if expected is None else expected).encode())
        if expected is None:
            self._fail(f"unknown user {loggable_name(username)}")
        if not matches:
            self._fail(f"wrong password for user {loggable_name(username)}")
        if authzid and authzid != username:
            self._fail(f"user {loggable_name(username)} requested an authorization id that is different from its name")
        self._succeed(username)
        return b""


class ScramSaslServer(SaslServer):
    """SCRAM-SHA-256 or SCRAM-SHA-512. ``server_nonce`` fixes the server's part of the nonce (tests)."""

    def __init__(self, mechanism: str, credentials: CredentialStore, *, server_nonce: str | None = None) -> None:
        super().__init__()
        self._hash = _scram_hash(mechanism)
        self.mechanism = mechanism
        self.failure_message = ("Authentication failed during authentication due to invalid credentials "
                                f"with SASL mechanism {mechanism}")
        self._credentials = credentials
        self._server_nonce = server_nonce if server_nonce is not None else secrets.token_urlsafe(24)
        self._user = ""
        self._unknown_user = False
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""  # the client's nonce and the server's, as the server's first message gave them

    def claimed_user(self, response: bytes | memoryview) -> str | None:
        if self._credential is not None:  # past the first message
            return self._user or None
        if len(response) > SCRAM_MAX_CLIENT_FIRST_BYTES:
            return None
        first = _CLIENT_FIRST.fullmatch(bytes(response).decode("utf-8", "replace"))
        return None if first is None else first["saslname"].replace("=2C", ",").replace("=3D", "=")

    def _step(self, response: bytes) -> bytes:
        if self._credential is None and len(response) > SCRAM_MAX_CLIENT_FIRST_BYTES:
            self._fail(f"SCRAM client first message of {len(response)} bytes: at most "
                       f"{SCRAM_MAX_CLIENT_FIRST_BYTES} are read")
        try:
            message = response.decode("utf-8")
        except UnicodeDecodeError:
            self._fail("the SCRAM message is not UTF-8")
        if self._credential is None:
            return self._first(message).encode()
        return self._final(message).encode()

    def _first(self, message: str) -> str:
        first = self._check_client_first(message)
        self._user = scram.unescape_name(first["saslname"])
        try:
            credential = self._credentials.scram(self._user, self.mechanism)
        except Exception as e:  # noqa: BLE001 - whatever the store raised fails this exchange only
            self._fail(f"credentials could not be obtained for user {loggable_name(self._user)}: {type(e).__name__}")
        if credential is None:
            self._unknown_user = True
            credential = _made_up_credential(self.mechanism, self._user)
        self._credential = credential
        self._client_first_bare = message[message.index(",", message.index(",") + 1) + 1:]  # after "n,,"
        self._nonce = first["nonce"] + self._server_nonce
        self._server_first = scram.server_first_message(self._nonce, credential.salt, credential.iterations)
        return self._server_first

    def _final(self, message: str) -> str:
        assert self._credential is not None
        try:
            channel, nonce, without_proof, proof = scram.parse_client_final(message)
        except scram.ScramError as e:
            self._fail(f"SCRAM client final message refused for user {loggable_name(self._user)}: {e}")
        if channel != scram.CHANNEL_BINDING:
            self._fail(f"SCRAM client final message refused for user {loggable_name(self._user)}: invalid channel binding")
        # Kafka checks that the final nonce *ends with* the server's: librdkafka before 2.1 sends its own nonce
        # followed by the server's whole nonce (which starts with its own), and Kafka has always accepted that;
        # the proof still covers the message exactly as the client sent it.
        if not nonce.endswith(self._nonce):
            self._fail(f"SCRAM client final message refused for user {loggable_name(self._user)}: invalid nonce")
        signed = scram.auth_message(self._client_first_bare, self._server_first, without_proof)
        if not scram.proof_matches(self._hash, self._credential.stored_key, signed, proof) or self._unknown_user:
            self._fail(f"unknown user {loggable_name(self._user)}" if self._unknown_user else f"wrong password for user {loggable_name(self._user)}")
        self._succeed(self._user)
        return "v=" + scram.b64(scram.server_signature(self._hash, self._credential.server_key, signed))

    def _check_client_first(self, message: str) -> re.Match[str]:
        """Kafka's grammar and what this broker leaves out of it, refused with a reason."""
        first = _CLIENT_FIRST.fullmatch(message)
        if first is None:
            self._fail("invalid SCRAM client first message format")
        if first["flag"] != "n":
            self._fail("channel binding is not supported: the gs2 header must start with 'n'")
        if first["authzid"] is not None:
            self._fail("an authorization id in the gs2 header is not supported")
        if len(first["saslname"].encode()) > SCRAM_MAX_USERNAME_BYTES:
            self._fail(f"a SCRAM user name longer than {SCRAM_MAX_USERNAME_BYTES} bytes: "
                       f"{loggable_name(first['saslname'])}")
        items = first["extensions"].split(",")[1:]  # the group starts with a comma
        extensions = {key: value for key, _, value in (item.partition("=") for item in items)}
        if extensions.get("tokenauth", "").lower() == "true":
            self._fail("delegation token authentication (tokenauth=true) is not supported")
        if extensions:
            self._fail(f"SCRAM extensions are not supported: {sorted(extensions)}")
        return first


# OAUTHBEARER.

@dataclass(frozen=True)
class BearerToken:
    """What a valid OAUTHBEARER token says (never the token itself): whose it is and until when."""

    principal_name: str
    expires_at_ms: int  # the exp claim, in ms since the epoch
    scopes: tuple[str, ...] = ()


class InvalidBearerToken(Exception):
    """A token the validator refuses; the message is the reason for the operator's log (never the token)."""

    @property
    def reason(self) -> str:
        return str(self)


class BearerTokenValidator(Protocol):
    """Checks an OAUTHBEARER token (``oauth.JwtValidator``): its ``BearerToken`` or ``InvalidBearerToken``."""

    def validate(self, token: str) -> BearerToken: ...


# Kafka's OAuthBearerClientInitialResponse grammar (RFC 7628 section 3.1, with the gs2 flag "n" only).
_SEPARATOR = "\x01"
_KVPAIR = r"[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01"
_OAUTHBEARER_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KVPAIR})*)\x01")
_AUTH = re.compile(r"(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
INVALID_TOKEN_CHALLENGE = '{"status":"invalid_token"}'  # Kafka's JSON error challenge (RFC 7628 3.2.2)


class OAuthBearerSaslServer(SaslServer):
    mechanism = "OAUTHBEARER"
    failure_message = ("Authentication failed during authentication due to invalid credentials "
                       "with SASL mechanism OAUTHBEARER")

    def __init__(self, validator: BearerTokenValidator) -> None:
        super().__init__()
        self._validator = validator
        self._refusal: str | None = None  # why the token was refused, once the error challenge is sent

    def _step(self, response: bytes) -> bytes:
        if response == b"\x01" and self._refusal is not None:
            # The client acknowledged the error challenge: the exchange fails, telling the client only
            # what the challenge said (Kafka's message is the challenge itself).
            raise SaslAuthenticationError(INVALID_TOKEN_CHALLENGE, self._refusal)
        self._refusal = None  # Kafka takes a fresh initial response instead of the acknowledgement too
        token, authzid = self._initial_response(response)
        try:
            validated = self._validator.validate(token)
        except InvalidBearerToken as e:
            self._refusal = f"invalid OAUTHBEARER token: {e.reason}"
            return INVALID_TOKEN_CHALLENGE.encode()
        if authzid and authzid != validated.principal_name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from "
                "the token's principal name",
                f"authorization id {loggable_name(authzid)} is not the token's principal "
                f"{loggable_name(validated.principal_name)}")
        self.credential_expires_at_ms = validated.expires_at_ms
        self._succeed(validated.principal_name)
        return b""

    def _initial_response(self, response: bytes) -> tuple[str, str]:
        """(token, authzid) of the client's initial response; its extensions are accepted and ignored."""
        try:
            message = response.decode("ascii")  # the grammar is ASCII throughout
        except UnicodeDecodeError:
            self._fail("Invalid OAUTHBEARER client first message: not ASCII")
        first = _OAUTHBEARER_FIRST.fullmatch(message)
        if first is None:
            self._fail("Invalid OAUTHBEARER client first message")
        pairs = {key: value for key, _, value in (item.partition("=") for item in first["kvpairs"].split(_SEPARATOR))}
        auth = pairs.get("auth")
        if auth is None:
            self._fail("Invalid OAUTHBEARER client first message: 'auth' not specified")
        bearer = _AUTH.fullmatch(auth)
        if bearer is None:
            self._fail("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if bearer["scheme"].lower() != "bearer":
            self._fail("Invalid scheme in OAUTHBEARER client first message")
        authzid = (first["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
        return bearer["token"], authzid


# Every mechanism this broker can serve: name -> a new server for one exchange, given the listener's
# credential store and token validator (None where the listener has no OAUTHBEARER).
SaslServerFactory = Callable[[CredentialStore, BearerTokenValidator | None], SaslServer]


def _plain_server(credentials: CredentialStore, _validator: BearerTokenValidator | None) -> SaslServer:
    return PlainSaslServer(credentials.plain_users)


def _scram_server(mechanism: str) -> SaslServerFactory:
    return lambda credentials, _validator: ScramSaslServer(mechanism, credentials)


def _oauthbearer_server(_credentials: CredentialStore, validator: BearerTokenValidator | None) -> SaslServer:
    if validator is None:
        raise UnsupportedSaslMechanism("OAUTHBEARER", ())
    return OAuthBearerSaslServer(validator)


MECHANISMS: Mapping[str, SaslServerFactory] = MappingProxyType(
    {"PLAIN": _plain_server, **{name: _scram_server(name) for name in SCRAM_HASHES},
     "OAUTHBEARER": _oauthbearer_server})


def sasl_server(mechanism: str, enabled: Sequence[str], credentials: CredentialStore,
                bearer_validator: BearerTokenValidator | None = None) -> SaslServer:
    """A server for the mechanism a SaslHandshake names, if the listener enables it (``enabled``, which is
    also what the handshake's response lists)."""
    if mechanism not in enabled or mechanism not in MECHANISMS:
        raise UnsupportedSaslMechanism(mechanism, enabled)
    try:
        return MECHANISMS[mechanism](credentials, bearer_validator)
    except UnsupportedSaslMechanism:
        raise UnsupportedSaslMechanism(mechanism, enabled) from None


_NO_PASSWORD = secrets.token_hex(16)  # what an unknown PLAIN user's password is compared with
_MADE_UP_SALT_KEY = os.urandom(32)  # unknown users get the same salt each time within this process


def _made_up_credential(mechanism: str, user: str) -> ScramCredential:
    """A credential no password matches, with a salt that stays put for the name (a salt that changed
    between attempts would tell the name is unknown)."""
    size = hashlib.new(SCRAM_HASHES[mechanism]).digest_size
    salt = hmac.digest(_MADE_UP_SALT_KEY, f"{mechanism}\0{user}".encode(), "sha256")[:_SALT_BYTES]
    return ScramCredential(salt, os.urandom(size), os.urandom(size), SCRAM_DEFAULT_ITERATIONS)


def _scram_hash(mechanism: str) -> str:
    return scram.hash_name(mechanism)


def _check_iterations(iterations: int) -> None:
    if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be between {SCRAM_MIN_ITERATIONS} and {SCRAM_MAX_ITERATIONS}, "
                         f"got {iterations}")
