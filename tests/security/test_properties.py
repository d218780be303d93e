"""Kafka broker configuration: the .properties format as java.util.Properties reads it, --override, and
the checked security settings (listeners, protocol map, SASL, TLS, authorization), with errors and
descriptions that never show a secret."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millrace.gateway.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE
from millrace.gateway.security.principal import KafkaPrincipal
from millrace.gateway.security.properties import (
    ConfigError,
    Endpoint,
    Secret,
    SecuritySettings,
    apply_overrides,
    load_properties,
    parse_properties,
    security_settings,
)

PLAIN_JAAS = f'{PLAIN_LOGIN_MODULE} required username="admin" password="admin-secret" user_admin="admin-secret" ' \
             'user_alice="alice-secret";'
SCRAM_JAAS = f"{SCRAM_LOGIN_MODULE} required;"
CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nkey-secret-bytes\n-----END ENCRYPTED PRIVATE KEY-----\n"
SECRETS = ("admin-secret", "alice-secret", "key-secret", "store-secret")


def config_error(props: dict[str, str], match: str) -> ConfigError:
    with pytest.raises(ConfigError, match=match) as caught:
        security_settings(props)
    for secret in SECRETS:
        assert secret not in str(caught.value)
    return caught.value


# The .properties format

def test_separators_whitespace_and_comments() -> None:
    text = ("# a comment\n"
            "! another\n"
            "\n"
            "   \t\n"
            "a=1\n"
            "b: 2\n"
            "c 3\n"
            "  d   =   4  \n"
            "e\n"
            "f = = 5\n"
            "g :=6\n"
            "h\t\f7\n")
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4  ", "e": "", "f": "= 5", "g": "=6",
                                      "h": "7"}


def test_continuation_lines() -> None:
    text = ("fruits  apple, banana, \\\n"
            "        pear, \\\n"
            "  \\\n"
            "        plum\n"
            "# a comment never continues \\\n"
            "next=1\n"
            "hash=a\\\n"
            "   #b\n"
            "even=x\\\\\n"
            "after=2\n"
            "last=end\\")
    assert parse_properties(text) == {"fruits": "apple, banana, pear, plum", "next": "1", "hash": "a#b",
                                      "even": "x\\", "after": "2", "last": "end"}


def test_line_endings() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\n") == {"a": "1", "b": "2", "c": "3"}
    assert parse_properties("a=1\\\r\n  2") == {"a": "12"}


def test_escapes() -> None:
    text = (r"path=c:\\dir\\file" "\n"
            r"tab=a\tb\nc\rd\fe" "\n"
            r"uni=\u00e9\u20AC" "\n"
            r"pair=\ud83d\ude00" "\n"
            r"other=\q\"" "\n"
            r"key\ with\ spaces=v" "\n"
            r"a\=b=c" "\n"
            r"a\:b:c" "\n"
            r"\#not-a-comment=1" "\n"
            r"lead=\  two spaces" "\n")
    assert parse_properties(text) == {"path": "c:\\dir\\file", "tab": "a\tb\nc\rd\fe", "uni": "é€", "pair": "😀",
                                      "other": 'q"', "key with spaces": "v", "a=b": "c", "a:b": "c",
                                      "#not-a-comment": "1", "lead": "  two spaces"}


def test_a_repeated_key_keeps_its_last_value() -> None:
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_malformed_unicode_escape_hides_a_secret_value() -> None:
    with pytest.raises(ConfigError, match=r"ssl.key.password: malformed \\uxxxx escape in the value") as caught:
        parse_properties("ssl.key.password=key-secret\\u12")
    assert "key-secret" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"server.properties line 2: malformed \\uxxxx escape in the key"):
        parse_properties("a=1\n\\uZZZZ=2", "server.properties")


def _java_escape(text: str, key: bool) -> str:
    """What java.util.Properties.store writes (saveConvert): every space in a key, a value's leading one."""
    out = []
    for i, c in enumerate(text):
        if c == " ":
            out.append("\\ " if key or i == 0 else " ")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif c in "\\=:#!":
            out.append("\\" + c)
        elif c.isprintable() and c.isascii() or not c.isascii() and c.isalpha():
            out.append(c)
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else c)
    return "".join(out)


@given(st.dictionaries(st.text(), st.text()))
def test_what_java_writes_reads_back(props: dict[str, str]) -> None:
    text = "#comment\n" + "".join(f"{_java_escape(k, True)}={_java_escape(v, False)}\n" for k, v in props.items())
    assert parse_properties(text) == props


def test_load_a_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("listeners=PLAINTEXT://:9092\nname=é\n", encoding="utf-8")
    assert load_properties(path) == {"listeners": "PLAINTEXT://:9092", "name": "é"}
    path.write_bytes(b"name=\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_properties(str(path))


def test_overrides() -> None:
    props = {"a": "1", "b": "2"}
    assert apply_overrides(props, ["b=3", "c=x=y", "d=", "b=4"]) == {"a": "1", "b": "4", "c": "x=y", "d": ""}
    assert props == {"a": "1", "b": "2"}
    for bad in ("ssl.key.password", "=key-secret"):
        with pytest.raises(ConfigError, match="--override: item 2 is not key=value") as caught:
            apply_overrides(props, ["a=1", bad])
        assert "key-secret" not in str(caught.value)


# Listeners

def test_defaults() -> None:
    defaults = security_settings({})
    [listener] = defaults.listeners
    assert listener.endpoint == listener.advertised == Endpoint("PLAINTEXT", "", 9092)
    assert (listener.security_protocol, listener.sasl_mechanisms, listener.ssl) == ("PLAINTEXT", (), None)
    assert defaults == SecuritySettings(listeners=defaults.listeners)
    assert not defaults.authorizer_enabled and not defaults.allow_everyone_if_no_acl_found
    assert (defaults.connections_max_reauth_ms, defaults.max_connections_per_ip,
            defaults.sasl_server_max_receive_size) == (0, 2**31 - 1, 524288)


def test_listeners_and_advertised_listeners() -> None:
    s = security_settings({
        "listeners": "plaintext://127.0.0.1:9092, SSL://:9093,INTERNAL://[::1]:0,EXTERNAL://broker.example:9095",
        "advertised.listeners": "EXTERNAL://public.example:19095,SSL://[2001:db8::1]:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,internal:sasl_plaintext,EXTERNAL:PLAINTEXT",
        "ssl.keystore.location": "/etc/kafka/broker.pem",
        "sasl.jaas.config": SCRAM_JAAS,
        "inter.broker.listener.name": "internal",
    })
    assert [(str(x.endpoint), x.security_protocol) for x in s.listeners] == [
        ("PLAINTEXT://127.0.0.1:9092", "PLAINTEXT"), ("SSL://:9093", "SSL"), ("INTERNAL://[::1]:0", "SASL_PLAINTEXT"),
        ("EXTERNAL://broker.example:9095", "PLAINTEXT")]
    assert s.listener("internal").endpoint == Endpoint("INTERNAL", "::1", 0)
    assert s.listener("EXTERNAL").advertised == Endpoint("EXTERNAL", "public.example", 19095)
    assert str(s.listener("SSL").advertised) == "SSL://[2001:db8::1]:9093"
    assert s.listener("PLAINTEXT").advertised == s.listener("PLAINTEXT").endpoint
    assert s.inter_broker_listener == "INTERNAL"
    assert s.listener("INTERNAL").uses_sasl and not s.listener("INTERNAL").uses_tls
    with pytest.raises(KeyError):
        s.listener("OTHER")


def test_ports_may_be_shared_by_ipv4_and_ipv6_only() -> None:
    props = {"listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT,C:PLAINTEXT"}
    assert security_settings({**props, "listeners": "A://127.0.0.1:9092,B://[::1]:9092,C://:0"})
    assert security_settings({**props, "listeners": "A://:0,B://:0"})
    config_error({**props, "listeners": "A://:9092,B://localhost:9092"}, "share port 9092")
    config_error({**props, "listeners": "A://127.0.0.1:9092,B://10.0.0.1:9092"}, "share port 9092")


@pytest.mark.parametrize(("props", "error"), [
    ({"listeners": "PLAINTEXT:/127.0.0.1:9092"}, "is not LISTENER_NAME://host:port"),
    ({"listeners": "PLAINTEXT://127.0.0.1"}, "is not LISTENER_NAME://host:port"),
    ({"listeners": "://:9092"}, "is not LISTENER_NAME://host:port"),
    ({"listeners": "PLAINTEXT://:65536"}, "invalid port"),
    ({"listeners": "PLAINTEXT://:-1"}, "invalid port"),
    ({"listeners": "PLAINTEXT://host name:9092"}, "invalid host"),
    ({"listeners": "PLAINTEXT://[nothex]:9092"}, "invalid host"),
    ({"listeners": "PLAINTEXT://:9092,plaintext://:9093"}, "appears twice"),
    ({"listeners": " , "}, "no listener"),
    ({"listeners": "CUSTOM://:9092"}, "no security protocol for listener CUSTOM"),
    ({"listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT"}, "no security protocol for listener PLAINTEXT"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "unknown security protocol 'TLS'"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "is not LISTENER_NAME:SECURITY_PROTOCOL"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,plaintext:SSL"}, "mapped twice"),
    ({"advertised.listeners": "SSL://host:9093"}, "listener SSL is not in listeners"),
    ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "unroutable meta-address"),
    ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name='INTERNAL': not a listener"),
])
def test_listener_errors(props: dict[str, str], error: str) -> None:
    config_error(props, error)


# SASL

def test_sasl_mechanisms_default_to_those_with_a_jaas_config() -> None:
    s = security_settings({
        "listeners": "SASL_PLAINTEXT://:9092,SASL_SSL://:9093",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "sasl.jaas.config": SCRAM_JAAS,
        "ssl.keystore.location": "/k.pem",
    })
    plain = s.listener("SASL_PLAINTEXT")
    assert plain.sasl_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert dict(plain.plain_users) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert plain.login_modules["SCRAM-SHA-256"].name == SCRAM_LOGIN_MODULE
    assert s.listener("SASL_SSL").sasl_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert dict(s.listener("SASL_SSL").plain_users) == {}


def test_jaas_precedence_listener_and_mechanism_then_listener_then_global() -> None:
    other_plain = f'{PLAIN_LOGIN_MODULE} required user_bob="b";'
    base = {"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "plain",
            "sasl.jaas.config": f'{PLAIN_LOGIN_MODULE} required user_global="g";'}
    assert set(security_settings(base).listener("SASL_PLAINTEXT").plain_users) == {"global"}
    with_listener = {**base, "listener.name.sasl_plaintext.sasl.jaas.config": other_plain}
    assert set(security_settings(with_listener).listener("SASL_PLAINTEXT").plain_users) == {"bob"}
    with_mechanism = {**with_listener, "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
    assert set(security_settings(with_mechanism).listener("SASL_PLAINTEXT").plain_users) == {"admin", "alice"}


def test_enabled_mechanisms_per_listener() -> None:
    s = security_settings({
        "listeners": "SASL_PLAINTEXT://:9092,INTERNAL://:9093",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN, SCRAM-SHA-256",
        "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
        "sasl.jaas.config": SCRAM_JAAS,
    })
    assert s.listener("SASL_PLAINTEXT").sasl_mechanisms == ("SCRAM-SHA-512",)
    assert s.listener("INTERNAL").sasl_mechanisms == ("PLAIN", "SCRAM-SHA-256")


SASL = {"listeners": "SASL_PLAINTEXT://:9092"}


@pytest.mark.parametrize(("props", "error"), [
    ({**SASL, "sasl.enabled.mechanisms": "GSSAPI", "sasl.jaas.config": SCRAM_JAAS},
     "SASL mechanism GSSAPI is not supported \\(supported: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER\\)"),
    ({**SASL, "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER", "sasl.jaas.config": PLAIN_JAAS},
     "does not serve OAUTHBEARER on listener SASL_PLAINTEXT; expected "
     "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"),
    ({**SASL, "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config: SASL mechanism PLAIN is enabled on listener "
     "SASL_PLAINTEXT but has no JAAS configuration"),
    (SASL, "SASL_PLAINTEXT uses SASL but enables no mechanism"),
    ({**SASL, "sasl.enabled.mechanisms": " , "}, "enables no mechanism"),
    ({**SASL, "sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.jaas.config": PLAIN_JAAS},
     r"sasl.jaas.config=\[hidden\]: login module .*PlainLoginModule does not serve SCRAM-SHA-256"),
    ({**SASL, "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": PLAIN_JAAS},
     "does not serve SCRAM-SHA-256"),
    ({**SASL, "sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS[:-1]},
     r"listener.name.sasl_plaintext.plain.sasl.jaas.config=\[hidden\]: JAAS config entry not terminated"),
    ({**SASL, "sasl.jaas.config": PLAIN_JAAS + SCRAM_JAAS}, "2 login modules, should be 1"),
])
def test_sasl_errors(props: dict[str, str], error: str) -> None:
    config_error(props, error)


# TLS

TLS = {"listeners": "SSL://:9093,SASL_SSL://:9094", "sasl.jaas.config": SCRAM_JAAS}


def test_tls_settings_and_listener_precedence() -> None:
    s = security_settings({
        **TLS,
        "ssl.keystore.type": "pem",
        "ssl.keystore.location": "/etc/kafka/broker.pem",
        "ssl.key.password": "key-secret",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "ssl.client.auth": "required",
        "ssl.enabled.protocols": "TLSv1.3",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
        "listener.name.sasl_ssl.ssl.keystore.location": "",
        "listener.name.sasl_ssl.ssl.keystore.certificate.chain": CERT,
        "listener.name.sasl_ssl.ssl.keystore.key": KEY,
        "listener.name.sasl_ssl.ssl.principal.mapping.rules": "DEFAULT",
    })
    tls = s.listener("SSL").ssl
    assert tls is not None
    assert (tls.keystore_location, tls.keystore_key, tls.key_password) == ("/etc/kafka/broker.pem", None,
                                                                           Secret("key-secret"))
    assert (tls.truststore_location, tls.client_auth, tls.enabled_protocols) == ("/etc/kafka/ca.pem", "required",
                                                                                 ("TLSv1.3",))
    assert tls.principal_mapper.name("CN=Alice,O=Example") == "alice"
    sasl_tls = s.listener("SASL_SSL").ssl
    assert sasl_tls is not None and sasl_tls.keystore_location is None  # the listener's own setting, blank
    assert sasl_tls.keystore_certificate_chain == CERT.strip() and sasl_tls.keystore_key == Secret(KEY.strip())
    assert sasl_tls.principal_mapper.name("CN=Alice,O=Example") == "CN=Alice,O=Example"
    assert s.listener("SSL").uses_tls and not s.listener("SSL").uses_sasl


def test_sasl_ssl_asks_for_client_certificates_only_when_its_own_setting_says_so() -> None:
    base = {**TLS, "ssl.keystore.location": "/k.pem", "ssl.client.auth": "required"}
    listener_ssl = security_settings(base).listener("SASL_SSL").ssl
    assert listener_ssl is not None and listener_ssl.client_auth == "none"
    listener_ssl = security_settings({**base, "listener.name.sasl_ssl.ssl.client.auth": "Requested"}
                                     ).listener("SASL_SSL").ssl
    assert listener_ssl is not None and listener_ssl.client_auth == "requested"


KEYSTORE = {**TLS, "ssl.keystore.location": "/k.pem"}


@pytest.mark.parametrize(("props", "error"), [
    ({**KEYSTORE, "ssl.keystore.type": "JKS"}, "ssl.keystore.type='JKS': only PEM is supported"),
    ({**KEYSTORE, "listener.name.ssl.ssl.keystore.type": "PKCS12"},
     "listener.name.ssl.ssl.keystore.type='PKCS12': only PEM is supported"),
    ({**KEYSTORE, "ssl.truststore.type": "JKS"}, "only PEM is supported for the truststore"),
    ({**KEYSTORE, "ssl.keystore.password": "store-secret"},
     r"ssl.keystore.password=\[hidden\]: a keystore password cannot be specified with PEM format"),
    ({**KEYSTORE, "ssl.truststore.password": "store-secret"}, "truststore password cannot be specified"),
    (TLS, "listener SSL uses SSL and needs a key store"),
    ({**KEYSTORE, "ssl.keystore.key": KEY, "ssl.keystore.certificate.chain": CERT}, "not both"),
    ({**TLS, "ssl.keystore.key": KEY}, r"ssl.keystore.certificate.chain: .* go together"),
    ({**TLS, "ssl.keystore.key": "key-secret", "ssl.keystore.certificate.chain": CERT},
     r"ssl.keystore.key=\[hidden\]: expected PEM text with a '-----BEGIN PRIVATE KEY-----' block"),
    ({**TLS, "ssl.keystore.key": KEY, "ssl.keystore.certificate.chain": "nope"}, "BEGIN CERTIFICATE"),
    ({**KEYSTORE, "ssl.truststore.location": "/ca.pem", "ssl.truststore.certificates": CERT}, "not both"),
    ({**KEYSTORE, "ssl.client.auth": "always"}, "ssl.client.auth='always': expected one of none, requested"),
    ({**KEYSTORE, "ssl.enabled.protocols": "TLSv1.2,TLSv1.1"}, "TLSv1.1 is not supported: TLSv1.2 is the minimum"),
    ({**KEYSTORE, "ssl.enabled.protocols": ","}, "no TLS protocol enabled"),
    ({**KEYSTORE, "listener.name.ssl.ssl.principal.mapping.rules": "RULE:x"},
     "listener.name.ssl.ssl.principal.mapping.rules='RULE:x': Invalid rule"),
])
def test_tls_errors(props: dict[str, str], error: str) -> None:
    config_error(props, error)


def test_tls_protocol_names_are_normalised() -> None:
    tls = security_settings({**KEYSTORE, "ssl.enabled.protocols": "tlsv1.3, TLSv1.2,TLSV1.3"}).listener("SSL").ssl
    assert tls is not None and tls.enabled_protocols == ("TLSv1.3", "TLSv1.2")


# Authorization and limits

def test_authorization_and_limits() -> None:
    s = security_settings({
        "super.users": "User:admin;User:CN=broker,O=Example",
        "allow.everyone.if.no.acl.found": " TRUE ",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "connections.max.reauth.ms": "3600000",
        "max.connections.per.ip": "100",
        "sasl.server.max.receive.size": "65536",
    })
    assert s.super_users == {KafkaPrincipal("User", "admin"), KafkaPrincipal("User", "CN=broker,O=Example")}
    assert s.allow_everyone_if_no_acl_found and s.authorizer_enabled
    assert (s.connections_max_reauth_ms, s.max_connections_per_ip, s.sasl_server_max_receive_size) == (
        3600000, 100, 65536)
    assert not security_settings({"authorizer.class.name": "  "}).authorizer_enabled


@pytest.mark.parametrize(("props", "error"), [
    ({"super.users": "User:admin;admin"}, "super.users='User:admin;admin': expected a principal"),
    ({"allow.everyone.if.no.acl.found": "yes"}, "expected true or false"),
    ({"connections.max.reauth.ms": "-1"}, "connections.max.reauth.ms='-1': expected a whole number"),
    ({"max.connections.per.ip": "1e3"}, "expected a whole number"),
    ({"max.connections.per.ip": "2147483648"}, "expected a whole number from 0 to 2147483647"),
    ({"sasl.server.max.receive.size": "0"}, "expected a whole number from 1"),
])
def test_authorization_and_limit_errors(props: dict[str, str], error: str) -> None:
    config_error(props, error)


# Secrets

def test_no_secret_in_repr_or_describe() -> None:
    s = security_settings({
        **TLS,
        "listeners": "SSL://:9093,SASL_SSL://:9094,SASL_PLAINTEXT://:9095",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.certificate.chain": CERT,
        "ssl.keystore.key": KEY,
        "ssl.key.password": "key-secret",
        "ssl.truststore.certificates": CERT,
        "super.users": "User:admin",
    })
    described = s.describe()
    for text in (repr(s), str(s), described, repr(s.listener("SSL").ssl)):
        for secret in SECRETS:
            assert secret not in text
    assert "SASL mechanisms: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; PLAIN users: admin, alice" in described
    assert "key store inline PEM (key password set); trust store inline PEM; client auth none" in described
    assert "authorizer: off; super users: User:admin" in described
    tls = s.listener("SSL").ssl
    assert tls is not None and tls.key_password is not None
    assert str(tls.key_password) == "[hidden]" and tls.key_password.value == "key-secret"
