"""SASL/OAUTHBEARER token validation as Kafka's broker does it with OAuthBearerValidatorCallbackHandler
(KIP-768): a JWT access token signed by the identity provider, checked against the provider's public keys
(a JWKS) and the broker's expectations.

- The signature: the header's ``alg`` must be an asymmetric JWS algorithm (RS*, PS*, ES*, EdDSA; never
  ``none``, never HMAC, so a public key can never be used as a shared secret) and the key is the JWKS entry
  its ``kid`` names (without a ``kid``, the one key of the set that fits the algorithm), whose type (and
  curve) must fit the algorithm.
- The claims, through PyJWT: ``exp`` and ``iat`` required (as Kafka's jose4j consumer requires them),
  ``exp``, ``nbf`` and ``iat`` checked with ``sasl.oauthbearer.clock.skew.seconds`` of leeway; ``aud``
  must name one of ``sasl.oauthbearer.expected.audience`` (and, as in Kafka, a token with an ``aud`` is
  refused when none is configured); ``iss`` must be ``sasl.oauthbearer.expected.issuer`` when set.
- The subject claim (``sasl.oauthbearer.sub.claim.name``) is a non-blank string, the principal's name; the
  scope claim (``sasl.oauthbearer.scope.claim.name``) a string or a list of distinct non-blank strings.

The JWKS comes from a ``file:`` URL (``JwksFile``): read at start, re-read when the file changes (its
identity is checked at most once a second, and at once for an unknown ``kid``) and every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``. A file that no longer parses keeps the keys it had.

A refusal is ``InvalidBearerToken`` with a reason for the operator's log; no reason, repr or log line
carries the token.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from millrace.gateway.security.sasl import BearerToken, InvalidBearerToken

log = logging.getLogger(__name__)

# Kafka's server callback handler classes: the validator (its 4.x name and its 3.x one in the ``secured``
# package), and the unsecured one (Kafka's default without a handler), which accepts unsigned tokens.
VALIDATOR_CALLBACK_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
UNSECURED_VALIDATOR_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler")
DEFAULT_JWKS_REFRESH_MS = 3_600_000
DEFAULT_CLOCK_SKEW_SECONDS = 30
FILE_CHECK_SECONDS = 1.0  # how often the JWKS file's identity is looked at, at most (one stat)

# The header algorithms accepted, each with the key type (and EC curve) that may verify it.
_RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1", "ES256K": "secp256k1"}
ALGORITHMS = frozenset(_RSA_ALGORITHMS | set(_EC_CURVES) | {"EdDSA"})

VerificationKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey


@dataclass(frozen=True)
class OAuthBearerSettings:
    """A listener's OAUTHBEARER validation settings, by Kafka's ``sasl.oauthbearer.*`` names."""

    jwks_endpoint_url: str  # as configured, for messages
    jwks_file: str  # the file it names
    jwks_refresh_ms: int = DEFAULT_JWKS_REFRESH_MS
    expected_audiences: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    clock_skew_seconds: int = DEFAULT_CLOCK_SKEW_SECONDS

    def describe(self) -> str:
        audience = ", ".join(self.expected_audiences) or "none"
        return (f"JWKS {self.jwks_endpoint_url} (refresh {self.jwks_refresh_ms} ms); expected audience {audience}; "
                f"expected issuer {self.expected_issuer or 'any'}; subject claim {self.sub_claim_name}; "
                f"clock skew {self.clock_skew_seconds} s")


class JwksError(ValueError):
    """A JWKS document that cannot be used (names the file, never a key's material)."""


@dataclass(frozen=True)
class _JwksKey:
    kid: str | None
    key: VerificationKey
    alg: str | None  # the JWK's own "alg", which then must be the token's


def parse_jwks(text: str | bytes, source: str) -> tuple[_JwksKey, ...]:
    """The signature keys of a JWKS document; keys that are symmetric, for encryption or unreadable are
    left out (logged), and a set left with none is a ``JwksError``."""
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise JwksError(f"{source}: not JSON ({type(e).__name__})") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JwksError(f"{source}: not a JWK Set (no \"keys\" array)")
    keys: list[_JwksKey] = []
    for number, entry in enumerate(entries):
        kid = entry.get("kid") if isinstance(entry, dict) else None
        name = f"key {kid!r}" if isinstance(kid, str) else f"key #{number}"
        if not isinstance(entry, dict) or entry.get("kty") == "oct":
            log.warning("%s: %s left out: not an asymmetric key", source, name)
            continue
        if entry.get("use", "sig") != "sig":
            continue  # an encryption key: never used to verify a signature
        try:
            loaded = jwt.PyJWK(entry).key
        except (jwt.PyJWTError, ValueError, TypeError) as e:
            log.warning("%s: %s left out: %s", source, name, type(e).__name__)
            continue
        if isinstance(loaded, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
                      | ed448.Ed448PrivateKey):
            loaded = loaded.public_key()  # a published private key still verifies only as its public part
        if not isinstance(loaded, VerificationKey):
            log.warning("%s: %s left out: unsupported key type", source, name)
            continue
        alg = entry.get("alg")
        keys.append(_JwksKey(kid if isinstance(kid, str) else None, loaded, alg if isinstance(alg, str) else None))
    if not keys:
        raise JwksError(f"{source}: the JWK Set holds no usable signature key")
    return tuple(keys)


class JwksFile:
    """A JWKS read from a file and kept current: ``keys()`` re-reads it when its identity (inode, size,
    modification time) changed since the last look, at most every ``check_seconds`` unless ``now``
    is asked for, and at least every ``refresh_seconds``."""

    def __init__(self, path: str, refresh_seconds: float, *, check_seconds: float = FILE_CHECK_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._refresh_seconds = refresh_seconds
        self._check_seconds = check_seconds
        self._clock = clock
        self._identity = self._stat()
        self._keys = self._read()  # a JwksError here is the listener's configuration error
        self._checked_at = self._read_at = clock()

    def keys(self, now: bool = False) -> tuple[_JwksKey, ...]:
        """The current keys; ``now`` looks at the file even if it was looked at within the interval (a
        token names a key id the set lacks: the provider may have rotated its keys)."""
        at = self._clock()
        if now or at - self._checked_at >= self._check_seconds:
            self._checked_at = at
            identity = self._stat()
            if identity != self._identity or at - self._read_at >= self._refresh_seconds:
                self._identity, self._read_at = identity, at
                try:
                    self._keys = self._read()
                except (OSError, JwksError) as e:
                    # Keep serving with the keys known good: a half-written or broken file must not lock
                    # every client out. The next change of the file is read again.
                    log.warning("JWKS file %s not reloaded, keeping its previous keys: %s", self.path, e)
        return self._keys

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _read(self) -> tuple[_JwksKey, ...]:
        with open(self.path, "rb") as f:
            return parse_jwks(f.read(), f"JWKS file {self.path}")


class JwtValidator:
    """Validates OAUTHBEARER access tokens (signed JWTs) for one listener: ``validate`` answers the token's
    principal name and expiry, or raises ``InvalidBearerToken``."""

    def __init__(self, settings: OAuthBearerSettings, jwks: JwksFile | None = None) -> None:
        self.settings = settings
        self._jwks = jwks if jwks is not None else JwksFile(settings.jwks_file, settings.jwks_refresh_ms / 1000)

    def validate(self, token: str) -> BearerToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidBearerToken("the token is not a JWS compact serialization") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            # alg "none" and HMAC included: only the provider's private keys may sign a token.
            shown = alg if isinstance(alg, str) and len(alg) <= 16 else type(alg).__name__
            raise InvalidBearerToken(f"signature algorithm {shown!r} is not accepted (asymmetric ones only)")
        if kid is not None and not isinstance(kid, str):
            raise InvalidBearerToken("the token's kid is not a string")
        key = self._key(alg, kid)
        settings = self.settings
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[alg], leeway=settings.clock_skew_seconds,
                audience=list(settings.expected_audiences) or None, issuer=settings.expected_issuer,
                options={"require": ["exp", "iat"], "verify_sub": False, "verify_jti": False})
        except jwt.PyJWTError as e:
            raise InvalidBearerToken(_refusal(e)) from None
        subject = claims.get(settings.sub_claim_name)
        if not isinstance(subject, str) or not subject.strip():
            raise InvalidBearerToken(f"the subject claim {settings.sub_claim_name!r} is missing, not a string or blank")
        scopes = _scopes(claims.get(settings.scope_claim_name), settings.scope_claim_name)
        expires_at_ms = int(float(claims["exp"]) * 1000)
        if expires_at_ms < 0:
            raise InvalidBearerToken("the exp claim is negative")
        return BearerToken(subject.strip(), expires_at_ms, scopes)

    def _key(self, alg: str, kid: str | None) -> VerificationKey:
        """The JWKS key for the token: the one ``kid`` names (looking at the file again if the set lacks
        it), or without a kid the one key that fits ``alg``."""
        keys = self._jwks.keys()
        if kid is not None and not any(k.kid == kid for k in keys):
            keys = self._jwks.keys(now=True)
        candidates = [k for k in keys if (kid is None or k.kid == kid) and _fits(k, alg)]
        if not candidates:
            named = f"key id {kid!r}" if kid is not None and len(kid) <= 64 else "key"
            raise InvalidBearerToken(f"no {named} in the JWKS fits signature algorithm {alg}")
        if len(candidates) > 1:
            raise InvalidBearerToken(f"{len(candidates)} keys in the JWKS fit the token ({alg}, kid {kid!r})")
        return candidates[0].key

    def __repr__(self) -> str:
        return f"JwtValidator({self.settings.describe()})"


def _fits(key: _JwksKey, alg: str) -> bool:
    """Whether ``key`` may verify a signature of ``alg`` (its type and curve, and its own alg if it has one)."""
    if key.alg is not None and key.alg != alg:
        return False
    if alg in _RSA_ALGORITHMS:
        return isinstance(key.key, rsa.RSAPublicKey)
    if alg in _EC_CURVES:
        return isinstance(key.key, ec.EllipticCurvePublicKey) and key.key.curve.name == _EC_CURVES[alg]
    return alg == "EdDSA" and isinstance(key.key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey)


def _scopes(value: object, claim: str) -> tuple[str, ...]:
    """Kafka's scope rules: absent is none, a string is one scope, a list holds distinct non-blank strings."""
    if value is None:
        return ()
    items: Sequence[object] = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    scopes: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise InvalidBearerToken(f"the scope claim {claim!r} holds a blank or non-string scope")
        if item.strip() in scopes:
            raise InvalidBearerToken(f"the scope claim {claim!r} holds a scope twice")
        scopes.append(item.strip())
    return tuple(scopes)


# PyJWT's refusals in words of our own: its messages are safe today, but a reason must never be able to
# carry a part of the token, so only these fixed texts (or the exception's class) reach a log.
_REFUSALS: Mapping[type[jwt.PyJWTError], str] = {
    jwt.ExpiredSignatureError: "the token has expired (exp)",
    jwt.ImmatureSignatureError: "the token is not valid yet (nbf or iat in the future)",
    jwt.InvalidAudienceError: "the token's audience (aud) is not an expected one",
    jwt.InvalidIssuerError: "the token's issuer (iss) is not the expected one",
    jwt.InvalidSignatureError: "the token's signature does not verify",
    jwt.InvalidIssuedAtError: "the token's iat is not a number",
    jwt.InvalidAlgorithmError: "the token's algorithm does not fit its key",
    jwt.DecodeError: "the token does not decode",
}


def _refusal(error: jwt.PyJWTError) -> str:
    if isinstance(error, jwt.MissingRequiredClaimError):
        return f"the token lacks the required claim {error.claim!r}"
    for kind, text in _REFUSALS.items():
        if isinstance(error, kind):
            return text
    return f"the token is invalid ({type(error).__name__})"
