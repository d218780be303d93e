"""Who an HTTP API request comes from: the ``Authorization`` header checked against the server's users,
as the HTTP listener's settings (``properties.HttpSettings``) enable them.

- ``Basic`` (RFC 7617, UTF-8): a PLAIN user of the HTTP listener's JAAS entry (where PLAIN is enabled),
  compared in constant time; else a SCRAM user (where SCRAM-SHA-256 or -512 is enabled) of the server's
  ``ScramCredentialTable``, checked by deriving the SCRAM keys from the password with the stored salt and
  iterations (RFC 5802's SaltedPassword, ClientKey, StoredKey) and comparing the StoredKey in constant
  time. A name without a credential is checked against a made-up one, so it costs what a wrong password
  costs. PBKDF2 takes milliseconds, so ``verify_basic`` is blocking (the site runs it on a thread) and
  successful checks are remembered in a bounded LRU cache keyed by an HMAC of the name and password
  under a key made at start (never the password itself), each entry valid only while the user's stored
  credential is the one it was checked against: a changed or removed credential is checked again.
- ``Bearer`` (RFC 6750): a JWT checked by the OAUTHBEARER validator (``oauth.JwtValidator``, with the HTTP
  listener's ``sasl.oauthbearer.*`` settings) where OAUTHBEARER is enabled.

Every refusal is the same ``None`` to the caller (who answers 401 without saying which part was wrong);
the reason goes to the log at INFO, never with a password or a token in it.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from millrace.gateway.security.oauth import JwtValidator
from millrace.gateway.security.principal import KafkaPrincipal, user_principal
from millrace.gateway.security.properties import HttpSettings
from millrace.gateway.security.sasl import (
    SCRAM_HASHES,
    InvalidBearerToken,
    ScramCredential,
    _made_up_credential,
    scram_credential,
)
from millrace.gateway.shared.limits import loggable_name

log = logging.getLogger(__name__)

REALM = "millrace"
BASIC_CACHE_SIZE = 1024  # successful Basic checks remembered (LRU)
_NO_PASSWORD = "\0no password\0"  # compared against for unknown PLAIN users (never equal: NUL is refused)

ScramLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> credential


def scram_matches(mechanism: str, password: str, credential: ScramCredential) -> bool:
    """Blocking (PBKDF2): whether ``password`` is the one ``credential`` was made from."""
    derived = scram_credential(mechanism, password, credential.iterations, credential.salt)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


class HttpAuthenticator:
    """The HTTP listener's authentication: ``basic_credentials`` and ``verify_basic`` (blocking) for
    ``Basic``, ``verify_bearer`` (fast: one signature check) for ``Bearer``; ``challenges`` are the
    ``WWW-Authenticate`` values a 401 carries."""

    def __init__(self, settings: HttpSettings, scram: ScramLookup | None,
                 bearer: JwtValidator | None = None, cache_size: int = BASIC_CACHE_SIZE) -> None:
        """Blocking where OAUTHBEARER is enabled: the JWKS file is read (a ``JwksError`` if unusable)."""
        self._plain = settings.plain_users if "PLAIN" in settings.sasl_mechanisms else {}
        self._scram_mechanisms = tuple(m for m in settings.sasl_mechanisms if m in SCRAM_HASHES)
        self._scram = scram
        self.basic = "PLAIN" in settings.sasl_mechanisms or bool(self._scram_mechanisms)
        if bearer is None and settings.oauthbearer is not None:
            bearer = JwtValidator(settings.oauthbearer)
        self._bearer = bearer
        self._cache_key = os.urandom(32)
        self._cache: OrderedDict[bytes, tuple[str, str, ScramCredential]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # verify_basic runs on worker threads

    @property
    def challenges(self) -> list[bytes]:
        """``WWW-Authenticate`` values: Basic first (what a browser answers with its credentials prompt)."""
        values = []
        if self.basic:
            values.append(f'Basic realm="{REALM}", charset="UTF-8"'.encode())
        if self._bearer is not None:
            values.append(f'Bearer realm="{REALM}"'.encode())
        return values

    @staticmethod
    def scheme(authorization: bytes | None) -> tuple[str, str]:
        """(scheme in lower case, credentials) of an ``Authorization`` header; ("", "") if absent."""
        if not authorization:
            return "", ""
        scheme, _, credentials = authorization.decode("latin-1").strip().partition(" ")
        return scheme.lower(), credentials.strip()

    def basic_credentials(self, credentials: str) -> tuple[str, str] | None:
        """(user, password) of Basic credentials, None if they do not decode."""
        if not self.basic:
            return None
        try:
            user, colon, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, ValueError):
            return None
        if not colon or not user or not password:
            return None
        return user, password

    def verify_basic(self, user: str, password: str, client: str = "") -> KafkaPrincipal | None:
        """Blocking: the principal of a Basic user and password, None if they do not match."""
        expected = self._plain.get(user)
        if expected is not None:
            if hmac.compare_digest(password.encode(), expected.encode()):
                return user_principal(user)
            log.info("HTTP authentication from %s failed: wrong password for PLAIN user %s", client,
                     loggable_name(user))
            return None
        credentials: list[tuple[str, ScramCredential]] = []
        for mechanism in self._scram_mechanisms if self._scram is not None else ():
            credential = self._scram(user, mechanism) if self._scram is not None else None
            if credential is not None:
                credentials.append((mechanism, credential))
        key = hmac.digest(self._cache_key, f"{user}\0{password}".encode(), "sha256")
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        if cached is not None and (cached[1], cached[2]) in credentials:
            return user_principal(cached[0])
        for mechanism, credential in credentials:
            if scram_matches(mechanism, password, credential):
                with self._lock:
                    self._cache[key] = (user, mechanism, credential)
                    if len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
                return user_principal(user)
        if not credentials:
            # Costs what a wrong password costs, so the time taken does not tell which names exist.
            hmac.compare_digest(password.encode(), _NO_PASSWORD.encode())
            if self._scram_mechanisms:
                scram_matches(self._scram_mechanisms[0], password,
                              _made_up_credential(self._scram_mechanisms[0], user))
            log.info("HTTP authentication from %s failed: unknown user", client)  # the name may be a mistyped password
        else:
            log.info("HTTP authentication from %s failed: wrong password for user %s", client, loggable_name(user))
        return None

    def verify_bearer(self, token: str, client: str = "") -> KafkaPrincipal | None:
        """The principal of a Bearer JWT, None if OAUTHBEARER is not enabled or the validator refuses it."""
        if self._bearer is None or not token:
            return None
        try:
            return user_principal(self._bearer.validate(token).principal_name)
        except InvalidBearerToken as e:
            log.info("HTTP bearer token from %s refused: %s", client, e.reason)
            return None

    def __repr__(self) -> str:
        return (f"HttpAuthenticator(PLAIN users {sorted(self._plain)}, SCRAM {list(self._scram_mechanisms)}, "
                f"bearer {self._bearer is not None})")
