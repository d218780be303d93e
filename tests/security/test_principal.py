"""Principals, super.users and ssl.principal.mapping.rules, against Kafka's documented examples and its
SslPrincipalMapperTest cases."""

from __future__ import annotations

import pytest

from millrace.gateway.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    SslPrincipalMapper,
    parse_super_users,
)


def test_principal_text() -> None:
    alice = KafkaPrincipal.parse("User:alice")
    assert alice == KafkaPrincipal("User", "alice") and str(alice) == "User:alice"
    assert KafkaPrincipal.parse("User:CN=a,O=b:c").name == "CN=a,O=b:c"  # the name keeps further colons
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    for bad in ("alice", "User:", ":alice", ""):
        with pytest.raises(ValueError, match="principalType:principalName"):
            KafkaPrincipal.parse(bad)


def test_super_users() -> None:
    assert parse_super_users(" User:alice ; User:bob;;") == {KafkaPrincipal("User", "alice"),
                                                             KafkaPrincipal("User", "bob")}
    assert parse_super_users("") == frozenset()
    with pytest.raises(ValueError):
        parse_super_users("User:alice;bob")


def test_kafka_documentation_example() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
                                "DEFAULT")
    assert mapper.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "serviceuser"
    assert mapper.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"
    assert mapper.principal("CN=x y,O=Org") == KafkaPrincipal("User", "x")


def test_first_matching_rule_wins_and_default_keeps_the_name() -> None:
    mapper = SslPrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_default_rules_are_the_distinguished_name() -> None:
    assert SslPrincipalMapper().name("CN=alice,OU=Eng,O=Example\\, Inc.") == "CN=alice,OU=Eng,O=Example\\, Inc."


def test_escaped_comma_in_a_name() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


@pytest.mark.parametrize(("rules", "shown"), [
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, DEFAULT", "[RULE:^CN=(.*?),OU=ServiceUsers.*$/$1, DEFAULT]"),
    ("  RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L ,  DEFAULT  ", "[RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT]"),
    ("DEFAULT,", "[DEFAULT]"),
])
def test_rules_split_as_kafka_splits_them(rules: str, shown: str) -> None:
    assert repr(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {shown})"


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    "RULE:^CN=(.*$/$1/",  # not a regular expression
    "RULE:^CN=(.*)$/$x/",  # "$" must name a group
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_replacement_syntax() -> None:
    def mapped(rule: str, name: str) -> str:
        return SslPrincipalMapper(rule).name(name)

    assert mapped("RULE:^CN=(.*?),O=(.*)$/$2-$1/", "CN=a,O=b") == "b-a"
    assert mapped("RULE:^CN=(.*)$/$2/", "CN=a") == "$2"  # past the last group: literal, as Kafka escapes it
    assert mapped("RULE:^CN=(.*)$/$12/", "CN=a") == "a2"  # $12 with one group is $1 then "2"
    assert mapped(r"RULE:^CN=(.*)$/\$1 \/ $0/", "CN=a") == "$1 / CN=a"
    assert mapped("RULE:^CN=(?<user>[^,]*)$/${user}@x/U", "CN=bob") == "BOB@X"  # Java's named groups
    assert mapped(r"RULE:^CN=([^,]*)\/x$/$1/", "CN=y/x") == "y"  # an escaped slash in the pattern


def test_no_matching_rule() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRule, match="no rules apply to CN=x,OU=Other"):
        mapper.name("CN=x,OU=Other")
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("").name("CN=x")
