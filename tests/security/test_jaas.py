"""JAAS lines as Kafka's sasl.jaas.config takes them: modules, flags, quoted options, errors without secrets."""

from __future__ import annotations

import pytest

from millrace.gateway.security.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    parse_jaas_config,
    parse_login_module,
)

PLAIN_LINE = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_plain_login_module_with_users() -> None:
    module = parse_login_module(PLAIN_LINE)
    assert (module.name, module.flag) == (PLAIN_LOGIN_MODULE, "required")
    assert dict(module.options) == {"username": "admin", "password": "admin-secret",
                                    "user_admin": "admin-secret", "user_alice": "alice-secret"}
    assert module.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert module.mechanisms == ("PLAIN",)


def test_options_across_lines_with_comments() -> None:
    text = f"""
        {PLAIN_LOGIN_MODULE} REQUIRED // the broker's own login
            username="admin" /* the broker's
            password */ password="admin-secret"
            user_bob='bob-secret' ;
    """
    module = parse_login_module(text)
    assert module.flag == "required"
    assert dict(module.options) == {"username": "admin", "password": "admin-secret", "user_bob": "bob-secret"}
    assert module.plain_users == {"bob": "bob-secret"}


@pytest.mark.parametrize(("quoted", "value"), [
    (r'"say \"hi\""', 'say "hi"'),
    (r'"back\\slash"', "back\\slash"),
    (r'"tab\tnew\nline"', "tab\tnew\nline"),
    (r'"octal \101\60"', "octal A0"),
    (r'"other \q"', "other q"),
    (r"'single \'quoted\' \"x\"'", "single 'quoted' \"x\""),
    ('"semi;colon = and spaces"', "semi;colon = and spaces"),
    ("bare-word_1.$x", "bare-word_1.$x"),
    ("4096", "4096"),
    ('""', ""),
])
def test_quoted_values_and_escapes(quoted: str, value: str) -> None:
    assert parse_login_module(f"{SCRAM_LOGIN_MODULE} optional key={quoted};").options["key"] == value


@pytest.mark.parametrize("flag", ["required", "requisite", "sufficient", "optional", "Sufficient"])
def test_control_flags(flag: str) -> None:
    assert parse_login_module(f"{SCRAM_LOGIN_MODULE} {flag};").flag == flag.lower()


def test_scram_and_oauthbearer_lines_keep_their_options() -> None:
    scram = parse_login_module(f'{SCRAM_LOGIN_MODULE} required username="admin" password="pw" tokenauth="true";')
    assert scram.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert dict(scram.options) == {"username": "admin", "password": "pw", "tokenauth": "true"}
    assert scram.plain_users == {}
    oauth = parse_login_module(f'{OAUTHBEARER_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="thePrincipal";')
    assert oauth.options == {"unsecuredLoginStringClaim_sub": "thePrincipal"}
    assert oauth.mechanisms == ("OAUTHBEARER",)


def test_several_modules_parse_but_sasl_jaas_config_takes_one() -> None:
    text = f"{PLAIN_LOGIN_MODULE} required user_a=\"1\"; {SCRAM_LOGIN_MODULE} sufficient;"
    assert [m.name for m in parse_jaas_config(text)] == [PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE]
    with pytest.raises(JaasConfigError, match="2 login modules, should be 1"):
        parse_login_module(text)


def test_a_repeated_option_keeps_the_last_value() -> None:
    assert parse_login_module(f'{PLAIN_LOGIN_MODULE} required user_a="1" user_a="2";').plain_users == {"a": "2"}


@pytest.mark.parametrize(("text", "error"), [
    ("", "login module not specified"),
    ("  // only a comment", "login module not specified"),
    (PLAIN_LOGIN_MODULE, "control flag not specified"),
    (f"{PLAIN_LOGIN_MODULE} mandatory;", "invalid login module control flag"),
    (f'{PLAIN_LOGIN_MODULE} required password="admin-secret"', "not terminated by semi-colon"),
    (f"{PLAIN_LOGIN_MODULE} required password;", "value not specified for option 'password'"),
    (f"{PLAIN_LOGIN_MODULE} required password=;", "value not specified for option 'password'"),
    (f'{PLAIN_LOGIN_MODULE} required password="admin-secret;', "not terminated"),
    (f'{PLAIN_LOGIN_MODULE} required password="admin-\nsecret";', "not terminated"),
    (f'{PLAIN_LOGIN_MODULE} required user_a=admin-secret@x;', "unexpected character"),
    (f'{PLAIN_LOGIN_MODULE} required /* admin-secret', "not closed"),
    ('"quoted.Module" required;', "expected a login module class"),
])
def test_errors_say_where_but_never_show_the_text(text: str, error: str) -> None:
    with pytest.raises(JaasConfigError, match=error) as caught:
        parse_login_module(text)
    assert "secret" not in str(caught.value)


def test_repr_shows_option_names_not_values() -> None:
    shown = repr(parse_login_module(PLAIN_LINE))
    assert "user_alice" in shown and "secret" not in shown
