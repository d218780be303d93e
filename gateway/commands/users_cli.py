"""``millrace users``: a server's SCRAM users, listed, set and deleted through its Kafka listener, as
``kafka-configs.sh --bootstrap-server ... --entity-type users`` does (DescribeUserScramCredentials and
AlterUserScramCredentials), logged in as a client configuration file says (``--command-config``, Kafka's
client property names: ``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``,
``ssl.truststore.location`` and, for client certificates, ``ssl.keystore.location``; PEM files).

The password is read from a file or standard input, never from the command line (where ``ps`` shows
it); the salted password is computed here, so only RFC 5802's SaltedPassword travels, as Kafka's tools
send it."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

from millrace.gateway.kafka.handlers.scram_credentials import CODES, MECHANISM_CODES
from millrace.gateway.kafka.node_requests import NodeLink, request_address
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
)
from millrace.gateway.kafka_protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
)
from millrace.gateway.security.jaas import JaasConfigError, parse_login_module
from millrace.gateway.security.properties import ConfigError, Secret, SslSettings, load_properties
from millrace.gateway.security.sasl import salted_password
from millrace.gateway.security.sasl_client import CLIENT_MECHANISMS, SaslLogin
from millrace.gateway.security.tls import TlsConfigError, client_tls

SALT_BYTES = 32
CLIENT_ID = "millrace-users"
TIMEOUT_SECONDS = 30.0


class UsersError(Exception):
    """What the command reports and exits 1 with."""


def add_users_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="a server's SCRAM users, through its Kafka listener (kafka-configs.sh users)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a Kafka listener of the server")
    p.add_argument("--command-config", default=None, metavar="FILE",
                   help="client properties: security.protocol, sasl.mechanism, sasl.jaas.config, "
                        "ssl.truststore.location, ssl.keystore.location (PEM)")
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="users and their SCRAM mechanisms and iterations")
    listing.add_argument("users", nargs="*", help="only these (default: every user)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    setting = actions.add_parser("set", help="create a user's SCRAM credential, or change its password")
    setting.add_argument("user")
    setting.add_argument("--mechanism", choices=sorted(CODES), default="SCRAM-SHA-512")
    setting.add_argument("--iterations", type=int, default=4096, help="4096..16384, as Kafka accepts")
    setting.add_argument("--password-file", default=None, metavar="FILE",
                         help="the password is this file's first line (default: read from standard input)")
    deleting = actions.add_parser("delete", help="remove a user's SCRAM credential")
    deleting.add_argument("user")
    deleting.add_argument("--mechanism", choices=sorted(CODES), default="SCRAM-SHA-512")


def client_link(properties: dict[str, str]) -> NodeLink:
    """How to reach and log in to the server, from Kafka client properties; ConfigError naming the one
    that does not fit."""
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ConfigError("security.protocol", protocol, "not a Kafka security protocol")
    tls = None
    if protocol.endswith("SSL"):
        key_password = properties.get("ssl.key.password")
        settings = SslSettings(keystore_location=properties.get("ssl.keystore.location"),
                               key_password=Secret(key_password) if key_password else None,
                               truststore_location=properties.get("ssl.truststore.location"))
        try:
            tls = client_tls(settings)
        except TlsConfigError as e:
            raise ConfigError("ssl.truststore.location", settings.truststore_location, str(e)) from None
    login = None
    if protocol.startswith("SASL_"):
        mechanism = properties.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in CLIENT_MECHANISMS:
            raise ConfigError("sasl.mechanism", mechanism, f"one of {', '.join(CLIENT_MECHANISMS)}")
        try:
            module = parse_login_module(properties.get("sasl.jaas.config", ""))
        except JaasConfigError as e:
            raise ConfigError("sasl.jaas.config", None, str(e)) from None
        username, password = module.options.get("username"), module.options.get("password")
        if not username or password is None:
            raise ConfigError("sasl.jaas.config", None, "needs username and password options")
        login = SaslLogin(mechanism, username, password)
    return NodeLink(None, tls, login)


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        with open(args.password_file, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UsersError("an empty password")
    return password


def _request(args: argparse.Namespace, link: NodeLink, request: Any) -> Any:
    """One request to the server, on a reactor run for it."""
    from twisted.internet import task

    host, _, port = args.bootstrap_server.rpartition(":")
    if not host or not port.isdigit():
        raise UsersError(f"--bootstrap-server {args.bootstrap_server!r}: expected HOST:PORT")
    outcome: dict[str, Any] = {}

    def run(_reactor: Any) -> Any:
        d = request_address(link, host.strip("[]"), int(port), request, 0, CLIENT_ID, TIMEOUT_SECONDS)
        return d.addCallbacks(lambda response: outcome.update(response=response),
                              lambda failure: outcome.update(error=failure.value))

    try:
        task.react(run)
    except SystemExit as e:  # react() ends the process's reactor with SystemExit
        if e.code not in (0, None):
            raise UsersError("the request did not complete") from None
    if "error" in outcome:
        raise UsersError(f"{args.bootstrap_server}: {outcome['error'] or type(outcome['error']).__name__}")
    return outcome["response"]


def _check(error_code: int, message: str | None, what: str) -> None:
    if error_code != ErrorCode.NONE:
        raise UsersError(f"{what}: {ErrorCode(error_code).name}{f' ({message})' if message else ''}")


def run_users(args: argparse.Namespace) -> int:
    try:
        properties = load_properties(args.command_config) if args.command_config else {}
        link = client_link(properties)
        if args.action == "list":
            names = [DescribeUserScramCredentialsRequest.UserName(name=u) for u in args.users] or None
            response = _request(args, link, DescribeUserScramCredentialsRequest(users=names))
            _check(response.error_code, response.error_message, "listing users")
            users = {}
            for result in response.results:
                _check(result.error_code, result.error_message, f"user {result.user}")
                users[result.user] = {MECHANISM_CODES.get(i.mechanism, str(i.mechanism)): i.iterations
                                      for i in result.credential_infos}
            if args.json:
                print(json.dumps(users, indent=2, sort_keys=True))
            for user, mechanisms in ([] if args.json else sorted(users.items())):
                print(f"{user}  " + ", ".join(f"{m} (iterations {n})" for m, n in sorted(mechanisms.items())))
            return 0
        request = AlterUserScramCredentialsRequest()
        code = CODES[args.mechanism]
        if args.action == "set":
            salt = os.urandom(SALT_BYTES)
            request.upsertions = [AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=args.user, mechanism=code, iterations=args.iterations, salt=salt,
                salted_password=salted_password(args.mechanism, _password(args), salt, args.iterations))]
        else:
            request.deletions = [AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=args.user,
                                                                                          mechanism=code)]
        response = _request(args, link, request)
        for result in response.results:
            _check(result.error_code, result.error_message, f"user {result.user}")
        print(f"{'set' if args.action == 'set' else 'deleted'} {args.mechanism} credential of user {args.user}")
        return 0
    except (ConfigError, OSError) as e:
        print(f"millrace users: {e}", file=sys.stderr)
        return 2
    except UsersError as e:
        print(f"millrace users: {e}", file=sys.stderr)
        return 1
