"""SASL/OAUTHBEARER: the JWT validator (signature against the JWKS key its kid names, the time, audience,
issuer and subject claims, refused algorithms), the RFC 7628 exchange with Kafka's error challenge, the
JWKS file kept current, the listener configuration by Kafka's property names, and session lifetimes
bounded by the token. Keys are made here with ``cryptography``; nothing is mocked but the clock of the
JWKS file's checks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from millrace.gateway.kafka.sessions import KafkaListener, Session, session_lifetime_ms
from millrace.gateway.security.oauth import JwksError, JwksFile, JwtValidator, OAuthBearerSettings, parse_jwks
from millrace.gateway.security.principal import KafkaPrincipal
from millrace.gateway.security.properties import ConfigError, security_settings
from millrace.gateway.security.sasl import (
    INVALID_TOKEN_CHALLENGE,
    MECHANISMS,
    IllegalSaslState,
    InMemoryCredentialStore,
    InvalidBearerToken,
    OAuthBearerSaslServer,
    SaslAuthenticationError,
    sasl_server,
)

AUDIENCE, ISSUER = "millrace", "https://issuer.example"
GENERIC_FAILURE = "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    entry: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    return entry | {"kid": kid, "use": "sig"}


def write_jwks(path: Path, *entries: dict[str, Any]) -> None:
    """Atomically, as a provider's key rotation job would (a new inode each time)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": list(entries)}))
    os.replace(tmp, path)


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {"sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 300,
                            "scope": "produce consume"}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(key: Any, kid: str | None = "k1", alg: str = "RS256", **overrides: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims(**overrides), key, algorithm=alg, headers=headers)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade(header: dict[str, Any], signer: Callable[[bytes], bytes], **overrides: Any) -> str:
    """A JWS PyJWT would refuse to make (alg none, HMAC keyed with a public key)."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims(**overrides)).encode())}"
    return f"{signing_input}.{b64url(signer(signing_input.encode()))}"


def initial_response(token: str, authzid: str = "", extensions: str = "") -> bytes:
    authz = f"a={authzid}" if authzid else ""
    return f"n,{authz},\x01auth=Bearer {token}\x01{extensions}\x01".encode()


class Keys:
    def __init__(self, tmp_path: Path) -> None:
        self.k1, self.k2 = rsa_key(), rsa_key()
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.path = tmp_path / "jwks.json"
        write_jwks(self.path, jwk(self.k1, "k1"), jwk(self.ec, "e1"))

    def settings(self, **overrides: Any) -> OAuthBearerSettings:
        values: dict[str, Any] = {"jwks_endpoint_url": f"file:{self.path}", "jwks_file": str(self.path),
                                  "expected_audiences": (AUDIENCE,), "expected_issuer": ISSUER}
        return OAuthBearerSettings(**(values | overrides))


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@pytest.fixture
def validator(keys: Keys) -> JwtValidator:
    return JwtValidator(keys.settings())


def refusal(validator: JwtValidator, token: str) -> str:
    with pytest.raises(InvalidBearerToken) as caught:
        validator.validate(token)
    assert len(token) < 8 or token not in caught.value.reason
    return caught.value.reason


# The validator.

def test_a_good_token_names_its_subject_and_expiry(keys: Keys, validator: JwtValidator) -> None:
    exp = int(time.time()) + 600
    token = validator.validate(sign(keys.k1, exp=exp, sub=" alice "))
    assert (token.principal_name, token.expires_at_ms, token.scopes) == ("alice", exp * 1000, ("produce consume",))
    assert validator.validate(sign(keys.ec, kid="e1", alg="ES256")).principal_name == "alice"
    assert validator.validate(sign(keys.k1, alg="PS256", scope=["a", "b"])).scopes == ("a", "b")


def test_a_token_signed_by_another_key_is_refused(keys: Keys, validator: JwtValidator) -> None:
    assert "signature" in refusal(validator, sign(keys.k2, kid="k1"))
    forged = sign(keys.k1).rsplit(".", 1)[0] + "." + sign(keys.k2).rsplit(".", 1)[1]
    assert "signature" in refusal(validator, forged)


def test_an_unknown_kid_is_refused(keys: Keys, validator: JwtValidator) -> None:
    assert "'k2'" in refusal(validator, sign(keys.k2, kid="k2"))


def test_without_a_kid_the_one_key_that_fits_the_algorithm_verifies(keys: Keys, validator: JwtValidator) -> None:
    assert validator.validate(sign(keys.k1, kid=None)).principal_name == "alice"  # the one RSA key
    write_jwks(keys.path, jwk(keys.k1, "k1"), jwk(keys.k2, "k2"))
    assert "2 keys" in refusal(JwtValidator(keys.settings()), sign(keys.k1, kid=None))


def test_expired_tokens_are_refused_beyond_the_clock_skew(keys: Keys, validator: JwtValidator) -> None:
    now = int(time.time())
    assert "expired" in refusal(validator, sign(keys.k1, iat=now - 600, exp=now - 60))
    assert validator.validate(sign(keys.k1, iat=now - 600, exp=now - 10)).expires_at_ms == (now - 10) * 1000
    strict = JwtValidator(keys.settings(clock_skew_seconds=0))
    assert "expired" in refusal(strict, sign(keys.k1, iat=now - 600, exp=now - 10))


def test_tokens_not_yet_valid_are_refused(keys: Keys, validator: JwtValidator) -> None:
    now = int(time.time())
    assert "not valid yet" in refusal(validator, sign(keys.k1, nbf=now + 120))
    assert "not valid yet" in refusal(validator, sign(keys.k1, iat=now + 120))
    assert validator.validate(sign(keys.k1, nbf=now + 10, iat=now + 10)).principal_name == "alice"  # within skew


def test_exp_and_iat_are_required(keys: Keys, validator: JwtValidator) -> None:
    assert "'exp'" in refusal(validator, sign(keys.k1, exp=None))
    assert "'iat'" in refusal(validator, sign(keys.k1, iat=None))


def test_the_audience_must_be_an_expected_one(keys: Keys, validator: JwtValidator) -> None:
    assert "audience" in refusal(validator, sign(keys.k1, aud="someone-else"))
    assert "'aud'" in refusal(validator, sign(keys.k1, aud=None))
    assert validator.validate(sign(keys.k1, aud=["other", AUDIENCE])).principal_name == "alice"
    several = JwtValidator(keys.settings(expected_audiences=("a", "b")))
    assert several.validate(sign(keys.k1, aud="b")).principal_name == "alice"
    # As Kafka (jose4j): without an expected audience, a token naming one is refused.
    assert "audience" in refusal(JwtValidator(keys.settings(expected_audiences=())), sign(keys.k1))
    assert JwtValidator(keys.settings(expected_audiences=())).validate(sign(keys.k1, aud=None))


def test_the_issuer_must_be_the_expected_one(keys: Keys, validator: JwtValidator) -> None:
    assert "issuer" in refusal(validator, sign(keys.k1, iss="https://evil.example"))
    assert "'iss'" in refusal(validator, sign(keys.k1, iss=None))
    assert JwtValidator(keys.settings(expected_issuer=None)).validate(sign(keys.k1, iss="anyone"))


def test_the_subject_claim_is_required(keys: Keys, validator: JwtValidator) -> None:
    assert "subject" in refusal(validator, sign(keys.k1, sub=None))
    assert "subject" in refusal(validator, sign(keys.k1, sub="  "))
    assert "subject" in refusal(validator, sign(keys.k1, sub=42))
    custom = JwtValidator(keys.settings(sub_claim_name="client_id"))
    assert custom.validate(sign(keys.k1, client_id="svc-1")).principal_name == "svc-1"
    assert "'client_id'" in refusal(custom, sign(keys.k1))


def test_bad_scopes_are_refused(keys: Keys, validator: JwtValidator) -> None:
    assert "scope" in refusal(validator, sign(keys.k1, scope=["a", "a"]))
    assert "scope" in refusal(validator, sign(keys.k1, scope=["a", ""]))


def test_alg_none_is_refused(keys: Keys, validator: JwtValidator) -> None:
    for alg in ("none", "None", "NONE"):
        token = handmade({"alg": alg, "kid": "k1", "typ": "JWT"}, lambda _data: b"")
        assert "not accepted" in refusal(validator, token)


def test_hmac_keyed_with_the_public_key_is_refused(keys: Keys, validator: JwtValidator) -> None:
    """The classic confusion attack: the public key (as PEM, or as the JWK's modulus) used as an HS256 secret."""
    pem = keys.k1.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for secret in (pem, json.dumps(jwk(keys.k1, "k1")).encode()):
        token = handmade({"alg": "HS256", "kid": "k1"}, lambda data, s=secret: hmac.digest(s, data, hashlib.sha256))
        assert "not accepted" in refusal(validator, token)
    # A symmetric key in the JWKS is never loaded either.
    write_jwks(keys.path, {"kty": "oct", "kid": "h1", "k": b64url(b"shared")}, jwk(keys.k1, "k1"))
    token = handmade({"alg": "HS256", "kid": "h1"}, lambda data: hmac.digest(b"shared", data, hashlib.sha256))
    assert "not accepted" in refusal(JwtValidator(keys.settings()), token)


def test_the_algorithm_must_fit_the_key(keys: Keys, validator: JwtValidator) -> None:
    ec_key = ec.generate_private_key(ec.SECP384R1())
    write_jwks(keys.path, jwk(keys.k1, "k1"), jwk(ec_key, "e384") | {"alg": "ES384"})
    strict = JwtValidator(keys.settings())
    # A P-384 key for an ES256 header (PyJWT would not sign it: the key is refused before the signature).
    assert "fits" in refusal(strict, handmade({"alg": "ES256", "kid": "e384"}, lambda _d: b"s" * 64))
    assert "fits" in refusal(strict, sign(ec_key, kid="k1", alg="ES384"))  # an RSA key for an EC alg
    assert strict.validate(sign(ec_key, kid="e384", alg="ES384")).principal_name == "alice"


def test_garbage_is_refused(validator: JwtValidator) -> None:
    for token in ("", "abc", "a.b.c", "eyJhbGciOiJSUzI1NiJ9.e30"):
        refusal(validator, token)


# The JWKS file.

class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_jwks_rotation_is_picked_up(keys: Keys) -> None:
    clock = FakeClock()
    jwks = JwksFile(str(keys.path), refresh_seconds=3600, clock=clock)
    validator = JwtValidator(keys.settings(), jwks)
    old = sign(keys.k1)
    assert validator.validate(old).principal_name == "alice"
    write_jwks(keys.path, jwk(keys.k2, "k2"))  # the provider rotates: k2 in, k1 out
    # A token naming the new key makes the file be looked at at once.
    assert validator.validate(sign(keys.k2, kid="k2")).principal_name == "alice"
    refusal(validator, old)
    # Back to k1 under the same kid as before: seen at the next check, without a new kid to trigger it.
    write_jwks(keys.path, jwk(keys.k1, "k2"))
    refusal(validator, sign(keys.k1, kid="k2"))  # within the check interval: the file is not looked at
    clock.now += 1.5
    assert validator.validate(sign(keys.k1, kid="k2")).principal_name == "alice"


def test_jwks_is_reread_every_refresh_interval(keys: Keys) -> None:
    clock = FakeClock()
    jwks = JwksFile(str(keys.path), refresh_seconds=60, check_seconds=3600, clock=clock)
    stat = os.stat(keys.path)
    keys.path.write_text(json.dumps({"keys": [jwk(keys.k2, "k1")]}).ljust(stat.st_size)[:stat.st_size])
    os.utime(keys.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same size and mtime: looks unchanged
    assert jwks.keys()[0].key.public_numbers() == keys.k1.public_key().public_numbers()
    clock.now += 3601
    assert jwks.keys()[0].key.public_numbers() == keys.k2.public_key().public_numbers()


def test_a_broken_jwks_file_keeps_the_previous_keys(keys: Keys) -> None:
    clock = FakeClock()
    validator = JwtValidator(keys.settings(), JwksFile(str(keys.path), 3600, clock=clock))
    keys.path.write_text('{"keys": [')
    clock.now += 2
    assert validator.validate(sign(keys.k1)).principal_name == "alice"
    keys.path.unlink()
    clock.now += 2
    assert validator.validate(sign(keys.k1)).principal_name == "alice"


def test_unusable_jwks_documents(tmp_path: Path) -> None:
    for text in ("not json", "[]", '{"keys": 1}', '{"keys": []}', '{"keys": [{"kty": "oct", "k": "AA"}]}',
                 '{"keys": [{"kty": "RSA", "n": "x"}]}'):
        with pytest.raises(JwksError):
            parse_jwks(text, "test")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(JwksError, match="bad.json"):
        JwksFile(str(tmp_path / "bad.json"), 60)


# The SASL exchange.

def server(validator: JwtValidator) -> OAuthBearerSaslServer:
    made = sasl_server("OAUTHBEARER", ["PLAIN", "OAUTHBEARER"], InMemoryCredentialStore(), validator)
    assert isinstance(made, OAuthBearerSaslServer)
    return made


def test_the_exchange_answers_empty_and_names_the_principal(keys: Keys, validator: JwtValidator) -> None:
    exp = int(time.time()) + 120
    exchange = server(validator)
    ext = "traceId=abc 123\x01tenant=t1\x01"
    assert exchange.step(initial_response(sign(keys.k1, exp=exp), extensions=ext)) == b""
    assert exchange.complete and exchange.principal == KafkaPrincipal("User", "alice")
    assert exchange.credential_expires_at_ms == exp * 1000
    with pytest.raises(IllegalSaslState):
        exchange.step(b"\x01")


def test_an_invalid_token_gets_the_error_challenge_then_fails(keys: Keys, validator: JwtValidator) -> None:
    exchange = server(validator)
    token = sign(keys.k1, aud="other")
    assert exchange.step(initial_response(token)) == b'{"status":"invalid_token"}'
    assert not exchange.complete and not exchange.failed
    with pytest.raises(SaslAuthenticationError) as caught:
        exchange.step(b"\x01")
    # The client learns what Kafka tells it, the challenge; the log learns which check failed.
    assert caught.value.message == INVALID_TOKEN_CHALLENGE
    assert "audience" in caught.value.reason and token not in caught.value.reason
    assert exchange.failed and exchange.principal is None
    with pytest.raises(IllegalSaslState):
        exchange.step(initial_response(sign(keys.k1)))


def test_every_invalid_token_reads_alike_to_the_client(keys: Keys, validator: JwtValidator) -> None:
    now = int(time.time())
    tokens = [sign(keys.k2), sign(keys.k2, kid="k9"), sign(keys.k1, exp=now - 100), sign(keys.k1, iss="x"),
              sign(keys.k1, sub=None), handmade({"alg": "none"}, lambda _d: b"")]
    for token in tokens:
        exchange = server(validator)
        assert exchange.step(initial_response(token)) == INVALID_TOKEN_CHALLENGE.encode()
        with pytest.raises(SaslAuthenticationError, match='^{"status":"invalid_token"}$'):
            exchange.step(b"\x01")


def test_a_fresh_initial_response_after_the_challenge_is_taken(keys: Keys, validator: JwtValidator) -> None:
    """As Kafka's OAuthBearerSaslServer: anything but the acknowledgement is a new initial response."""
    exchange = server(validator)
    assert exchange.step(initial_response(sign(keys.k2))) == INVALID_TOKEN_CHALLENGE.encode()
    assert exchange.step(initial_response(sign(keys.k1))) == b"" and exchange.complete


@pytest.mark.parametrize("message", [
    b"", b"\x01", b"n,,\x01\x01", b"n,,\x01auth=Bearer\x01\x01", b"n,,\x01auth=Basic abc\x01\x01",
    b"y,,\x01auth=Bearer abc\x01\x01", b"p=tls-unique,,\x01auth=Bearer abc\x01\x01",
    b"n,,auth=Bearer abc\x01\x01", b"n,,\x01auth=Bearer abc\x01", b"n,,\x01auth=Bearer a b\x01\x01",
    b"n,,\x01host=x\x01\x01", b"n,,\x01auth=Bearer abc\x011bad=x\x01\x01", "n,,\x01auth=Bearer é\x01\x01".encode(),
    b"\xff\xfe",
])
def test_malformed_client_messages_fail_with_the_generic_message(validator: JwtValidator, message: bytes) -> None:
    exchange = server(validator)
    with pytest.raises(SaslAuthenticationError) as caught:
        exchange.step(message)
    assert caught.value.message == GENERIC_FAILURE
    assert exchange.failed


def test_the_authzid_must_be_the_subject(keys: Keys, validator: JwtValidator) -> None:
    assert server(validator).step(initial_response(sign(keys.k1), authzid="alice")) == b""
    exchange = server(validator)
    with pytest.raises(SaslAuthenticationError) as caught:
        exchange.step(initial_response(sign(keys.k1), authzid="bob"))
    assert "authorization id" in caught.value.message and "bob" not in caught.value.message
    assert "'bob'" in caught.value.reason and exchange.failed
    escaped = server(validator)
    assert escaped.step(initial_response(sign(keys.k1, sub="a,b=c"), authzid="a=2Cb=3Dc")) == b""


def test_oauthbearer_is_served_only_where_enabled_and_configured(validator: JwtValidator) -> None:
    from millrace.gateway.security.sasl import UnsupportedSaslMechanism

    assert "OAUTHBEARER" in MECHANISMS
    with pytest.raises(UnsupportedSaslMechanism):
        sasl_server("OAUTHBEARER", ["PLAIN"], InMemoryCredentialStore(), validator)
    with pytest.raises(UnsupportedSaslMechanism):
        sasl_server("OAUTHBEARER", ["OAUTHBEARER"], InMemoryCredentialStore(), None)


# Sessions.

def test_session_lifetime_is_the_lesser_of_token_and_reauth() -> None:
    now = 1_000_000_000_000
    assert session_lifetime_ms(0, None, now) is None
    assert session_lifetime_ms(5000, None, now) == 5000
    assert session_lifetime_ms(0, now + 7000, now) == 7000
    assert session_lifetime_ms(5000, now + 7000, now) == 5000
    assert session_lifetime_ms(9000, now + 7000, now) == 7000
    assert session_lifetime_ms(9000, now - 10, now) == 0


def test_a_token_session_ends_with_the_token_and_may_reauthenticate(keys: Keys, validator: JwtValidator) -> None:
    listener = KafkaListener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 9092, ("OAUTHBEARER",),
                             InMemoryCredentialStore(), bearer_validator=validator)
    session = Session(listener, close=lambda: None)
    session.handshake("OAUTHBEARER")
    answer, lifetime = session.authenticate(initial_response(sign(keys.k1, exp=int(time.time()) + 60)))
    assert answer == b"" and 55_000 < lifetime <= 60_000
    assert session.authenticated and session.ends and session.principal == KafkaPrincipal("User", "alice")
    session.handshake("OAUTHBEARER")  # re-authentication before the token ends
    with pytest.raises(SaslAuthenticationError):
        session.authenticate(initial_response(sign(keys.k1, sub="bob")))  # as another principal


def test_an_expired_session_admits_only_reauthentication(keys: Keys, validator: JwtValidator) -> None:
    listener = KafkaListener("L", "SASL_PLAINTEXT", "h", 1, ("OAUTHBEARER",), InMemoryCredentialStore(),
                             bearer_validator=validator)
    session = Session(listener, close=lambda: None)
    session.handshake("OAUTHBEARER")
    now = int(time.time())
    # Expired 5 s ago: inside the clock skew the validator takes it, and the session has already ended.
    assert session.authenticate(initial_response(sign(keys.k1, iat=now - 60, exp=now - 5))) == (b"", 0)
    assert not session.admits(3) and session.admits(17)


# Configuration.

JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


def oauth_props(jwks: Path, **extra: str) -> dict[str, str]:
    return {"listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "listener.security.protocol.map": "SASL_SSL:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";',
            "listener.name.sasl_ssl.plain.sasl.jaas.config":
                'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";',
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": HANDLER,
            "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
            "sasl.oauthbearer.expected.audience": "kafka, millrace",
            "sasl.oauthbearer.expected.issuer": ISSUER, **extra}


def test_settings_by_kafka_names_with_listener_precedence(keys: Keys) -> None:
    other = keys.path.with_name("other.json")
    write_jwks(other, jwk(keys.k2, "k2"))
    settings = security_settings(oauth_props(
        keys.path, **{"listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": f"file:{other}",
                      "listener.name.sasl_ssl.sasl.oauthbearer.clock.skew.seconds": "5",
                      "sasl.oauthbearer.sub.claim.name": "client_id",
                      "sasl.oauthbearer.jwks.endpoint.refresh.ms": "60000",
                      "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"}))
    plaintext, ssl = settings.listener("SASL_PLAINTEXT").oauthbearer, settings.listener("SASL_SSL").oauthbearer
    assert plaintext is not None and ssl is not None
    assert (plaintext.jwks_file, plaintext.expected_audiences, plaintext.expected_issuer) == (
        str(keys.path), ("kafka", "millrace"), ISSUER)
    assert (plaintext.sub_claim_name, plaintext.scope_claim_name, plaintext.clock_skew_seconds,
            plaintext.jwks_refresh_ms) == ("client_id", "scope", 30, 60000)
    assert (ssl.jwks_file, ssl.clock_skew_seconds) == (str(other), 5)
    assert "OAUTHBEARER: JWKS file:" in settings.describe()
    # Without sasl.enabled.mechanisms, the mechanism's own JAAS property enables it.
    props = oauth_props(keys.path)
    del props["sasl.enabled.mechanisms"]
    assert "OAUTHBEARER" in security_settings(props).listener("SASL_SSL").sasl_mechanisms


def test_relative_file_urls_are_relative_to_the_working_directory(keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(keys.path.parent)
    settings = security_settings(oauth_props(keys.path, **{"sasl.oauthbearer.jwks.endpoint.url": "file:jwks.json"}))
    oauth = settings.listener("SASL_SSL").oauthbearer
    assert oauth is not None and oauth.jwks_file == "jwks.json"
    assert JwtValidator(oauth).validate(sign(keys.k1, aud="kafka")).principal_name == "alice"


@pytest.mark.parametrize(("change", "prop", "problem"), [
    ({"sasl.oauthbearer.jwks.endpoint.url": ""}, "jwks.endpoint.url", "JWKS"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/jwks"}, "jwks.endpoint.url", "only file: URLs"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "ftp://x/jwks"}, "jwks.endpoint.url", "file: URL"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "file:/no/such/jwks.json"}, "jwks.endpoint.url", "does not exist"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "file:/tmp"}, "jwks.endpoint.url", "directory"),
    ({"sasl.oauthbearer.clock.skew.seconds": "soon"}, "clock.skew.seconds", "whole number"),
    ({"sasl.oauthbearer.clock.skew.seconds": "-1"}, "clock.skew.seconds", "whole number"),
    ({"sasl.oauthbearer.jwks.endpoint.refresh.ms": "x"}, "refresh.ms", "whole number"),
    ({"sasl.oauthbearer.sub.claim.name": " "}, "sub.claim.name", "blank"),
    ({"sasl.oauthbearer.expectd.audience": "kafka"}, "expectd.audience", "unknown OAUTHBEARER property"),
    ({"listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.bogus": "1"}, "bogus", "unknown OAUTHBEARER property"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
      "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"},
     "callback.handler.class", "unsecured"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "com.example.Mine"},
     "callback.handler.class", "not supported"),
    ({"listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
      "org.apache.kafka.common.security.plain.PlainLoginModule required;"}, "sasl.jaas.config", "does not serve"),
])
def test_unusable_oauthbearer_settings(keys: Keys, change: dict[str, str], prop: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        security_settings(oauth_props(keys.path, **change))
    assert prop in caught.value.prop and problem in str(caught.value), str(caught.value)


def test_a_listener_reads_its_jwks_at_start(keys: Keys) -> None:
    settings = security_settings(oauth_props(keys.path)).listener("SASL_PLAINTEXT")
    listener = KafkaListener.from_settings(settings, "127.0.0.1", 9092, InMemoryCredentialStore(), 0, 524288)
    assert listener.bearer_validator is not None
    assert listener.bearer_validator.validate(sign(keys.k1, aud="kafka")).principal_name == "alice"
    keys.path.write_text("{}")
    with pytest.raises(JwksError):
        KafkaListener.from_settings(settings, "127.0.0.1", 9092, InMemoryCredentialStore(), 0, 524288)
