"""Principals: who a connection is, as Kafka's ACLs and ``super.users`` name it (``User:alice``), and the
user name of a TLS client from its certificate's distinguished name (``ssl.principal.mapping.rules``).

``SslPrincipalMapper`` follows Kafka's class of that name. The rules are a comma-separated list of
``RULE:pattern/replacement/`` (optionally ``/L`` or ``/U`` after the last slash: lower or upper case the
result) and ``DEFAULT``; the first rule that yields a name wins. A ``RULE`` applies when its pattern
matches the whole distinguished name, and yields the name with every match of the pattern replaced
(Java's ``replaceAll``: ``$1`` or ``${name}`` refer to groups, ``\\`` escapes; a reference past the
last group is literal text, as Kafka makes it). ``DEFAULT`` yields the distinguished name itself, which
the caller gives as RFC 2253 text (``CN=alice,OU=Eng,O=Example``, as Java's ``X500Principal.getName()``).
Patterns are Java regular expressions read by Python's ``re``; ``(?<name>...)`` groups are accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"
DEFAULT_SSL_PRINCIPAL_MAPPING_RULES = "DEFAULT"

# Kafka's own expressions (SslPrincipalMapper.RULE_PATTERN and RULE_SPLITTER): the rules are split and
# read exactly as the broker splits and reads them, commas inside patterns included.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_JAVA_NAMED_GROUP = re.compile(r"\(\?<(?![=!])")


@dataclass(frozen=True)
class KafkaPrincipal:
    """A principal as ACLs name it: its type (``User`` for every authenticated client) and its name."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may hold further colons."""
        principal_type, colon, name = text.partition(":")
        if not colon or not principal_type or not name:
            raise ValueError(f"expected a principal as principalType:principalName, got {text!r}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")  # an unauthenticated client (PLAINTEXT, TLS without a cert)


def user_principal(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER_TYPE, name)


def parse_super_users(value: str) -> frozenset[KafkaPrincipal]:
    """``super.users``: principals separated by semicolons (``User:alice;User:bob``), blanks ignored."""
    return frozenset(KafkaPrincipal.parse(item.strip()) for item in value.split(";") if item.strip())


class NoMatchingRule(ValueError):
    """No mapping rule yields a name for a distinguished name (the rules have no ``DEFAULT``)."""


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: a TLS client's distinguished name -> its user name."""

    def __init__(self, rules: str = DEFAULT_SSL_PRINCIPAL_MAPPING_RULES) -> None:
        parsed = (_parse_rule(match.group(1)) for match in _RULE_SPLITTER.finditer(rules.strip()))
        self.rules = tuple(rule for rule in parsed if rule is not None)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"no rules apply to {distinguished_name}, rules {list(self.rules)}")

    def principal(self, distinguished_name: str) -> KafkaPrincipal:
        return user_principal(self.name(distinguished_name))

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = {list(self.rules)})"


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: tuple[str | int, ...] = ()  # literal text and group numbers
    case: str = ""  # "L", "U" or ""
    text: str = "DEFAULT"

    def apply(self, distinguished_name: str) -> str | None:
        if self.pattern is None:
            return distinguished_name
        if not self.pattern.fullmatch(distinguished_name):
            return None
        result = self.pattern.sub(self._expand, distinguished_name)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(part if isinstance(part, str) else match.group(part) or "" for part in self.replacement)

    def __repr__(self) -> str:
        return self.text


def _parse_rule(rule: str) -> _Rule | None:
    """One rule as written (None for an empty one, which Kafka ignores)."""
    match = _RULE_PARSER.match(rule)
    if match is None or match.end() != len(rule):
        unmatched = rule[match.end():] if match else rule
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{unmatched}`")
    if match.group(1) is not None:
        return _Rule(None)
    if match.group(2) is None:
        return None
    pattern_text, replacement, case = match.group(2), match.group(4), match.group(6)
    try:
        pattern = re.compile(_JAVA_NAMED_GROUP.sub("(?P<", pattern_text))
    except re.error as e:
        raise ValueError(f"Invalid rule: `{rule}`: {e}") from None
    shown = f"RULE:{pattern_text}/{replacement}" + (f"/{case}" if case else "")
    return _Rule(pattern, _java_replacement(rule, replacement, pattern), case, shown)


def _java_replacement(rule: str, template: str, pattern: re.Pattern[str]) -> tuple[str | int, ...]:
    """Java's ``Matcher.appendReplacement`` syntax, read once: ``$n`` takes as many digits as still name a
    group, ``${name}`` a named group, ``\\c`` is ``c``."""
    parts: list[str | int] = []
    literal: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if c == "\\":
            if i + 1 == len(template):
                raise ValueError(f"Invalid rule: `{rule}`: a '\\' ends the replacement")
            literal.append(template[i + 1])
            i += 2
            continue
        if c != "$":
            literal.append(c)
            i += 1
            continue
        following = template[i + 1:i + 2]
        if following.isascii() and following.isdigit():
            group = int(following)
            if group > pattern.groups:  # Kafka escapes a reference past the last group: literal text
                literal.append(c)
                i += 1
                continue
            i += 2
            while (i < len(template) and template[i].isascii() and template[i].isdigit()
                   and group * 10 + int(template[i]) <= pattern.groups):
                group, i = group * 10 + int(template[i]), i + 1
        elif following == "{" and (end := template.find("}", i)) > 0 and template[i + 2:end] in pattern.groupindex:
            group, i = pattern.groupindex[template[i + 2:end]], end + 1
        else:
            raise ValueError(f"Invalid rule: `{rule}`: illegal group reference in the replacement")
        if literal:
            parts.append("".join(literal))
            literal.clear()
        parts.append(group)
    if literal:
        parts.append("".join(literal))
    return tuple(parts)
