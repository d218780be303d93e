"""What the console shows of the Kafka side, read from the broker's own state on the reactor thread:
consumer groups (members, assignments, committed offsets, high watermarks, lag) and a partition's
records.

Everything here runs on the reactor thread, which owns the group coordinator and the partition logs;
nothing blocks (opening a topic's partitions and reading records answer Deferreds).
"""

from __future__ import annotations

import base64
import bisect
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from millrace.gateway.kafka.broker import get_coordinator
from millrace.gateway.kafka.consumer_groups.classic_members import decode_assignment
from millrace.gateway.kafka.group_store import GROUPS_TABLE
from millrace.protocol.records import ControlRecordType, iter_batches, parse_control_record
from millrace.streams.partitions.storage import READ_COMMITTED, READ_UNCOMMITTED
from millrace.streams.resolve import refreshed

if TYPE_CHECKING:
    from millrace.gateway.kafka.broker import Broker
    from millrace.gateway.kafka.classic_groups.group import Group
    from millrace.gateway.kafka.group_coordinator import GroupCoordinator
    from millrace.streams.partitions.partition import PartitionLog
    from millrace.streams.topics import TopicInfo

MAX_MESSAGES = 500  # the most records one browse answers
_FETCH_BYTES = 1 << 20  # bytes read per step of a browse: bounded memory, a bounded pause of the reactor
VALUE_FORMATS = ("text", "json", "hex", "base64")


class ConsoleNotFoundError(LookupError):
    """A group, topic or partition the console was asked about does not exist."""


class NotServedHereError(RuntimeError):
    """This node cannot answer now: the groups are loading or another node coordinates them, or another
    node leads the partition asked for (the message names it)."""


@dataclass(frozen=True)
class PartitionLag:
    """One partition's committed offset against its end."""

    topic: str
    partition: int
    committed: int | None
    high_watermark: int | None
    log_start: int | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.high_watermark is None:
            return None
        # A committed offset below the log start still has only what is left to read.
        return max(0, self.high_watermark - max(self.committed, self.log_start or 0))


def _serving_node(broker: Broker, segment: str) -> str:
    """On a cluster: the node serving ``segment``'s container now and its HTTP API, as a hint to add to an
    answer this node cannot give."""
    if broker.cluster is None:
        return ""
    info = broker.cluster.owner_info(broker.cluster.container_of(segment))
    if info is None:
        return ": no node serves it now"
    http = info.advertised.get("http") or (f"{info.host}:{info.ports['http']}" if "http" in info.ports else None)
    return f": node {info.node_id} does" + (f", HTTP API at {http}" if http else "")


def _coordinator_ready(broker: Broker) -> defer.Deferred[GroupCoordinator]:
    """The group coordinator once loaded; NotServedHereError where it cannot answer now."""
    coordinator = get_coordinator(broker)
    d: defer.Deferred[GroupCoordinator] = defer.maybeDeferred(coordinator.call, lambda c: c)

    def check(c: GroupCoordinator) -> GroupCoordinator:
        error = c.coordinator_check() if c.coordinator_check is not None else None
        if error is not None:
            raise NotServedHereError(f"this node does not coordinate the groups now ({error.name})"
                                     f"{_serving_node(broker, GROUPS_TABLE)}")
        if not c.loaded:
            raise NotServedHereError("the group coordinator has not loaded the groups")
        return c

    return d.addCallback(check)


def _offsets_now(broker: Broker, topic: str, partition: int) -> tuple[int | None, int | None]:
    """(log start, high watermark) of a loaded partition, or (None, None) if this node has not loaded it."""
    parts = broker.partitions.loaded(topic)
    if parts is None or partition >= len(parts):
        return None, None
    offsets = broker.partitions.offsets(parts[partition])
    return offsets.log_start, offsets.high_watermark


def _group_state(group: Group) -> tuple[str, str]:
    """(state, type) as ListGroups names them."""
    if group.consumer is not None:
        return group.consumer.state().value, "consumer"
    return group.state.value, "classic"


def _members(broker: Broker, group: Group) -> list[dict[str, Any]]:
    """Each member with the partitions assigned to it: decoded from the classic protocol's assignment,
    or the consumer protocol's (KIP-848) assignment by topic id."""
    out: list[dict[str, Any]] = []
    if group.consumer is not None:
        for cm in group.consumer.members.values():
            assigned = []
            for topic_id, partitions in cm.assignment.assigned.items():
                info = broker.topics.by_id(topic_id)
                if info is not None:
                    assigned.append({"topic": info.name, "partitions": sorted(partitions)})
            out.append({"member_id": cm.member_id, "instance_id": cm.instance_id, "client_id": cm.client_id,
                        "client_host": cm.client_host, "assignment": sorted(assigned, key=lambda a: a["topic"])})
        return out
    for m in group.members.values():
        assigned = []
        decoded = decode_assignment(m.assignment) if group.protocol_type == "consumer" else None
        if decoded is not None:
            assigned = [{"topic": tp.topic, "partitions": sorted(tp.partitions)} for tp in decoded.assigned_partitions]
        out.append({"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
                    "client_host": m.client_host, "assignment": sorted(assigned, key=lambda a: a["topic"])})
    return out


def group_lags(broker: Broker, group: Group) -> list[PartitionLag]:
    """Every partition the group committed an offset for or is assigned, with its lag (partitions this
    node has not loaded have no high watermark)."""
    committed: dict[tuple[str, int], int | None] = {(tp[0], tp[1]): om.offset for tp, om in group.offsets.items()}
    for member in _members(broker, group):
        for a in member["assignment"]:
            for p in a["partitions"]:
                committed.setdefault((a["topic"], p), None)
    out = []
    for (topic, partition), offset in sorted(committed.items()):
        log_start, hw = _offsets_now(broker, topic, partition)
        out.append(PartitionLag(topic, partition, offset, hw, log_start))
    return out


def list_groups(broker: Broker) -> defer.Deferred[list[dict[str, Any]]]:
    """Every group with its state, type, member count and total lag."""

    def listing(c: GroupCoordinator) -> list[dict[str, Any]]:
        out = []
        for group in sorted(c.groups.values(), key=lambda g: g.group_id):
            state, kind = _group_state(group)
            lags = [x.lag for x in group_lags(broker, group) if x.lag is not None]
            members = len(group.consumer.members) if group.consumer is not None else len(group.members)
            out.append({"group_id": group.group_id, "state": state, "type": kind,
                        "protocol_type": group.protocol_type or ("consumer" if group.consumer else ""),
                        "members": members, "lag": sum(lags) if lags else None})
        return out

    return _coordinator_ready(broker).addCallback(listing)


def _open_topics(broker: Broker, names: set[str]) -> defer.Deferred[None]:
    """Load the partitions of ``names`` (topics that exist), so their high watermarks are known."""
    ds = []
    for name in names:
        info = broker.topics.get(name)
        if info is not None and broker.partitions.loaded(name) is None:
            ds.append(broker.partitions.open_topic(info).addErrback(lambda _: None))
    return defer.gatherResults(ds).addCallback(lambda _: None)


def describe_group(broker: Broker, group_id: str) -> defer.Deferred[dict[str, Any]]:
    """A group: state, members with assignments, and per partition committed offset, high watermark, lag."""

    def describe(c: GroupCoordinator) -> defer.Deferred[dict[str, Any]]:
        group = c.groups.get(group_id)
        if group is None:
            raise ConsoleNotFoundError(f"no group {group_id!r}")
        topics = {tp[0] for tp in group.offsets}

        def answer(_: None) -> dict[str, Any]:
            current = c.groups.get(group_id)
            if current is None:
                raise ConsoleNotFoundError(f"no group {group_id!r}")
            state, kind = _group_state(current)
            lags = group_lags(broker, current)
            known = [x.lag for x in lags if x.lag is not None]
            return {
                "group_id": group_id, "state": state, "type": kind,
                "protocol_type": current.protocol_type or ("consumer" if current.consumer else ""),
                "protocol": current.protocol_name or "",
                "generation": current.consumer.group_epoch if current.consumer is not None else current.generation_id,
                "members": _members(broker, current),
                "partitions": [{"topic": x.topic, "partition": x.partition, "committed_offset": x.committed,
                                "log_start_offset": x.log_start, "high_watermark": x.high_watermark,
                                "lag": x.lag} for x in lags],
                "lag": sum(known) if known else None,
            }

        return _open_topics(broker, topics).addCallback(answer)

    return _coordinator_ready(broker).addCallback(describe)


def total_lags(broker: Broker) -> dict[str, int]:
    """{group id: summed lag} of the loaded groups whose lag is known now (for the history; no I/O)."""
    coordinator = broker.groups
    if coordinator is None or not coordinator.loaded:
        return {}
    out = {}
    for group in coordinator.groups.values():
        known = [x.lag for x in group_lags(broker, group) if x.lag is not None]
        if known:
            out[group.group_id] = sum(known)
    return out


# -- topics and records ------------------------------------------------------------------------------

def _topic(broker: Broker, name: str) -> defer.Deferred[TopicInfo]:
    """The topic; on a cluster node one not known here yet is looked up in the topics table first (another
    node may have created it since this node's last periodic refresh)."""
    info = broker.topics.get(name)
    if info is not None:
        return defer.succeed(info)
    if broker.cluster is None:
        return defer.fail(ConsoleNotFoundError(f"no topic {name!r}"))

    def found(info: TopicInfo | None) -> TopicInfo:
        if info is None:
            raise ConsoleNotFoundError(f"no topic {name!r}")
        return info

    return refreshed(broker, name, broker.topics.get).addCallback(found)


def describe_topic(broker: Broker, name: str) -> defer.Deferred[dict[str, Any]]:
    """A topic's partitions with their log start, high watermark and last stable offset, and configs."""

    def answer(opened: tuple[TopicInfo, list[PartitionLog]]) -> dict[str, Any]:
        info, parts = opened
        partitions = []
        for p in parts:
            o = broker.partitions.offsets(p)
            partitions.append({"partition": p.partition, "log_start_offset": o.log_start,
                               "high_watermark": o.high_watermark, "last_stable_offset": o.last_stable})
        return {"topic": name, "partition_count": info.partition_count, "configs": dict(info.configs),
                "partitions": partitions}

    return _topic(broker, name).addCallback(_opened, broker).addCallback(answer)


def _opened(info: TopicInfo, broker: Broker) -> defer.Deferred[tuple[TopicInfo, list[PartitionLog]]]:
    return broker.partitions.open_topic(info).addCallback(lambda parts: (info, parts))


def render_value(data: bytes | None, fmt: str) -> Any:
    """A key or value as the client asked: ``text`` (UTF-8, invalid bytes replaced), ``json`` (parsed,
    or the text when it is not JSON), ``hex`` or ``base64``; None stays None."""
    if data is None:
        return None
    if fmt == "hex":
        return data.hex()
    if fmt == "base64":
        return base64.b64encode(data).decode()
    text = data.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


@dataclass
class Browse:
    """A request for records: from ``offset`` (or the first at or after ``timestamp`` ms), at most ``limit``."""

    topic: str
    partition: int
    offset: int | None = None
    timestamp: int | None = None
    limit: int = 50
    value_format: str = "text"
    read_committed: bool = True

    def __post_init__(self) -> None:
        if self.value_format not in VALUE_FORMATS:
            raise ValueError(f"format must be one of {', '.join(VALUE_FORMATS)}")
        if not 1 <= self.limit <= MAX_MESSAGES:
            raise ValueError(f"limit must be between 1 and {MAX_MESSAGES}")
        if self.offset is not None and self.timestamp is not None:
            raise ValueError("give either an offset or a timestamp, not both")


class _Visibility:
    """Kafka's read_committed consumer filter (``CompletedFetch``): a transactional batch of a producer
    whose transaction was aborted is skipped until that transaction's ABORT marker."""

    def __init__(self, aborted: tuple[tuple[int, int], ...]) -> None:
        self.pending = sorted(aborted, key=lambda a: a[1])
        self.firsts = [first for _, first in self.pending]
        self.taken = 0
        self.aborting: set[int] = set()

    def visible(self, batch: Any) -> bool:
        h = batch.header
        upto = bisect.bisect_right(self.firsts, h.last_offset)
        while self.taken < upto:
            self.aborting.add(self.pending[self.taken][0])
            self.taken += 1
        if h.is_control:
            for record in batch.records():
                kind, _ = parse_control_record(record)
                if kind is ControlRecordType.ABORT:
                    self.aborting.discard(h.producer_id)
            return False
        return not (h.is_transactional and h.producer_id in self.aborting)


def browse(broker: Broker, request: Browse) -> defer.Deferred[dict[str, Any]]:
    """The records ``request`` asks for, read through the partition storage as a Fetch reads them."""
    isolation = READ_COMMITTED if request.read_committed else READ_UNCOMMITTED
    storage = broker.partitions

    @defer.inlineCallbacks
    def read(opened: tuple[TopicInfo, list[PartitionLog]]) -> Any:
        _, parts = opened
        if not 0 <= request.partition < len(parts):
            raise ConsoleNotFoundError(f"topic {request.topic!r} has no partition {request.partition}")
        p = parts[request.partition]
        if broker.cluster is not None and p.writer is not None and not storage.leads(p):
            raise NotServedHereError(f"this node does not serve {p.topic}-{p.partition} now"
                                     f"{_serving_node(broker, p.writer.name)}")
        offsets = storage.offsets(p)
        end = offsets.last_stable if request.read_committed else offsets.high_watermark
        if request.timestamp is not None:
            found, _ = yield storage.list_offset(p, request.timestamp, isolation)
            start = end if found < 0 else found
        elif request.offset is None:
            start = max(offsets.log_start, end - request.limit)  # the newest records
        else:
            start = request.offset
        start = min(max(start, offsets.log_start), end)
        records: list[dict[str, Any]] = []
        position = start
        while len(records) < request.limit and position < end:
            fetched = yield storage.fetch(p, position, _FETCH_BYTES, isolation).result
            if not fetched.records:
                break
            visibility = _Visibility(fetched.aborted_transactions)
            for batch in iter_batches(fetched.records):
                position = max(position, batch.header.last_offset + 1)
                if not visibility.visible(batch):
                    continue
                for r in batch.records():
                    if r.offset < start or len(records) >= request.limit:
                        continue
                    records.append({
                        "offset": r.offset, "timestamp": r.timestamp,
                        "key": render_value(r.key, request.value_format),
                        "value": render_value(r.value, request.value_format),
                        "headers": [{"key": k, "value": render_value(v, request.value_format)}
                                    for k, v in r.headers],
                    })
        return {"topic": request.topic, "partition": request.partition, "format": request.value_format,
                "isolation": "read_committed" if request.read_committed else "read_uncommitted",
                "log_start_offset": offsets.log_start, "high_watermark": offsets.high_watermark,
                "last_stable_offset": offsets.last_stable, "start": start,
                "next_offset": records[-1]["offset"] + 1 if records else start, "records": records}

    return _topic(broker, request.topic).addCallback(_opened, broker).addCallback(read)
