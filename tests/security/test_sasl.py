"""Server side SASL: PLAIN, and SCRAM-SHA-256/512 driven by scramp's client (an implementation of its own),
by RFC 7677's test vector and by the native client's SCRAM (short salts, which scramp refuses);
failures that look alike to the client, refused Kafka extensions, broken exchanges, and no password in
any message or repr."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scramp import ScramClient  # type: ignore[import-untyped]

from millrace.gateway.security.principal import KafkaPrincipal
from millrace.gateway.security.sasl import (
    MECHANISMS,
    IllegalSaslState,
    InMemoryCredentialStore,
    PlainSaslServer,
    SaslAuthenticationError,
    SaslServer,
    ScramCredential,
    ScramSaslServer,
    UnsupportedSaslMechanism,
    credential_from_salted_password,
    sasl_server,
    scram_credential,
)
from millrace.protocol.sasl import SaslClient, SaslClientError

SCRAMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret-2"}
PLAIN_FAILURE = "Authentication failed: Invalid username or password"


def scram_failure(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


@pytest.fixture
def store() -> InMemoryCredentialStore:
    store = InMemoryCredentialStore(PASSWORDS)
    for user, password in PASSWORDS.items():
        for mechanism in SCRAMS:
            store.set_scram(user, mechanism, scram_credential(mechanism, password))
    return store


def assert_no_password(*texts: object) -> None:
    for text in texts:
        for password in PASSWORDS.values():
            assert password not in str(text) and password not in repr(text)


def failure(server: SaslServer, *messages: bytes) -> SaslAuthenticationError:
    """Steps through ``messages`` and returns the failure the last one raises."""
    for message in messages[:-1]:
        server.step(message)
    with pytest.raises(SaslAuthenticationError) as caught:
        server.step(messages[-1])
    assert server.failed and not server.complete and server.principal is None
    with pytest.raises(IllegalSaslState):
        server.step(messages[-1])
    assert_no_password(caught.value, caught.value.reason, server)
    return caught.value


# PLAIN

def test_plain_success(store: InMemoryCredentialStore) -> None:
    for message in (b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"):
        server = PlainSaslServer(store.plain_users)
        assert server.step(memoryview(message)) == b""
        assert server.complete and server.principal == KafkaPrincipal("User", "alice")
        with pytest.raises(IllegalSaslState):
            server.step(message)


@pytest.mark.parametrize(("message", "reason"), [
    (b"\0alice\0bob-secret-2", "wrong password for user 'alice'"),
    (b"\0carol\0alice-secret", "unknown user 'carol'"),
    (b"bob\0alice\0alice-secret", "authorization id that is different"),
    (b"\0\0alice-secret", "username not specified"),
    (b"\0alice\0", "password not specified"),
    (b"alice\0alice-secret", "expected 3 tokens, got 2"),
    (b"\0alice\0alice-secret\0", "expected 3 tokens, got 4"),
    (b"\0alice\0\xff", "not UTF-8"),
])
def test_plain_failures_tell_the_client_one_thing(store: InMemoryCredentialStore, message: bytes,
                                                   reason: str) -> None:
    error = failure(PlainSaslServer(store.plain_users), message)
    assert str(error) == PLAIN_FAILURE
    assert reason in error.reason


@settings(max_examples=50, deadline=None)
@given(user=st.text(min_size=1).filter(lambda s: "\0" not in s),
       password=st.text(min_size=1).filter(lambda s: "\0" not in s),
       attempt=st.text(min_size=1).filter(lambda s: "\0" not in s))
def test_plain_accepts_exactly_the_password(user: str, password: str, attempt: str) -> None:
    server = PlainSaslServer({user: password})
    message = f"\0{user}\0{attempt}".encode()
    if attempt == password:
        server.step(message)
        assert server.principal == KafkaPrincipal("User", user)
    else:
        with pytest.raises(SaslAuthenticationError):
            server.step(message)


# SCRAM

def exchange(server: SaslServer, client: ScramClient) -> None:
    server_first = server.step(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.step(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # scramp checks the server's signature


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_exchange_with_scramp_client(store: InMemoryCredentialStore, mechanism: str) -> None:
    server = sasl_server(mechanism, ["PLAIN", *SCRAMS], store)
    assert not server.complete
    exchange(server, ScramClient([mechanism], "alice", "alice-secret"))
    assert server.complete and server.principal == KafkaPrincipal("User", "alice")
    with pytest.raises(IllegalSaslState):
        server.step(b"c=biws,r=x,p=AAAA")


def test_rfc7677_test_vector() -> None:
    store = InMemoryCredentialStore()
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    store.set_scram("user", "SCRAM-SHA-256", scram_credential("SCRAM-SHA-256", "pencil", 4096, salt))
    server = ScramSaslServer("SCRAM-SHA-256", store, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                       b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == (
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert server.principal == KafkaPrincipal("User", "user")


def _final_with_nonce(mechanism: str, password: str, client_first_bare: str, server_first: str, nonce: str) -> bytes:
    """A client-final message carrying ``nonce``, its proof computed over the message as sent."""
    import hmac

    hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_a_final_nonce_ending_with_the_servers_is_accepted_as_kafka_does(store: InMemoryCredentialStore,
                                                                          mechanism: str) -> None:
    """librdkafka before 2.1 sends its own nonce followed by the server's whole nonce; Kafka checks
    ``endsWith``, so must we. Any other nonce is still refused."""
    server = ScramSaslServer(mechanism, store)
    server_first = server.step(b"n,,n=alice,r=clientnonce").decode()
    full = server_first.split(",")[0][2:]
    assert server.step(_final_with_nonce(mechanism, "alice-secret", "n=alice,r=clientnonce", server_first,
                                         "clientnonce" + full)).startswith(b"v=")
    other = ScramSaslServer(mechanism, store)
    server_first = other.step(b"n,,n=alice,r=clientnonce").decode()
    full = server_first.split(",")[0][2:]
    with pytest.raises(SaslAuthenticationError):
        other.step(_final_with_nonce(mechanism, "alice-secret", "n=alice,r=clientnonce", server_first, full + "x"))


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_a_short_salt_logs_in_as_kafka_lets_it(mechanism: str) -> None:
    """AlterUserScramCredentials may store a 4-byte salt (confluent-kafka's own test sends ``b"salt"``) and
    Kafka logs its user in: so must this server, with a client computing the proof by hand, and with the
    native client's own SCRAM (which nodes use too); a wrong password still fails."""
    store = InMemoryCredentialStore()
    store.set_scram("dave", mechanism, scram_credential(mechanism, "dave-secret", 4096, b"salt"))
    server = ScramSaslServer(mechanism, store)
    server_first = server.step(b"n,,n=dave,r=clientnonce").decode()
    assert f",s={base64.b64encode(b'salt').decode()},i=4096" in server_first
    full = server_first.split(",")[0][2:]
    assert server.step(_final_with_nonce(mechanism, "dave-secret", "n=dave,r=clientnonce", server_first,
                                         full)).startswith(b"v=")
    assert server.principal == KafkaPrincipal("User", "dave")
    for password, logs_in in (("dave-secret", True), ("wrong", False)):
        client, server = SaslClient(mechanism, "dave", password), ScramSaslServer(mechanism, store)
        final = client.answer(server.step(client.first()))
        assert final is not None
        if logs_in:
            client.done(server.step(final))  # the client checks the server's signature
            assert server.principal == KafkaPrincipal("User", "dave")
        else:
            assert failure(server, final).reason == "wrong password for user 'dave'"


def test_the_client_refuses_a_server_that_does_not_check_out() -> None:
    """A server asking for fewer iterations than Kafka's minimum (a cheaper guess at the password), or whose
    final signature does not come from the credential, is refused by the client."""
    first = SaslClient("SCRAM-SHA-256", "dave", "dave-secret")
    nonce = first.first().decode().split("r=")[1]
    with pytest.raises(SaslClientError, match="fewer than 4096"):
        first.answer(f"r={nonce}x,s=c2FsdA==,i=1024".encode())
    store = InMemoryCredentialStore()
    store.set_scram("dave", "SCRAM-SHA-256", scram_credential("SCRAM-SHA-256", "other-secret"))
    client, server = SaslClient("SCRAM-SHA-256", "dave", "dave-secret"), ScramSaslServer("SCRAM-SHA-256", store)
    final = client.answer(server.step(client.first()))
    assert final is not None
    with pytest.raises(SaslClientError, match="signature does not match"):
        client.done(b"v=" + base64.b64encode(bytes(32)))


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_wrong_password_and_unknown_user_look_alike(store: InMemoryCredentialStore, mechanism: str) -> None:
    errors = []
    for user, password in (("alice", "bob-secret-2"), ("nobody", "alice-secret")):
        server = ScramSaslServer(mechanism, store)
        client = ScramClient([mechanism], user, password)
        server_first = server.step(client.get_client_first().encode())  # an unknown user gets one too
        client.set_server_first(server_first.decode())
        assert b",i=4096" in server_first
        errors.append(failure(server, client.get_client_final().encode()))
    assert [str(e) for e in errors] == [scram_failure(mechanism)] * 2
    assert [e.reason for e in errors] == ["wrong password for user 'alice'", "unknown user 'nobody'"]


def test_an_unknown_user_keeps_its_salt(store: InMemoryCredentialStore) -> None:
    salts = set()
    for _ in range(2):
        first = ScramSaslServer("SCRAM-SHA-256", store).step(b"n,,n=nobody,r=abc")
        salts.add(first.split(b",")[1])
    assert len(salts) == 1


def test_usernames_with_escaped_comma_and_equals(store: InMemoryCredentialStore) -> None:
    store.set_scram("a,b=c", "SCRAM-SHA-512", scram_credential("SCRAM-SHA-512", "odd-secret"))
    server = ScramSaslServer("SCRAM-SHA-512", store)
    client = ScramClient(["SCRAM-SHA-512"], "a,b=c", "odd-secret")
    exchange(server, client)
    assert server.principal == KafkaPrincipal("User", "a,b=c")


@pytest.mark.parametrize(("client_first", "reason"), [
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation token"),
    (b"n,,n=alice,r=abc,tokenauth=TRUE", "delegation token"),
    (b"n,,n=alice,r=abc,tokenauth=false", "extensions are not supported"),
    (b"p=tls-unique,,n=alice,r=abc", "channel binding is not supported"),
    (b"y,,n=alice,r=abc", "channel binding is not supported"),
    (b"n,a=alice,n=alice,r=abc", "authorization id"),
    (b"n,,n=al=41ice,r=abc", "invalid SCRAM client first message format"),
    (b"n,,m=x,n=alice,r=abc", "invalid SCRAM client first message format"),
    (b"n,,n=alice", "invalid SCRAM client first message format"),
    (b"n,,n=alice,r=a b", "invalid SCRAM client first message format"),
    (b"c=biws,r=abc,p=dHzb", "invalid SCRAM client first message format"),
    (b"n,,n=\xc3\xa9,r=abc", "invalid SCRAM client first message format"),  # Kafka's names are ASCII
    (b"\xff", "not UTF-8"),
    (b"", "invalid SCRAM client first message format"),
    # Bounded before the grammar and SASLprep see them (a name of 500 KB cost 0.85 s of SASLprep).
    (b"n,,n=" + b"q" * 257 + b",r=abc", "user name longer than 256 bytes"),
    (b"n,,n=" + b"q" * 500_000 + b",r=abc", "client first message of 500011 bytes"),
])
def test_refused_client_first_messages(store: InMemoryCredentialStore, client_first: bytes, reason: str) -> None:
    error = failure(ScramSaslServer("SCRAM-SHA-256", store), client_first)
    assert str(error) == scram_failure("SCRAM-SHA-256")
    assert reason in error.reason


def test_a_failing_credential_store_fails_the_exchange(store: InMemoryCredentialStore) -> None:
    class BrokenStore(InMemoryCredentialStore):
        def scram(self, user: str, mechanism: str) -> ScramCredential | None:
            raise ConnectionError("store offline")

    error = failure(ScramSaslServer("SCRAM-SHA-256", BrokenStore()), b"n,,n=alice,r=abc")
    assert error.reason == "credentials could not be obtained for user 'alice': ConnectionError"


def test_replayed_and_cut_exchanges(store: InMemoryCredentialStore) -> None:
    # A client final message recorded from a successful exchange does not open another one: the server's
    # nonce differs each time.
    server = ScramSaslServer("SCRAM-SHA-256", store)
    client = ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret", c_nonce="fixedclientnonce")
    client_first = client.get_client_first().encode()
    client.set_server_first(server.step(client_first).decode())
    client_final = client.get_client_final().encode()
    server.step(client_final)
    assert server.complete
    assert "nonce" in failure(ScramSaslServer("SCRAM-SHA-256", store), client_first, client_final).reason

    # The proof cut short, the proof missing, the client's first message sent twice.
    for cut in ("short proof", "no proof", "first again"):
        server = ScramSaslServer("SCRAM-SHA-256", store)
        client = ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
        client_first = client.get_client_first().encode()
        client.set_server_first(server.step(client_first).decode())
        without_proof, proof = client.get_client_final().encode().rsplit(b",p=", 1)
        failure(server, {"short proof": without_proof + b",p=" + proof[:8], "no proof": without_proof,
                         "first again": client_first}[cut])


def test_unsupported_mechanisms(store: InMemoryCredentialStore) -> None:
    assert list(MECHANISMS) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert isinstance(sasl_server("PLAIN", ["PLAIN"], store), PlainSaslServer)
    with pytest.raises(UnsupportedSaslMechanism) as caught:
        sasl_server("SCRAM-SHA-256", ["PLAIN"], store)
    assert caught.value.enabled == ("PLAIN",)
    with pytest.raises(UnsupportedSaslMechanism):
        sasl_server("GSSAPI", ["GSSAPI", "PLAIN"], store)
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        ScramSaslServer("SCRAM-SHA-1", store)


# Credentials

def test_scram_credential_limits_and_derivation() -> None:
    salt = b"0123456789abcdef"
    credential = scram_credential("SCRAM-SHA-512", "pw", 8192, salt)
    assert (credential.salt, credential.iterations) == (salt, 8192)
    assert len(credential.stored_key) == len(credential.server_key) == 64
    assert len(scram_credential("SCRAM-SHA-256", "pw").salt) == 32  # a fresh random salt
    assert scram_credential("SCRAM-SHA-256", "pw").salt != scram_credential("SCRAM-SHA-256", "pw").salt
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 8192)
    assert credential_from_salted_password("SCRAM-SHA-512", salted, salt, 8192) == credential
    for iterations in (4095, 16385):
        with pytest.raises(ValueError, match="between 4096 and 16384"):
            scram_credential("SCRAM-SHA-256", "pw", iterations)
    with pytest.raises(ValueError, match="must not be empty"):
        scram_credential("SCRAM-SHA-256", "pw", salt=b"")
    assert scram_credential("SCRAM-SHA-256", "pw", salt=b"salt").salt == b"salt"  # any other salt, as Kafka
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        scram_credential("PLAIN", "pw")
    assert "stored_key" not in repr(credential) and "server_key" not in repr(credential)
    assert isinstance(credential, ScramCredential)


def test_the_store(store: InMemoryCredentialStore) -> None:
    assert store.scram("alice", "SCRAM-SHA-256") is not None
    assert store.scram("alice", "PLAIN") is None
    assert store.delete_scram("alice", "SCRAM-SHA-256") and not store.delete_scram("alice", "SCRAM-SHA-256")
    assert store.scram("alice", "SCRAM-SHA-256") is None
    with pytest.raises(ValueError):
        store.set_scram("alice", "PLAIN", scram_credential("SCRAM-SHA-256", "pw"))
    assert_no_password(store, store.plain_users.keys())


def _every_failure(store: InMemoryCredentialStore) -> Iterator[BaseException]:
    for message in (b"\0alice\0bob-secret-2", b"\0nobody\0alice-secret", b"alice-secret\0alice\0alice-secret"):
        with pytest.raises(SaslAuthenticationError) as caught:
            PlainSaslServer(store.plain_users).step(message)
        yield caught.value
    for mechanism in SCRAMS:
        for user, password in (("alice", "bob-secret-2"), ("nobody", "alice-secret")):
            server = ScramSaslServer(mechanism, store)
            client = ScramClient([mechanism], user, password)
            client.set_server_first(server.step(client.get_client_first().encode()).decode())
            with pytest.raises(SaslAuthenticationError) as caught:
                server.step(client.get_client_final().encode())
            yield caught.value


def test_no_password_in_any_failure(store: InMemoryCredentialStore) -> None:
    errors = list(_every_failure(store))
    assert len(errors) == 7
    for error in errors:
        assert isinstance(error, SaslAuthenticationError)
        assert_no_password(error, error.reason, error.args)
