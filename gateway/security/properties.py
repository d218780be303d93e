"""Kafka broker configuration as an operator writes it, and the security settings read from it.

``load_properties`` reads a ``server.properties`` file with the rules of ``java.util.Properties``
(comments, the three separators, continuation lines, escapes), except that the file is UTF-8 where Java
reads ISO-8859-1: the two agree on ASCII, and UTF-8 is what an editor writes. ``apply_overrides`` adds
``key=value`` items as ``kafka-server-start.sh --override`` does. ``security_settings`` checks and types
what listeners, SASL, TLS and authorization need, with Kafka's names, defaults and precedence: a
``listener.name.<listener in lower case>.`` prefix overrides the plain property for that listener, and a
``listener.name.<listener>.<mechanism in lower case>.sasl.jaas.config`` is the one for that mechanism.

Where this broker is narrower than Kafka it says so at load: TLS key and trust stores are PEM only (Kafka's
default type is JKS: here it is PEM), and SASL serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER
only (Kafka's default mechanism is GSSAPI: here the default is every served mechanism that has a JAAS
configuration on the listener). OAUTHBEARER always validates signed JWTs (OAuthBearerValidatorCallbackHandler,
KIP-768; Kafka's default without a handler would accept unsigned ones) against a JWKS from a ``file:``
URL, its ``sasl.oauthbearer.*`` settings looked up as Kafka's handler looks them up: the listener and
mechanism's own (``listener.name.<listener>.oauthbearer.``), the listener's, then the plain property.
Files are named, not read (a JWKS file is checked to exist): loading them is the listener's business.

Every error is a ``ConfigError`` naming the property and its value, except values that are secret
(passwords, JAAS lines, private keys), which are never shown, nor by ``repr`` or ``describe()``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from millrace.gateway.security.jaas import (
    LOGIN_MODULE_MECHANISMS,
    JaasConfigError,
    LoginModule,
    parse_jaas_config,
    parse_login_module,
)
from millrace.gateway.security.oauth import (
    DEFAULT_CLOCK_SKEW_SECONDS,
    DEFAULT_JWKS_REFRESH_MS,
    UNSECURED_VALIDATOR_CALLBACK_HANDLER,
    VALIDATOR_CALLBACK_HANDLERS,
    OAuthBearerSettings,
)
from millrace.gateway.security.principal import (
    DEFAULT_SSL_PRINCIPAL_MAPPING_RULES,
    KafkaPrincipal,
    SslPrincipalMapper,
    parse_super_users,
)
from millrace.gateway.security.sasl import MECHANISMS, PlainUsers
from millrace.gateway.shared.limits import (
    AUTHENTICATION_FAILURES_MAX,
    AUTHENTICATION_FAILURES_WINDOW_MS,
    AUTHENTICATION_TIMEOUT_MS,
    CONNECTION_FAILED_AUTHENTICATION_DELAY_MS,
    CONNECTIONS_MAX_IDLE_MS,
    HTTP_MAX_REQUEST_BODY_BYTES,
    QUEUED_MAX_REQUEST_BYTES,
    SOCKET_REQUEST_MAX_BYTES,
    ConnectionLimits,
)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_LISTENERS = "PLAINTEXT://:9092"
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")  # TLS 1.2 is the oldest accepted
CLIENT_AUTH = ("none", "requested", "required")
JAVA_INT_MAX = 2**31 - 1
HIDDEN = "[hidden]"  # how a secret shows (Kafka's Password.toString)
_SECRET_SUFFIXES = ("sasl.jaas.config", ".password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
                    "ssl.truststore.certificates", "sasl.oauthbearer.client.credentials.client.secret",
                    "sasl.oauthbearer.assertion.private.key.passphrase")


def is_secret(key: str) -> bool:
    """Whether a property holds a secret (Kafka's PASSWORD-typed configs, with or without a prefix)."""
    return key.endswith(_SECRET_SUFFIXES)


class ConfigError(ValueError):
    """A property that cannot be used, named with its value (``[hidden]`` when the value is secret)."""

    def __init__(self, prop: str, value: str | None, problem: str) -> None:
        shown = "" if value is None else f"={HIDDEN if is_secret(prop) else repr(value)}"
        super().__init__(f"{prop}{shown}: {problem}")
        self.prop = prop


class Secret:
    """A secret value (a key password, a private key): ``value`` reads it, everything else shows [hidden]."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Secret({HIDDEN})"

    def __str__(self) -> str:
        return HIDDEN

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


# The .properties format.

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """The properties of a file, as ``java.util.Properties.load`` reads them (the file is UTF-8)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(os.fspath(path), None, f"not UTF-8 text (byte {e.start})") from None
    return parse_properties(text, os.fspath(path))


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """Properties text -> key -> value; a repeated key keeps its last value."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key_end = _key_end(line)
        key = _unescape(line[:key_end], f"{source} line {number}", "key")
        props[key] = _unescape(line[_value_start(line, key_end):], key, "value")
    return props


# JAAS options that hold a secret: a password, PlainLoginModule's users, an OAuth client's secret.
_SECRET_JAAS_OPTION = re.compile(r"^(?:password|user_.*|.*secret.*)$", re.IGNORECASE)


def refuse_secrets_in_overrides(overrides: Iterable[str]) -> None:
    """ConfigError for an ``--override`` item that holds a secret (a password-typed property, or a JAAS
    entry with a password or users in it): a process's command line is readable by every local user
    (``ps``, /proc/PID/cmdline) for as long as it runs, so secrets belong in the ``--config`` file.
    A JAAS entry without secrets (``ScramLoginModule required;``) may be overridden."""
    for item in overrides:
        key, _, value = item.partition("=")
        if not is_secret(key):
            continue
        if key.endswith("sasl.jaas.config"):
            try:
                modules = parse_jaas_config(value)
            except JaasConfigError:
                modules = ()  # unreadable: said so, without the value, where the properties are checked
            if not any(_SECRET_JAAS_OPTION.match(option) for module in modules for option in module.options):
                continue
        raise ConfigError("--override", None, f"{key} holds a secret, which a command line shows to every local "
                                              "user while the process runs: set it in the --config file "
                                              "(readable by the server's user only) instead")


def apply_overrides(props: Mapping[str, str], overrides: Iterable[str]) -> dict[str, str]:
    """``props`` with ``key=value`` items laid over them, later items winning (``--override``)."""
    result = dict(props)
    for number, item in enumerate(overrides, 1):
        key, equals, value = item.partition("=")
        if not equals or not key:
            # The item itself is not shown: it may be a secret that lost its key.
            raise ConfigError("--override", None, f"item {number} is not key=value")
        result[key] = value
    return result


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number of its first natural line, logical line): comments and blank lines dropped, continuation
    lines joined without their leading whitespace."""
    natural = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(natural):
        number, line = i + 1, natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue  # a comment line never continues, even when it ends with a backslash
        parts = []
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:  # an odd number of trailing backslashes
            parts.append(line[:-1])
            line = natural[i].lstrip(_WHITESPACE) if i < len(natural) else ""
            i += 1
        parts.append(line)
        yield number, "".join(parts)


def _key_end(line: str) -> int:
    """Where the key ends: at the first unescaped '=', ':' or whitespace."""
    escaped = False
    for i, c in enumerate(line):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in "=:" or c in _WHITESPACE:
            return i
    return len(line)


def _value_start(line: str, key_end: int) -> int:
    """Past the whitespace around one '=' or ':' separator (or whitespace alone) after the key."""
    if key_end == len(line):
        return key_end
    separated = line[key_end] in "=:"
    i = key_end + 1
    while i < len(line):
        c = line[i]
        if c not in _WHITESPACE:
            if separated or c not in "=:":
                break
            separated = True
        i += 1
    return i


def _unescape(text: str, where: str, part: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "\\" or i == len(text):
            out.append(c)
            continue
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i:i + 4]
            if len(digits) != 4 or not _HEX.issuperset(digits):
                raise ConfigError(where, None, f"malformed \\uxxxx escape in the {part}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    # Two \uXXXX escapes forming a UTF-16 surrogate pair are one character, as in a Java string.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


# Security settings.

@dataclass(frozen=True)
class Endpoint:
    """A listener's address. ``host`` "": bind every interface (advertised: the machine's name, which the
    caller looks up); port 0: any free port (advertised: the port bound)."""

    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class SslSettings:
    """A TLS listener's key material (PEM), client authentication and protocol versions."""

    keystore_location: str | None = None  # a PEM file holding the certificate chain and the private key
    keystore_certificate_chain: str | None = field(default=None, repr=False)  # or both inline
    keystore_key: Secret | None = None
    key_password: Secret | None = None  # decrypts the private key
    truststore_location: str | None = None  # PEM certificates of the CAs client certificates are checked with
    truststore_certificates: str | None = field(default=None, repr=False)
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = TLS_PROTOCOLS
    principal_mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)

    def describe(self) -> str:
        keystore = self.keystore_location or "inline PEM"
        truststore = self.truststore_location or ("inline PEM" if self.truststore_certificates else "none")
        return (f"key store {keystore}{' (key password set)' if self.key_password else ''}; "
                f"trust store {truststore}; client auth {self.client_auth}; "
                f"protocols {', '.join(self.enabled_protocols)}; principal mapping {list(self.principal_mapper.rules)}")


@dataclass(frozen=True)
class ListenerSettings:
    """One listener: where it binds, what it advertises and how it authenticates."""

    name: str
    endpoint: Endpoint
    advertised: Endpoint
    security_protocol: str
    sasl_mechanisms: tuple[str, ...] = ()  # enabled, in the order SaslHandshake lists them
    login_modules: Mapping[str, LoginModule] = field(default_factory=dict)  # mechanism -> its JAAS entry
    ssl: SslSettings | None = None
    oauthbearer: OAuthBearerSettings | None = None  # where OAUTHBEARER is enabled: how tokens are validated

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def plain_users(self) -> PlainUsers:
        """The PLAIN users of this listener (its PlainLoginModule's ``user_<name>`` options)."""
        module = self.login_modules.get("PLAIN")
        return MappingProxyType(module.plain_users if module else {})

    def describe(self) -> str:
        lines = [f"listener {self.endpoint} ({self.security_protocol}), advertised as {self.advertised}"]
        if self.uses_sasl:
            users = f"; PLAIN users: {', '.join(sorted(self.plain_users))}" if "PLAIN" in self.sasl_mechanisms else ""
            lines.append(f"  SASL mechanisms: {', '.join(self.sasl_mechanisms)}{users}")
        if self.oauthbearer is not None:
            lines.append(f"  OAUTHBEARER: {self.oauthbearer.describe()}")
        if self.ssl is not None:
            lines.append(f"  TLS: {self.ssl.describe()}")
        return "\n".join(lines)


HTTP_LISTENER = "HTTP"  # the HTTP API's listener name: its protocol map entry and listener.name.http. prefix
HTTP_AUTHENTICATE_READS = "millrace.http.authentication.required.for.reads"


@dataclass(frozen=True)
class HttpSettings:
    """The HTTP API's listener (bound at ``--host``:``--http-port``), configured as a Kafka listener named
    HTTP: its protocol from ``listener.security.protocol.map`` (PLAINTEXT without an entry), TLS and SASL
    settings with the ``listener.name.http.`` prefix. SASL_PLAINTEXT and SASL_SSL make it authenticate
    (HTTP Basic with the PLAIN and SCRAM users, Bearer tokens with OAUTHBEARER's validator)."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanisms: tuple[str, ...] = ()
    login_modules: Mapping[str, LoginModule] = field(default_factory=dict)
    ssl: SslSettings | None = None
    oauthbearer: OAuthBearerSettings | None = None
    authentication_required_for_reads: bool = False  # HTTP_AUTHENTICATE_READS

    @property
    def authenticates(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def plain_users(self) -> PlainUsers:
        module = self.login_modules.get("PLAIN")
        return MappingProxyType(module.plain_users if module else {})

    def describe(self) -> str:
        line = f"HTTP listener ({self.security_protocol})"
        if self.authenticates:
            line += (f": HTTP authentication with {', '.join(self.sasl_mechanisms)}; reads "
                     f"{'authenticated' if self.authentication_required_for_reads else 'open'}")
        if self.ssl is not None:
            line += f"\n  TLS: {self.ssl.describe()}"
        return line


@dataclass(frozen=True)
class SecuritySettings:
    """What a broker's listeners and authorizer are told, checked (``security_settings``)."""

    listeners: tuple[ListenerSettings, ...]
    inter_broker_listener: str | None = None
    inter_broker_protocol: str = "PLAINTEXT"  # the listener named so, without inter_broker_listener
    inter_broker_sasl_mechanism: str | None = None  # how a node logs in there, when the listener is SASL
    super_users: frozenset[KafkaPrincipal] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    authorizer_class_name: str = ""
    connections_max_reauth_ms: int = 0  # 0: sessions are never re-authenticated
    max_connections_per_ip: int = JAVA_INT_MAX
    sasl_server_max_receive_size: int = 524288  # the largest frame accepted before authentication
    http: HttpSettings = field(default_factory=HttpSettings)  # the HTTP API's listener
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)  # every listener's (``gateway.shared.limits``)

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self.authorizer_class_name)

    def listener(self, name: str) -> ListenerSettings:
        for listener in self.listeners:
            if listener.name == name.upper():
                return listener
        raise KeyError(name)

    def describe(self) -> str:
        """A few lines for a log, without a secret."""
        lines = [listener.describe() for listener in self.listeners]
        if self.inter_broker_listener:
            lines.append(f"inter-broker listener: {self.inter_broker_listener}")
        super_users = ", ".join(sorted(map(str, self.super_users))) or "none"
        lines.append(f"authorizer: {self.authorizer_class_name or 'off'}; super users: {super_users}; "
                     f"allow everyone if no ACL found: {str(self.allow_everyone_if_no_acl_found).lower()}")
        lines.append(f"connections.max.reauth.ms={self.connections_max_reauth_ms}, "
                     f"max.connections.per.ip={self.max_connections_per_ip}, "
                     f"sasl.server.max.receive.size={self.sasl_server_max_receive_size}")
        lines.append(self.limits.describe())
        lines.append(self.http.describe())
        return "\n".join(lines)


def security_settings(props: Mapping[str, str]) -> SecuritySettings:
    """The checked security settings of a broker configuration; ``ConfigError`` for anything unusable."""
    protocols = _protocol_map(props)
    endpoints = _endpoints(props, "listeners", DEFAULT_LISTENERS)
    _check_ports(props.get("listeners", DEFAULT_LISTENERS), endpoints)
    names = [e.listener for e in endpoints]
    advertised = {e.listener: e for e in _endpoints(props, "advertised.listeners", "")}
    for name, endpoint in advertised.items():
        if name not in names:
            raise ConfigError("advertised.listeners", props["advertised.listeners"],
                              f"listener {name} is not in listeners ({', '.join(names)})")
        if endpoint.host in ("0.0.0.0", "::"):
            raise ConfigError("advertised.listeners", props["advertised.listeners"],
                              f"listener {name} advertises the unroutable meta-address {endpoint.host}")
    listeners = []
    for endpoint in endpoints:
        protocol = protocols.get(endpoint.listener)
        if protocol is None:
            raise ConfigError("listener.security.protocol.map", props.get("listener.security.protocol.map"),
                              f"no security protocol for listener {endpoint.listener}")
        mechanisms, modules = _sasl(props, endpoint.listener) if protocol.startswith("SASL_") else ((), {})
        ssl = _ssl(props, endpoint.listener, protocol) if protocol in ("SSL", "SASL_SSL") else None
        oauthbearer = _oauthbearer(props, endpoint.listener) if "OAUTHBEARER" in mechanisms else None
        listeners.append(ListenerSettings(endpoint.listener, endpoint, advertised.get(endpoint.listener, endpoint),
                                          protocol, mechanisms, MappingProxyType(modules), ssl, oauthbearer))
    inter_broker = props.get("inter.broker.listener.name", "").strip().upper() or None
    if inter_broker is not None and inter_broker not in names:
        raise ConfigError("inter.broker.listener.name", props["inter.broker.listener.name"],
                          f"not a listener ({', '.join(names)})")
    try:
        super_users = parse_super_users(props.get("super.users", ""))
    except ValueError as e:
        raise ConfigError("super.users", props["super.users"], str(e)) from None
    return SecuritySettings(
        listeners=tuple(listeners),
        inter_broker_listener=inter_broker,
        inter_broker_protocol=props.get("security.inter.broker.protocol", "PLAINTEXT").strip().upper(),
        inter_broker_sasl_mechanism=props.get("sasl.mechanism.inter.broker.protocol", "").strip().upper() or None,
        super_users=super_users,
        allow_everyone_if_no_acl_found=_boolean(props, "allow.everyone.if.no.acl.found", False),
        authorizer_class_name=props.get("authorizer.class.name", "").strip(),
        connections_max_reauth_ms=_integer(props, "connections.max.reauth.ms", 0, 0, 2**63 - 1),
        max_connections_per_ip=_integer(props, "max.connections.per.ip", JAVA_INT_MAX, 0, JAVA_INT_MAX),
        sasl_server_max_receive_size=_integer(props, "sasl.server.max.receive.size", 524288, 1, JAVA_INT_MAX),
        http=_http(props, protocols, names),
        limits=connection_limits(props),
    )


def connection_limits(props: Mapping[str, str]) -> ConnectionLimits:
    """Every listener's limits (``gateway.shared.limits``), with Kafka's names where Kafka has them."""
    defaults = ConnectionLimits()
    queued = _integer(props, QUEUED_MAX_REQUEST_BYTES, defaults.queued_max_request_bytes, -1, 2**63 - 1)
    if queued == 0:
        raise ConfigError(QUEUED_MAX_REQUEST_BYTES, props[QUEUED_MAX_REQUEST_BYTES],
                          "expected -1 (no bound) or a positive number of bytes")
    return ConnectionLimits(
        socket_request_max_bytes=_integer(props, SOCKET_REQUEST_MAX_BYTES, defaults.socket_request_max_bytes,
                                          1, JAVA_INT_MAX),
        queued_max_request_bytes=queued,
        connections_max_idle_ms=_integer(props, CONNECTIONS_MAX_IDLE_MS, defaults.connections_max_idle_ms,
                                         -1, 2**63 - 1),
        authentication_timeout_ms=_integer(props, AUTHENTICATION_TIMEOUT_MS, defaults.authentication_timeout_ms,
                                           0, 2**63 - 1),
        connection_failed_authentication_delay_ms=_integer(
            props, CONNECTION_FAILED_AUTHENTICATION_DELAY_MS, defaults.connection_failed_authentication_delay_ms,
            0, JAVA_INT_MAX),
        authentication_failures_max=_integer(props, AUTHENTICATION_FAILURES_MAX,
                                             defaults.authentication_failures_max, 1, JAVA_INT_MAX),
        authentication_failures_window_ms=_integer(props, AUTHENTICATION_FAILURES_WINDOW_MS,
                                                   defaults.authentication_failures_window_ms, 0, 2**63 - 1),
        http_max_request_body_bytes=_integer(props, HTTP_MAX_REQUEST_BODY_BYTES,
                                             defaults.http_max_request_body_bytes, 0, JAVA_INT_MAX),
    )


def _http(props: Mapping[str, str], protocols: Mapping[str, str], names: list[str]) -> HttpSettings:
    """The HTTP API's listener, read as a Kafka listener named HTTP is (``HttpSettings``)."""
    if HTTP_LISTENER in names:
        raise ConfigError("listeners", props.get("listeners"), f"{HTTP_LISTENER} names the HTTP API's listener "
                                                               "(--http-port): give the Kafka listener another name")
    protocol = protocols.get(HTTP_LISTENER, "PLAINTEXT")
    mechanisms, modules = (_sasl(props, HTTP_LISTENER, millrace_listener=True) if protocol.startswith("SASL_")
                           else ((), {}))
    reads = _boolean(props, HTTP_AUTHENTICATE_READS, False)
    if reads and not mechanisms:
        raise ConfigError(HTTP_AUTHENTICATE_READS, props[HTTP_AUTHENTICATE_READS],
                          f"the HTTP listener authenticates no one: map it to SASL_SSL or SASL_PLAINTEXT in "
                          f"listener.security.protocol.map (now {protocol})")
    return HttpSettings(
        security_protocol=protocol,
        sasl_mechanisms=mechanisms,
        login_modules=MappingProxyType(modules),
        ssl=_ssl(props, HTTP_LISTENER, protocol) if protocol in ("SSL", "SASL_SSL") else None,
        oauthbearer=_oauthbearer(props, HTTP_LISTENER) if "OAUTHBEARER" in mechanisms else None,
        authentication_required_for_reads=reads,
    )


NATIVE_LISTENER = "NATIVE"  # the native protocol's listener (--native-port), secured by Kafka's names


def native_listener_settings(props: Mapping[str, str], host: str, port: int) -> ListenerSettings:
    """The native listener read as a listener named NATIVE bound on ``host:port``: its security protocol
    from ``listener.security.protocol.map`` (PLAINTEXT when the map does not name it), its SASL mechanisms,
    JAAS entries, OAUTHBEARER and TLS settings as any listener's (``listener.name.native.`` first)."""
    for endpoint in _endpoints(props, "listeners", DEFAULT_LISTENERS):
        if endpoint.listener == NATIVE_LISTENER:
            raise ConfigError("listeners", props.get("listeners"), f"{NATIVE_LISTENER} names the native "
                                                                   "listener (--native-port), not a Kafka one")
    protocol = _protocol_map(props).get(NATIVE_LISTENER, "PLAINTEXT")
    mechanisms, modules = (_sasl(props, NATIVE_LISTENER, millrace_listener=True) if protocol.startswith("SASL_")
                           else ((), {}))
    ssl = _ssl(props, NATIVE_LISTENER, protocol) if protocol in ("SSL", "SASL_SSL") else None
    oauthbearer = _oauthbearer(props, NATIVE_LISTENER) if "OAUTHBEARER" in mechanisms else None
    endpoint = Endpoint(NATIVE_LISTENER, host, port)
    return ListenerSettings(NATIVE_LISTENER, endpoint, endpoint, protocol, mechanisms, MappingProxyType(modules),
                            ssl, oauthbearer)


def _protocol_map(props: Mapping[str, str]) -> dict[str, str]:
    """``listener.security.protocol.map``: listener name -> security protocol (a set value replaces the
    default map entirely, as in Kafka)."""
    prop = "listener.security.protocol.map"
    value = props.get(prop, DEFAULT_PROTOCOL_MAP)
    result: dict[str, str] = {}
    for item in _list(value):
        name, colon, protocol = (part.strip().upper() for part in item.partition(":"))
        if not colon or not name:
            raise ConfigError(prop, value, f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(prop, value, f"unknown security protocol {protocol!r} for listener {name} "
                                           f"(one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in result:
            raise ConfigError(prop, value, f"listener {name} is mapped twice")
        result[name] = protocol
    return result


def _endpoints(props: Mapping[str, str], prop: str, default: str) -> list[Endpoint]:
    """``NAME://host:port,...``: names upper-cased, ``[v6]`` hosts unbracketed, each name once."""
    value = props.get(prop, default)
    endpoints: list[Endpoint] = []
    for item in _list(value):
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
            valid_host = _is_ipv6(host)
        else:
            valid_host = re.fullmatch(r"[0-9A-Za-z\-%._:]*", host) is not None
        if not sep or not colon or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ConfigError(prop, value, f"{item!r} is not LISTENER_NAME://host:port")
        if not valid_host:
            raise ConfigError(prop, value, f"{item!r} has an invalid host")
        if not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
            raise ConfigError(prop, value, f"{item!r} has an invalid port (0-65535, 0 for any free port)")
        if any(e.listener == name.upper() for e in endpoints):
            raise ConfigError(prop, value, f"listener {name.upper()} appears twice: each listener needs its own name")
        endpoints.append(Endpoint(name.upper(), host, int(port)))
    if prop == "listeners" and not endpoints:
        raise ConfigError(prop, value, "no listener")
    return endpoints


def _check_ports(value: str, endpoints: list[Endpoint]) -> None:
    """Each listener its own port (0 excepted), unless the two sharing it bind an IPv4 and an IPv6 address."""
    by_port: dict[int, list[Endpoint]] = {}
    for endpoint in endpoints:
        if endpoint.port:
            by_port.setdefault(endpoint.port, []).append(endpoint)
    for port, sharing in by_port.items():
        versions = sorted(_ip_version(e.host) for e in sharing)
        if len(sharing) > 1 and versions != [4, 6]:
            raise ConfigError("listeners", value, f"listeners {', '.join(e.listener for e in sharing)} share port "
                                                  f"{port}: only an IPv4 and an IPv6 address may share one")


def _sasl(props: Mapping[str, str], listener: str, *, millrace_listener: bool = False
          ) -> tuple[tuple[str, ...], dict[str, LoginModule]]:
    """A SASL listener's enabled mechanisms and each one's login module.

    ``millrace_listener``: HTTP or NATIVE, which no Kafka client's configuration mentions. They take the
    broker-wide ``sasl.enabled.mechanisms`` without a list of their own, but only the mechanisms they have
    a JAAS entry for: so a mechanism enabled for the Kafka listeners (OAUTHBEARER with its
    ``listener.name.sasl_ssl.oauthbearer.*`` entry) does not stop the server until HTTP has its own
    settings too. A list of their own is taken as a Kafka listener's is, every mechanism needing its entry."""
    prop, value = _setting(props, listener, "sasl.enabled.mechanisms")
    if millrace_listener and value is not None and prop == "sasl.enabled.mechanisms":  # the broker-wide list
        mechanisms = [m.upper() for m in _list(value)
                      if (found := _login_module(props, listener, m.upper())) and m.upper() in found[1].mechanisms]
        if not mechanisms:
            wanted = " or ".join(f"{_listener_prefix(listener)}{m.lower()}.sasl.jaas.config" for m in _list(value))
            raise ConfigError(prop, value, f"listener {listener} has a JAAS entry for none of these mechanisms: "
                                           f"set {wanted} (or {_listener_prefix(listener)}sasl.enabled.mechanisms)")
    elif value is None:  # Kafka's default is GSSAPI, not served here: every served one with a JAAS config
        mechanisms = []
        for mechanism in MECHANISMS:
            found = _login_module(props, listener, mechanism)
            # A mechanism's own JAAS property enables it; a shared one, the mechanisms its module serves.
            if found and (found[0].endswith(f".{mechanism.lower()}.sasl.jaas.config")
                          or mechanism in found[1].mechanisms):
                mechanisms.append(mechanism)
    else:
        mechanisms = [m.upper() for m in _list(value)]
        for mechanism in mechanisms:
            if mechanism not in MECHANISMS:
                raise ConfigError(prop, value, f"SASL mechanism {mechanism} is not supported "
                                               f"(supported: {', '.join(MECHANISMS)})")
    if not mechanisms:
        raise ConfigError(prop, value, f"listener {listener} uses SASL but enables no mechanism: set "
                                       f"sasl.enabled.mechanisms and a sasl.jaas.config for each")
    modules: dict[str, LoginModule] = {}
    for mechanism in dict.fromkeys(mechanisms):
        found = _login_module(props, listener, mechanism)
        if found is None:
            raise ConfigError(_listener_prefix(listener) + f"{mechanism.lower()}.sasl.jaas.config", None,
                              f"SASL mechanism {mechanism} is enabled on listener {listener} "
                              f"but has no JAAS configuration")
        jaas_prop, module = found
        if mechanism not in module.mechanisms:
            expected = next(name for name, served in LOGIN_MODULE_MECHANISMS.items() if mechanism in served)
            raise ConfigError(jaas_prop, props[jaas_prop], f"login module {module.name} does not serve "
                                                           f"{mechanism} on listener {listener}; expected {expected}")
        modules[mechanism] = module
    return tuple(modules), modules


def _login_module(props: Mapping[str, str], listener: str, mechanism: str) -> tuple[str, LoginModule] | None:
    """The JAAS entry for a mechanism on a listener and the property it came from: the listener and
    mechanism's own, else the listener's, else the broker-wide ``sasl.jaas.config``."""
    prefix = _listener_prefix(listener)
    for prop in (f"{prefix}{mechanism.lower()}.sasl.jaas.config", f"{prefix}sasl.jaas.config", "sasl.jaas.config"):
        if props.get(prop, "").strip():
            try:
                return prop, parse_login_module(props[prop])
            except JaasConfigError as e:
                raise ConfigError(prop, props[prop], str(e)) from None
    return None


# OAUTHBEARER: the validator's settings (Kafka's SaslConfigs), and the sasl.oauthbearer.* names a broker
# may carry for its own logins (inter-broker, client credentials), which the validator does not use.
_OAUTH = "sasl.oauthbearer."
_OAUTH_VALIDATOR_PROPERTIES = frozenset(_OAUTH + name for name in (
    "jwks.endpoint.url", "jwks.endpoint.refresh.ms", "jwks.endpoint.retry.backoff.ms",
    "jwks.endpoint.retry.backoff.max.ms", "expected.audience", "expected.issuer", "sub.claim.name",
    "scope.claim.name", "clock.skew.seconds", "jwt.validator.class"))
_OAUTH_LOGIN_PROPERTIES = frozenset(_OAUTH + name for name in (
    "token.endpoint.url", "header.urlencode", "scope", "jwt.retriever.class", "client.credentials.client.id",
    "client.credentials.client.secret"))
_OAUTH_LOGIN_PREFIXES = (_OAUTH + "assertion.",)
_JWT_VALIDATORS = ("org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator",
                   "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator")


def _oauthbearer(props: Mapping[str, str], listener: str) -> OAuthBearerSettings:
    """How a listener validates OAUTHBEARER tokens."""
    listener_prefix = _listener_prefix(listener)
    mechanism_prefix = f"{listener_prefix}oauthbearer."
    for key in props:
        name = key.removeprefix(mechanism_prefix).removeprefix(listener_prefix)
        known = (name in _OAUTH_VALIDATOR_PROPERTIES or name in _OAUTH_LOGIN_PROPERTIES
                 or name.startswith(_OAUTH_LOGIN_PREFIXES))
        if name.startswith(_OAUTH) and not known:
            raise ConfigError(key, props[key], f"unknown OAUTHBEARER property {name} (the validator takes "
                                               f"{', '.join(sorted(_OAUTH_VALIDATOR_PROPERTIES))})")

    def get(name: str) -> tuple[str, str | None]:
        prop = mechanism_prefix + name
        if prop in props:
            return prop, props[prop].strip() or None
        return _setting(props, listener, name)

    handler_prop, handler = get("sasl.server.callback.handler.class")
    if handler == UNSECURED_VALIDATOR_CALLBACK_HANDLER:
        raise ConfigError(handler_prop, handler, "unsecured (unsigned) OAUTHBEARER tokens are not accepted: use "
                                                 f"{VALIDATOR_CALLBACK_HANDLERS[0]} with {_OAUTH}jwks.endpoint.url")
    if handler is not None and handler not in VALIDATOR_CALLBACK_HANDLERS:
        raise ConfigError(handler_prop, handler, "custom SASL callback handlers are not supported: OAUTHBEARER "
                                                 f"is served by {VALIDATOR_CALLBACK_HANDLERS[0]}")
    validator_prop, validator = get(_OAUTH + "jwt.validator.class")
    if validator is not None and validator not in _JWT_VALIDATORS:
        raise ConfigError(validator_prop, validator, f"custom JWT validators are not supported (one of "
                                                     f"{', '.join(_JWT_VALIDATORS)})")
    url_prop, url = get(_OAUTH + "jwks.endpoint.url")
    if url is None:
        raise ConfigError(mechanism_prefix + _OAUTH + "jwks.endpoint.url", None,
                          f"OAUTHBEARER is enabled on listener {listener} and needs the identity provider's keys: "
                          "a file: URL of a JWKS (JSON Web Key Set) file")
    jwks_file = _jwks_file(url_prop, url)
    audience_prop, audience = get(_OAUTH + "expected.audience")
    sub_prop, sub_claim = get(_OAUTH + "sub.claim.name")
    scope_prop, scope_claim = get(_OAUTH + "scope.claim.name")
    for prop, value in ((sub_prop, sub_claim), (scope_prop, scope_claim)):
        if prop in props and value is None:
            raise ConfigError(prop, props[prop], "a claim name must not be blank")
    for name in ("jwks.endpoint.retry.backoff.ms", "jwks.endpoint.retry.backoff.max.ms"):
        _long_setting(get(_OAUTH + name), 0, 0)  # checked as Kafka checks them; a file needs no retries
    return OAuthBearerSettings(
        jwks_endpoint_url=url,
        jwks_file=jwks_file,
        jwks_refresh_ms=_long_setting(get(_OAUTH + "jwks.endpoint.refresh.ms"), DEFAULT_JWKS_REFRESH_MS, 0),
        expected_audiences=tuple(dict.fromkeys(_list(audience or ""))),
        expected_issuer=get(_OAUTH + "expected.issuer")[1],
        sub_claim_name=sub_claim or "sub",
        scope_claim_name=scope_claim or "scope",
        clock_skew_seconds=_long_setting(get(_OAUTH + "clock.skew.seconds"), DEFAULT_CLOCK_SKEW_SECONDS, 0,
                                         JAVA_INT_MAX),
    )


def _jwks_file(prop: str, url: str) -> str:
    """The file a ``file:`` JWKS URL names (relative to the working directory without a leading /), which
    must exist and be readable, as Kafka's ConfigurationUtils.validateFile checks."""
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme in ("http", "https"):
        raise ConfigError(prop, url, "only file: URLs are supported for the JWKS (keep the identity provider's "
                                     "JWKS in a file, e.g. refreshed by a scheduled download; it is re-read when "
                                     "it changes)")
    if scheme != "file":
        raise ConfigError(prop, url, "expected a file: URL of a JWKS file")
    if parsed.netloc not in ("", "localhost"):
        raise ConfigError(prop, url, "a file: URL names a local file (no host)")
    path = urllib.request.url2pathname(parsed.path)
    if not path:
        raise ConfigError(prop, url, "the URL names no file")
    if os.path.isdir(path):
        raise ConfigError(prop, url, f"names a directory ({path}), not a file")
    if not os.path.isfile(path):
        raise ConfigError(prop, url, f"the file {path} does not exist")
    if not os.access(path, os.R_OK):
        raise ConfigError(prop, url, f"the file {path} is not readable")
    return path


def _long_setting(setting: tuple[str, str | None], default: int, least: int, most: int = 2**63 - 1) -> int:
    prop, value = setting
    if value is None:
        return default
    if not re.fullmatch(r"[+-]?[0-9]+", value) or not least <= int(value) <= most:
        raise ConfigError(prop, value, f"expected a whole number from {least} to {most}")
    return int(value)


def _ssl(props: Mapping[str, str], listener: str, protocol: str) -> SslSettings:
    def get(name: str) -> tuple[str, str | None]:
        return _setting(props, listener, name)

    for store in ("keystore", "truststore"):
        prop, value = get(f"ssl.{store}.type")
        if value is not None and value.upper() != "PEM":
            raise ConfigError(prop, value, f"only PEM is supported for the {store} (convert JKS or PKCS12 to "
                                           "PEM, e.g. with keytool and openssl)")
        prop, value = get(f"ssl.{store}.password")
        if value is not None:
            raise ConfigError(prop, value, f"a {store} password cannot be specified with PEM format"
                              + (", only ssl.key.password may be specified" if store == "keystore" else ""))
    location, chain, key = get("ssl.keystore.location"), get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if location[1] is not None and (chain[1] is not None or key[1] is not None):
        raise ConfigError(location[0], location[1], "set either ssl.keystore.location or the inline "
                                                    "ssl.keystore.certificate.chain and ssl.keystore.key, not both")
    if location[1] is None and (chain[1] is None) != (key[1] is None):
        missing = chain if chain[1] is None else key
        raise ConfigError(missing[0], None, "ssl.keystore.certificate.chain and ssl.keystore.key go together")
    if location[1] is None and chain[1] is None:
        raise ConfigError(location[0], None, f"listener {listener} uses {protocol} and needs a key store: "
                                             "ssl.keystore.location (a PEM file with the certificate chain and "
                                             "private key) or ssl.keystore.certificate.chain and ssl.keystore.key")
    _check_pem(chain, "CERTIFICATE")
    _check_pem(key, "PRIVATE KEY")
    trust_location, trust_certificates = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if trust_location[1] is not None and trust_certificates[1] is not None:
        raise ConfigError(trust_location[0], trust_location[1],
                          "set either ssl.truststore.location or ssl.truststore.certificates, not both")
    _check_pem(trust_certificates, "CERTIFICATE")
    # Kafka ignores the plain ssl.client.auth on SASL_SSL listeners (SASL authenticates the client there):
    # only the listener's own setting asks for client certificates (KIP-684).
    client_auth_prop, client_auth = get("ssl.client.auth")
    if protocol == "SASL_SSL" and client_auth_prop == "ssl.client.auth":
        client_auth = None
    client_auth = (client_auth or "none").lower()
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(client_auth_prop, client_auth, f"expected one of {', '.join(CLIENT_AUTH)}")
    protocols_prop, protocols_value = get("ssl.enabled.protocols")
    enabled = _tls_protocols(protocols_prop, protocols_value)
    rules_prop, rules = get("ssl.principal.mapping.rules")
    try:
        mapper = SslPrincipalMapper(rules if rules is not None else DEFAULT_SSL_PRINCIPAL_MAPPING_RULES)
    except ValueError as e:
        raise ConfigError(rules_prop, rules, str(e)) from None
    key_password = get("ssl.key.password")[1]
    return SslSettings(
        keystore_location=location[1],
        keystore_certificate_chain=chain[1],
        keystore_key=Secret(key[1]) if key[1] is not None else None,
        key_password=Secret(key_password) if key_password is not None else None,
        truststore_location=trust_location[1],
        truststore_certificates=trust_certificates[1],
        client_auth=client_auth,
        enabled_protocols=enabled,
        principal_mapper=mapper,
    )


def _tls_protocols(prop: str, value: str | None) -> tuple[str, ...]:
    if value is None:
        return TLS_PROTOCOLS
    by_name = {p.lower(): p for p in TLS_PROTOCOLS}
    names = _list(value)
    for name in names:
        if name.lower() not in by_name:
            raise ConfigError(prop, value, f"{name} is not supported: TLSv1.2 is the minimum "
                                           f"(one of {', '.join(TLS_PROTOCOLS)})")
    if not names:
        raise ConfigError(prop, value, "no TLS protocol enabled")
    return tuple(dict.fromkeys(by_name[name.lower()] for name in names))


def _check_pem(setting: tuple[str, str | None], kind: str) -> None:
    """Inline PEM text has the block it should (a private key's may be "ENCRYPTED", "RSA", "EC"...)."""
    prop, value = setting
    if value is not None and not re.search(rf"-----BEGIN [A-Z ]*{kind}-----", value):
        raise ConfigError(prop, value, f"expected PEM text with a '-----BEGIN {kind}-----' block")


def _setting(props: Mapping[str, str], listener: str, name: str) -> tuple[str, str | None]:
    """A setting for a listener and the property it came from: the listener's own, if present, before the
    plain one. Values are trimmed (as Kafka's ConfigDef trims them) and blank is unset, so a listener can
    unset a broker-wide value with a blank one of its own."""
    for prop in (_listener_prefix(listener) + name, name):
        if prop in props:
            return prop, props[prop].strip() or None
    return name, None


def _listener_prefix(listener: str) -> str:
    return f"listener.name.{listener.lower()}."


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _boolean(props: Mapping[str, str], prop: str, default: bool) -> bool:
    value = props.get(prop)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ConfigError(prop, value, "expected true or false")
    return value.strip().lower() == "true"


def _integer(props: Mapping[str, str], prop: str, default: int, least: int, most: int) -> int:
    value = props.get(prop)
    if value is None:
        return default
    if not re.fullmatch(r"[+-]?[0-9]+", value.strip()) or not least <= int(value) <= most:
        raise ConfigError(prop, value, f"expected a whole number from {least} to {most}")
    return int(value)


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def _ip_version(host: str) -> int:
    """4 or 6 for an IP address literal, 0 for a name or "" (every interface)."""
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return 0
