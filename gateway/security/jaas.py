"""JAAS configuration as Kafka accepts it in ``sasl.jaas.config``:

    org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

A login module class, a control flag (required, requisite, sufficient, optional; any case) and
``key=value`` options, ended by ``;``. The tokens are those of Java's ``StreamTokenizer`` as Kafka's
``JaasConfig`` sets it up: values are bare words or single- or double-quoted strings with its escapes
(``\\"``, ``\\n``, octal...), and ``//`` and ``/* */`` comments are skipped. One leniency: a bare value may
start with a digit (``iterations=4096``), where Java's tokenizer would read a number and Kafka refuses it.
The text holds passwords, so an error says where it went wrong, never what it read there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The SASL mechanisms each of Kafka's login modules stands for on a broker.
LOGIN_MODULE_MECHANISMS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    PLAIN_LOGIN_MODULE: ("PLAIN",),
    SCRAM_LOGIN_MODULE: ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    OAUTHBEARER_LOGIN_MODULE: ("OAUTHBEARER",),
})
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_USER_PREFIX = "user_"  # PlainLoginModule's user_<name>="<password>": the PLAIN users a broker accepts

_WORD = re.compile(r"[\w.$-]+")
_OCTAL = "01234567"
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", "f": "\f", "r": "\r", "a": "\a", "v": "\v"}


class JaasConfigError(ValueError):
    """A JAAS text that does not parse; the message gives an offset, never the text (it holds passwords)."""


@dataclass(frozen=True)
class LoginModule:
    """One entry: the login module's class, its control flag (lower case) and its options."""

    name: str
    flag: str
    options: Mapping[str, str]

    def __repr__(self) -> str:
        # Option values are passwords more often than not: only their names are shown.
        return f"LoginModule({self.name!r}, {self.flag!r}, options={sorted(self.options)})"

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The SASL mechanisms this module stands for (none for a module Kafka does not ship)."""
        return LOGIN_MODULE_MECHANISMS.get(self.name, ())

    @property
    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>`` options as name -> password; empty for other modules."""
        if self.name != PLAIN_LOGIN_MODULE:
            return {}
        prefix = len(PLAIN_USER_PREFIX)
        return {key[prefix:]: value for key, value in self.options.items()
                if key.startswith(PLAIN_USER_PREFIX) and len(key) > prefix}


def parse_jaas_config(text: str) -> tuple[LoginModule, ...]:
    """Every login module entry of a JAAS text, in order (at least one)."""
    tokens = list(_tokens(text))
    modules: list[LoginModule] = []
    pos = 0
    while pos < len(tokens):
        kind, name, offset = tokens[pos]
        if kind != "word":
            raise JaasConfigError(f"expected a login module class at offset {offset}")
        if pos + 1 == len(tokens):
            raise JaasConfigError("login module control flag not specified")
        kind, flag, offset = tokens[pos + 1]
        if kind != "word" or flag.lower() not in CONTROL_FLAGS:
            raise JaasConfigError(f"invalid login module control flag at offset {offset}: "
                                  f"expected one of {', '.join(CONTROL_FLAGS)}")
        pos += 2
        options: dict[str, str] = {}
        while True:
            if pos == len(tokens):
                raise JaasConfigError("JAAS config entry not terminated by semi-colon")
            kind, key, offset = tokens[pos]
            if kind == ";":
                pos += 1
                break
            if kind not in ("word", "string"):
                raise JaasConfigError(f"expected an option name at offset {offset}")
            equals = tokens[pos + 1][0] if pos + 1 < len(tokens) else None
            value = tokens[pos + 2] if pos + 2 < len(tokens) else None
            if equals != "=" or value is None or value[0] not in ("word", "string"):
                raise JaasConfigError(f"value not specified for option {key!r}")
            options[key] = value[1]  # a repeated option: the last one counts, as in Kafka's map
            pos += 3
        modules.append(LoginModule(name, flag.lower(), MappingProxyType(options)))
    if not modules:
        raise JaasConfigError("login module not specified")
    return tuple(modules)


def parse_login_module(text: str) -> LoginModule:
    """The one login module of a ``sasl.jaas.config`` value (Kafka allows exactly one there)."""
    modules = parse_jaas_config(text)
    if len(modules) != 1:
        raise JaasConfigError(f"contains {len(modules)} login modules, should be 1 module")
    return modules[0]


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, value, offset) with kind "word", "string", "=" or ";"; whitespace and comments skipped."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace() or c < " ":
            i += 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasConfigError(f"comment at offset {i} is not closed")
            i = end + 2
        elif c in "=;":
            yield c, c, i
            i += 1
        elif c in "\"'":
            value, end = _quoted(text, i)
            yield "string", value, i
            i = end
        elif match := _WORD.match(text, i):
            yield "word", match.group(), i
            i = match.end()
        else:
            raise JaasConfigError(f"unexpected character at offset {i}")


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The string quoted at ``start`` with StreamTokenizer's escapes, and the offset after its closing quote."""
    quote, i = text[start], start + 1
    out: list[str] = []
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c in "\r\n":
            break  # StreamTokenizer ends a quoted string at the end of the line
        if c == "\\" and i + 1 < len(text):
            i += 1
            c = text[i]
            if c in _OCTAL:  # \ooo: three digits when the first is 0-3, else two
                end = i + 1
                while end < min(len(text), i + (3 if c <= "3" else 2)) and text[end] in _OCTAL:
                    end += 1
                out.append(chr(int(text[i:end], 8)))
                i = end
                continue
            c = _ESCAPES.get(c, c)
        out.append(c)
        i += 1
    raise JaasConfigError(f"quoted value at offset {start} is not terminated")
