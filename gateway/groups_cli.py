"""``millrace groups list|describe``: a server's Kafka consumer groups with their lag, read from the HTTP
listener's JSON API (``GET /api/groups``, ``/api/groups/GROUP``: the same answers the web console
draws), printed as ``kafka-consumer-groups.sh --list`` / ``--describe`` print them.

``millrace groups readers SCOPE[/GROUP]``: native reader groups, with each reader's segments, their
positions and unread bytes. A reader group's state lives in its readers' state synchronizer (the
stream ``SCOPE/_RG<group>``), decided by the native client's rules, which the server does not run; so
this action reads it as a native client does, through the native listener (``--server``).

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
    p = sub.add_parser("groups", help="Kafka consumer groups with their lag (through the HTTP API)")
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every group: state, type, members, total lag")
    describing = actions.add_parser("describe", help="a group's members, assignments, offsets and lag")
    describing.add_argument("group")
    readers = actions.add_parser("readers", help="native reader groups: readers, segments, positions, unread bytes "
                                 "(through the native listener)")
    readers.add_argument("name", metavar="SCOPE[/GROUP]", help="every group of SCOPE, or SCOPE/GROUP in detail")
    readers.add_argument("--server", default="127.0.0.1:9090", help="native endpoint HOST:PORT")
    readers.add_argument("--json", action="store_true", help="print JSON")
    for action in (listing, describing):
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


def reader_groups(server: str, name: str) -> Any:
    """SCOPE: every reader group of the scope, with its streams, online readers and unread bytes;
    SCOPE/GROUP: that group's readers, each segment it holds or that waits unassigned, with the position
    reading resumes at and the bytes after it, and the group's unread bytes (blocking: native calls)."""
    from millrace.client.manager import StreamManager
    from millrace.client.reader_group import ReaderGroup
    from millrace.client.reader_group_state import SegmentPosition
    from millrace.protocol.errors import StoreError

    scope, _, group_name = name.partition("/")
    try:
        with StreamManager(server) as manager:
            names = [group_name] if group_name else manager.list_reader_groups(scope)
            out = []
            for group_id in names:
                group: ReaderGroup[bytes]
                with manager.reader_group(group_id, scope) as group:
                    state = group.state()
                    described: dict[str, Any] = {
                        "scope": scope, "group": group_id, "streams": list(state.streams),
                        "online_readers": sorted(state.readers), "unread_bytes": group.unread_bytes()}
                    if group_name:
                        held: list[tuple[str | None, str, SegmentPosition]] = [
                            (reader, key, pos) for reader, positions in sorted(state.readers.items())
                            for key, pos in sorted(positions.items())]
                        held += [(None, key, pos) for key, pos in sorted(state.unassigned.items())]
                        segments = []
                        for reader, key, pos in held:
                            length = manager.controller.segment_info(key).length
                            segments.append({"segment": key, "reader": reader, "offset": pos.offset,
                                             "skip": pos.skip, "length": length,
                                             "unread_bytes": max(0, length - pos.offset)})
                        described["segments"] = segments
                        described["waiting_successors"] = sorted(state.future)
                    out.append(described)
    except (StoreError, OSError) as exc:
        raise GroupsError(str(exc)) from None
    return out[0] if group_name else out


def print_reader_groups(out: Any) -> None:
    if isinstance(out, list):
        _table(["SCOPE", "GROUP", "STREAMS", "READERS", "UNREAD-BYTES"],
               [[g["scope"], g["group"], ",".join(g["streams"]), str(len(g["online_readers"])), str(g["unread_bytes"])]
                for g in out])
        return
    print(f"reader group {out['scope']}/{out['group']}: streams {', '.join(out['streams'])}, "
          f"{len(out['online_readers'])} readers online, {out['unread_bytes']} bytes unread")
    _table(["SEGMENT", "READER", "OFFSET", "LENGTH", "UNREAD-BYTES"],
           [[x["segment"], _cell(x["reader"]), str(x["offset"]), str(x["length"]), str(x["unread_bytes"])]
            for x in out["segments"]])


def run_groups(args: argparse.Namespace) -> int:
    try:
        if args.action == "readers":
            out = reader_groups(args.server, args.name)
            if args.json:
                print(json.dumps(out, indent=2))
            else:
                print_reader_groups(out)
            return 0
        if args.action == "list":
            out = _get(args, "/api/groups")["groups"]
        else:
            out = _get(args, "/api/groups/" + urllib.parse.quote(args.group, safe=""))
    except GroupsError as exc:
        print(f"millrace: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
    elif args.action == "list":
        print_list(out)
    else:
        print_describe(out)
    return 0
