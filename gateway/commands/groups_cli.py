"""``millrace groups list|describe|readers``: a server's Kafka consumer groups with their lag and its native
reader groups with their positions and unread bytes, read from the HTTP listener's JSON API (``GET
/api/groups[/GROUP]``, ``/api/reader-groups[/SCOPE/GROUP]``: the same answers the web console draws).

- ``list``: the Kafka groups as ``kafka-consumer-groups.sh --list`` prints them, then the reader groups
  (``--json``: ``{"groups": [...], "reader_groups": [...]}``, the two API answers).
- ``describe GROUP``: a Kafka group as ``kafka-consumer-groups.sh --describe`` prints it;
  ``describe --reader-group SCOPE/GROUP``: a reader group's segments, each with its reader, position and
  unread bytes.
- ``readers SCOPE[/GROUP]``: a scope's reader groups, or one in detail. (It used to read the group's state
  through the native listener as a client; the server now folds the state itself,
  ``gateway/http/reader_groups.py``, so every action takes one address, one TLS and credential setup, and
  shows the same figures as the console and ``/metrics``.)

An HTTPS listener is trusted through ``--ca-file``; one that authenticates reads gets HTTP Basic
credentials: ``--user`` and the password from ``--password-file`` (never the command line, where
``ps`` shows it)."""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

TIMEOUT_SECONDS = 30.0


class GroupsError(Exception):
    """What the command reports and exits 1 with."""


def add_groups_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="Kafka consumer groups with their lag, native reader groups with their "
                       "unread bytes (through the HTTP API)")
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every Kafka group (state, type, members, total lag) and every "
                                 "native reader group (streams, readers, unread bytes)")
    describing = actions.add_parser("describe", help="a Kafka group's members, assignments, offsets and lag, or "
                                    "(--reader-group) a reader group's segments, positions and unread bytes")
    describing.add_argument("group", metavar="GROUP | SCOPE/GROUP")
    describing.add_argument("--reader-group", action="store_true",
                            help="GROUP is a native reader group, named SCOPE/GROUP")
    readers = actions.add_parser("readers", help="native reader groups: readers, segments, positions, unread bytes")
    readers.add_argument("name", metavar="SCOPE[/GROUP]", help="every group of SCOPE, or SCOPE/GROUP in detail")
    for action in (listing, describing, readers):
        action.add_argument("--http", default="http://127.0.0.1:9091", metavar="URL",
                            help="the server's HTTP listener (default http://127.0.0.1:9091)")
        action.add_argument("--ca-file", default=None, metavar="PEM", help="trust an HTTPS listener's CA")
        action.add_argument("--user", default=None, help="HTTP Basic user (with --password-file)")
        action.add_argument("--password-file", default=None, metavar="FILE",
                            help="the user's password: this file's first line")
        action.add_argument("--json", action="store_true", help="print the API's JSON")


def _get(args: argparse.Namespace, path: str) -> Any:
    url = args.http.rstrip("/") + path
    headers = {"accept": "application/json"}
    if args.user is not None:
        if args.password_file is None:
            raise GroupsError("--user needs --password-file")
        with open(args.password_file) as f:
            password = f.readline().rstrip("\n")
        headers["authorization"] = "Basic " + base64.b64encode(f"{args.user}:{password}".encode()).decode()
    context = ssl.create_default_context(cafile=args.ca_file) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_SECONDS,
                                    context=context) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        try:
            message = json.loads(err.read())["error"]
        except (ValueError, KeyError, TypeError):
            message = err.reason
        raise GroupsError(f"{url}: {err.code} {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise GroupsError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_list(groups: list[dict[str, Any]]) -> None:
    _table(["GROUP", "STATE", "TYPE", "MEMBERS", "LAG"],
           [[g["group_id"], g["state"], g["type"], str(g["members"]), _cell(g["lag"])] for g in groups])


def print_describe(group: dict[str, Any]) -> None:
    """As ``kafka-consumer-groups.sh --describe``: one row per partition, with the member holding it."""
    holders: dict[tuple[str, int], dict[str, Any]] = {}
    for m in group["members"]:
        for a in m["assignment"]:
            for p in a["partitions"]:
                holders[a["topic"], p] = m
    print(f"group {group['group_id']}: {group['state']} ({group['type']}), {len(group['members'])} members, "
          f"total lag {_cell(group['lag'])}")
    rows = []
    for p in group["partitions"]:
        m = holders.get((p["topic"], p["partition"]), {})
        rows.append([p["topic"], str(p["partition"]), _cell(p["committed_offset"]), _cell(p["high_watermark"]),
                     _cell(p["lag"]), _cell(m.get("member_id")), _cell(m.get("client_host")),
                     _cell(m.get("client_id"))])
    _table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
           rows)


def reader_group_path(name: str) -> str:
    """``/api/reader-groups/SCOPE/GROUP`` of ``SCOPE/GROUP``."""
    scope, _, group = name.partition("/")
    if not scope or not group:
        raise GroupsError(f"a reader group is named SCOPE/GROUP, not {name!r}")
    return "/api/reader-groups/" + urllib.parse.quote(scope, safe="") + "/" + urllib.parse.quote(group, safe="")


def print_reader_groups(out: Any) -> None:
    """A list of reader groups as a table, or one group's segments."""
    if isinstance(out, list):
        _table(["SCOPE", "GROUP", "STREAMS", "READERS", "UNREAD-BYTES"],
               [[g["scope"], g["group"], ",".join(g["streams"]), str(len(g["online_readers"])), str(g["unread_bytes"])]
                for g in out])
        return
    print(f"reader group {out['scope']}/{out['group']}: streams {', '.join(out['streams'])}, "
          f"{len(out['online_readers'])} readers online, {out['unread_bytes']} bytes unread")
    _table(["SEGMENT", "READER", "STATE", "OFFSET", "LENGTH", "UNREAD-BYTES"],
           [[x["segment"], _cell(x["reader"]), x["state"], str(x["offset"]), str(x["length"]), str(x["unread_bytes"])]
            for x in out["segments"]])


def run_groups(args: argparse.Namespace) -> int:
    try:
        if args.action == "list":
            out: Any = {"groups": _get(args, "/api/groups")["groups"],
                        "reader_groups": _get(args, "/api/reader-groups")["reader_groups"]}
        elif args.action == "readers":
            scope, _, group = args.name.partition("/")
            out = (_get(args, reader_group_path(args.name)) if group else
                   _get(args, "/api/reader-groups?" + urllib.parse.urlencode({"scope": scope}))["reader_groups"])
        elif args.reader_group:
            out = _get(args, reader_group_path(args.group))
        else:
            out = _get(args, "/api/groups/" + urllib.parse.quote(args.group, safe=""))
    except GroupsError as exc:
        print(f"millrace: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
    elif args.action == "list":
        print_list(out["groups"])
        if out["reader_groups"]:
            print()
            print_reader_groups(out["reader_groups"])
    elif args.action == "readers" or args.reader_group:
        print_reader_groups(out)
    else:
        print_describe(out)
    return 0
