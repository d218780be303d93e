"""Client quotas: Kafka's precedence among the eight entity levels, the rate and throttle arithmetic of
its ClientQuotaManager, the table that keeps quotas, the AlterClientQuotas / DescribeClientQuotas
handlers' answers (validation, validate_only, filters, strict, authorization), and enforcement over the
wire against a real server (throttle_time_ms, a muted connection, an empty throttled fetch)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from twisted.internet import defer

from millrace.gateway.kafka.broker import RequestContext
from millrace.gateway.kafka.handlers.alter_client_quotas import handle_alter_client_quotas
from millrace.gateway.kafka.handlers.describe_client_quotas import handle_describe_client_quotas
from millrace.gateway.kafka.quotas.enforcement import ClientQuotas, Rate, record_and_throttle
from millrace.gateway.kafka.quotas.entities import (
    CLIENT_ID,
    USER,
    Entity,
    Limit,
    QuotaError,
    precedence,
    resolve,
    validate_entity,
)
from millrace.gateway.kafka.quotas.table import QUOTA_TABLE, Alteration, QuotaTable
from millrace.gateway.kafka_protocol.codec import request_class
from millrace.gateway.kafka_protocol.errors import ErrorCode
from millrace.gateway.kafka_protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from millrace.gateway.kafka_protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from millrace.gateway.security.acl_table import AclTable
from millrace.gateway.security.principal import ANONYMOUS
from millrace.protocol.records import NewRecord, build_record_batch
from millrace.store.tables import TableStore
from tests.kafka.wire import FETCH, PRODUCE, local
from tests.server_process import ServerProcess
from tests.tables.harness import StoreHarness, make_harness

PRODUCER = "producer_byte_rate"
INVALID = ErrorCode.INVALID_REQUEST


def ent(user: str | None | bool = False, client: str | None | bool = False) -> Entity:
    """An entity: False leaves the type out, None is its default."""
    pairs: list[tuple[str, str | None]] = []
    if client is not False:
        pairs.append((CLIENT_ID, cast("str | None", client)))
    if user is not False:
        pairs.append((USER, cast("str | None", user)))
    return tuple(pairs)


# Precedence (Kafka's DefaultQuotaCallback), most specific first.

LEVELS = [
    (ent("alice", "app"), ("alice", "app")),  # /config/users/alice/clients/app
    (ent("alice", None), ("alice", "app")),  # /config/users/alice/clients/<default>
    (ent("alice"), ("alice", "")),  # /config/users/alice
    (ent(None, "app"), ("alice", "app")),  # /config/users/<default>/clients/app
    (ent(None, None), ("alice", "app")),  # /config/users/<default>/clients/<default>
    (ent(None), ("alice", "")),  # /config/users/<default>
    (ent(client="app"), ("", "app")),  # /config/clients/app
    (ent(client=None), ("", "app")),  # /config/clients/<default>
]


def test_precedence_is_kafkas_eight_levels() -> None:
    assert list(precedence("alice", "app")) == LEVELS


def test_resolution_takes_the_most_specific_level_that_sets_the_key() -> None:
    quotas: dict[Entity, dict[str, float]] = {entity: {PRODUCER: float(i + 1)} for i, (entity, _) in enumerate(LEVELS)}
    quotas[ent("bob")] = {PRODUCER: 99.0}  # another user's: never applies to alice
    for i, (entity, tags) in enumerate(LEVELS):
        assert resolve(quotas, PRODUCER, "alice", "app") == Limit(float(i + 1), tags)
        assert resolve(quotas, "consumer_byte_rate", "alice", "app") is None  # per key
        del quotas[entity]
    assert resolve(quotas, PRODUCER, "alice", "app") is None


def test_a_key_set_lower_applies_when_the_higher_level_sets_another() -> None:
    quotas = {ent("alice", "app"): {"consumer_byte_rate": 5.0}, ent(client=None): {PRODUCER: 7.0}}
    assert resolve(quotas, PRODUCER, "alice", "app") == Limit(7.0, ("", "app"))


def test_an_empty_client_id_matches_only_default_client_levels() -> None:
    quotas = {ent(client=""): {PRODUCER: 1.0}, ent(client=None): {PRODUCER: 2.0}}
    assert resolve(quotas, PRODUCER, "ANONYMOUS", "") == Limit(2.0, ("", ""))


# The rate and throttle arithmetic (Kafka's Rate, SampledStat and QuotaUtils.throttleTime).

def test_a_young_rate_is_measured_over_num_minus_one_windows() -> None:
    rate = Rate(11, 1000.0)
    rate.record(5_000_000, 0.0)
    assert rate.window(0.0) == 10_000.0  # (11 - 1) whole windows assumed
    assert rate.measure(500.0) == pytest.approx(5_000_000 / 10.5)
    assert rate.window(12_500.0) == 10_000.0  # purged: the sample's last event is 11 s old, so it starts anew
    assert rate.measure(12_500.0) == 0.0


def test_the_rate_slides_over_num_windows() -> None:
    rate = Rate(3, 1000.0)
    for second in range(10):
        rate.record(1000.0, second * 1000.0)
    # the sample of 6 s is purged (its event is num windows old): 7, 8 and 9 s remain, over 7 s to 9 s
    assert rate.measure(9000.0) == pytest.approx(3000.0 / 2.0)
    assert rate.measure(9500.0) == pytest.approx(3000.0 / 2.5)


def test_throttle_is_the_time_that_brings_the_rate_back_to_the_quota() -> None:
    rate = Rate(11, 1000.0)
    assert record_and_throttle(rate, 1_000_000.0, 10_000_000, 0.0) == 0  # exactly at the bound: 10 MB / 10 s
    # 20 MB over a 10 s window is 2 MB/s: (2 - 1) / 1 * 10 s
    assert record_and_throttle(rate, 1_000_000.0, 10_000_000, 0.0) == 10_000
    # the request quota's throttle is at most one window
    assert record_and_throttle(Rate(11, 1000.0), 10.0, 1000.0, 0.0, max_ms=1000.0) == 1000


def test_a_greedy_producer_averages_its_quota() -> None:
    """Five requests in flight whenever the connection reads: after the first window's burst the average
    holds to the quota (the model of what compat_tests/test_quotas.py measures with real clients)."""
    quota, size = 1_000_000.0, 64 * 1024
    rate = Rate(2, 1000.0)
    now = muted_until = 0.0
    sent: list[tuple[float, int]] = []
    while now < 20.0:
        now = max(now, muted_until)
        for _ in range(5):
            throttle = record_and_throttle(rate, quota, size, now * 1000)
            sent.append((now, size))
            muted_until = max(muted_until, now + throttle / 1000)
        now += 0.002
    steady = sum(s for t, s in sent if 2.0 <= t < 20.0) / 18.0
    assert 0.9 * quota <= steady <= 1.1 * quota


# The table.

@pytest.fixture
def harness(request: pytest.FixtureRequest, tmp_path: Any) -> StoreHarness:
    return make_harness(request, tmp_path)


@pytest.fixture
def tables(harness: StoreHarness) -> TableStore:
    return TableStore(harness.store)


def alter(entity: list[tuple[str, str | None]], *ops: tuple[str, float | None]) -> Alteration:
    return Alteration(entity, list(ops))


def test_alterations_are_durable_and_reload(harness: StoreHarness, tables: TableStore) -> None:
    table = QuotaTable(tables)
    table.load()
    assert tables.exists(QUOTA_TABLE) and table.quotas == {}
    results = table.alter([alter([(USER, "alice"), (CLIENT_ID, None)], (PRODUCER, 1024.0), ("request_percentage", 50.5)),
                           alter([(CLIENT_ID, "app")], ("consumer_byte_rate", 2048.0))])
    assert results == [(ErrorCode.NONE, None)] * 2
    expected = {ent("alice", None): {PRODUCER: 1024.0, "request_percentage": 50.5},
                ent(client="app"): {"consumer_byte_rate": 2048.0}}
    assert table.quotas == expected
    reopened = QuotaTable(TableStore(harness.restart()))
    reopened.load()
    assert reopened.quotas == expected
    reopened.alter([alter([(CLIENT_ID, None), (USER, "alice")], (PRODUCER, None)),  # the same entity, in any order
                    alter([(CLIENT_ID, "app")], ("consumer_byte_rate", None), ("consumer_byte_rate", 1.0))])
    assert reopened.quotas == {ent("alice", None): {"request_percentage": 50.5}, ent(client="app"): {"consumer_byte_rate": 2048.0}}
    again = QuotaTable(reopened._tables)  # noqa: SLF001 - the same store, read afresh
    again.load()
    assert again.quotas == reopened.quotas


def test_validate_only_writes_nothing(tables: TableStore) -> None:
    table = QuotaTable(tables)
    table.load()
    assert table.alter([alter([(USER, None)], (PRODUCER, 10.0))], validate_only=True) == [(ErrorCode.NONE, None)]
    assert table.quotas == {} and list(tables.entries(QUOTA_TABLE)) == []


@pytest.mark.parametrize(("alteration", "message"), [
    (alter([(USER, "a")], ("bogus", 1.0)), "Invalid configuration key bogus"),
    (alter([(USER, "a")], (PRODUCER, 0.0)), "Quota producer_byte_rate must be greater than 0"),
    (alter([(USER, "a")], (PRODUCER, 1.5)), "producer_byte_rate cannot be a fractional value."),
    (alter([(USER, "a")], (PRODUCER, 1e30)), "Proposed value for producer_byte_rate is too large for a LONG."),
    (alter([(USER, "a")], (PRODUCER, 1.0), (PRODUCER, 2.0)),
     "Duplicate quota key producer_byte_rate not updating quota for this entity ClientQuotaEntity(entries={user=a})"),
    (alter([], (PRODUCER, 1.0)), "Invalid empty client quota entity"),
    (alter([(USER, "")], (PRODUCER, 1.0)), "Empty user not supported"),
    (alter([("group", "g")], (PRODUCER, 1.0)), "Unhandled client quota entity type: group"),
    (alter([(USER, "a"), (USER, "b")], (PRODUCER, 1.0)), "Invalid client quota entity, duplicate entity entry user"),
    (alter([("ip", "10.0.0.1"), (USER, "a")], ("connection_creation_rate", 1.0)),
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    (alter([("ip", "10.0.0.1")], (PRODUCER, 1.0)), "Invalid configuration key producer_byte_rate"),
    (alter([(CLIENT_ID, "c")], ("connection_creation_rate", 1.0)), "Invalid configuration key connection_creation_rate"),
])
def test_refused_alterations_answer_kafkas_errors(tables: TableStore, alteration: Alteration, message: str) -> None:
    table = QuotaTable(tables)
    table.load()
    assert table.alter([alteration, alter([(CLIENT_ID, "ok")], (PRODUCER, 5.0))]) == [(INVALID, message),
                                                                                    (ErrorCode.NONE, None)]
    assert table.quotas == {ent(client="ok"): {PRODUCER: 5.0}}  # the valid entry is applied alone


def test_a_duplicate_entity_is_refused(tables: TableStore) -> None:
    table = QuotaTable(tables)
    table.load()
    results = table.alter([alter([(USER, "a")], (PRODUCER, 1.0)), alter([(USER, "a")], (PRODUCER, 2.0))])
    assert results == [(ErrorCode.NONE, None), (INVALID, "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})")]
    assert table.alter([alter([("ip", None)], ("connection_creation_rate", 3.0))]) == [(ErrorCode.NONE, None)]


@pytest.fixture
def described(tables: TableStore) -> QuotaTable:
    table = QuotaTable(tables)
    table.load()
    table.alter([alter(list(entity), (PRODUCER, float(i + 1))) for i, (entity, _) in enumerate(LEVELS)])
    return table


def entities(table: QuotaTable, *components: tuple[str, int, str | None], strict: bool = False) -> set[Entity]:
    return {entity for entity, _ in table.describe(components, strict)}


def test_describe_filters_as_kafka(described: QuotaTable) -> None:
    every = {entity for entity, _ in LEVELS}
    assert entities(described) == every
    assert entities(described, strict=True) == set()
    assert entities(described, (USER, 0, "alice")) == {ent("alice", "app"), ent("alice", None), ent("alice")}
    assert entities(described, (USER, 0, "alice"), strict=True) == {ent("alice")}
    assert entities(described, (USER, 1, None)) == {ent(None, "app"), ent(None, None), ent(None)}
    assert entities(described, (USER, 2, None), (CLIENT_ID, 1, None)) == {ent("alice", None), ent(None, None)}
    assert entities(described, (CLIENT_ID, 2, None), strict=True) == {ent(client="app"), ent(client=None)}
    assert entities(described, (CLIENT_ID, 0, "other")) == set()
    values = dict(described.describe([(USER, 0, "alice"), (CLIENT_ID, 0, "app")], True))
    assert values == {ent("alice", "app"): {PRODUCER: 1.0}}


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("", 0, "x")], INVALID, "Invalid empty entity type."),
    ([(USER, 0, "a"), (USER, 2, None)], INVALID, "Entity type user cannot appear more than once in the filter."),
    ([("group", 2, None)], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([(USER, 0, None)], INVALID, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([(USER, 1, "a")], INVALID, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([(USER, 2, "a")], INVALID, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([(USER, 7, None)], INVALID, "Unknown match type 7"),
    ([("ip", 2, None), (USER, 2, None)], INVALID, "Invalid entity filter component combination. IP filter component "
                                                  "should not be used with user or clientId filter component."),
])
def test_refused_filters(described: QuotaTable, components: list[tuple[str, int, str | None]], code: ErrorCode,
                         message: str) -> None:
    with pytest.raises(QuotaError) as refused:
        described.describe(components, False)
    assert (refused.value.code, refused.value.message) == (code, message)


def test_entity_pairs_are_sorted_whatever_the_request_order() -> None:
    assert validate_entity([(USER, "a"), (CLIENT_ID, None)]) == validate_entity([(CLIENT_ID, None), (USER, "a")])


# The handlers: answers, validate_only, and Kafka's authorization (ALTER_CONFIGS / DESCRIBE_CONFIGS on CLUSTER).

class _Broker:
    """What the two handlers reach: the quotas, the ACLs, and ``blocking`` (run at once here)."""

    def __init__(self, tables: TableStore, acls: AclTable | None) -> None:
        self.quotas = ClientQuotas(tables)
        self.quotas.load()
        self.acls = acls

    def blocking(self, fn: Callable[..., Any], *args: Any) -> defer.Deferred[Any]:
        return defer.succeed(fn(*args))


def _ctx(broker: _Broker, api_key: int, version: int = 1) -> RequestContext:
    return RequestContext(cast("Any", broker), api_key, version, 1, "admin", "127.0.0.1:5000")


def _result(d: Any) -> Any:
    if not isinstance(d, defer.Deferred):
        return d
    out: list[Any] = []
    d.addCallback(out.append)
    return out[0]


A, D = AlterClientQuotasRequest, DescribeClientQuotasRequest


def _alter_request(validate_only: bool = False) -> AlterClientQuotasRequest:
    return A(validate_only=validate_only, entries=[
        A.EntryData(entity=[A.EntityData(entity_type=USER, entity_name=None)],
                    ops=[A.OpData(key=PRODUCER, value=1024.0, remove=False)]),
        A.EntryData(entity=[A.EntityData(entity_type=CLIENT_ID, entity_name="app")],
                    ops=[A.OpData(key="nope", value=1.0, remove=False)])])


def test_handlers_alter_and_describe(tables: TableStore) -> None:
    broker = _Broker(tables, None)
    checked = _result(handle_alter_client_quotas(_ctx(broker, 49), _alter_request(validate_only=True)))
    assert [(e.error_code, e.error_message) for e in checked.entries] == [
        (0, None), (INVALID, "Invalid configuration key nope")]
    assert broker.quotas.table.quotas == {} and not broker.quotas.active  # validate_only
    applied = _result(handle_alter_client_quotas(_ctx(broker, 49), _alter_request()))
    assert [(e.entity[0].entity_type, e.entity[0].entity_name, e.error_code) for e in applied.entries] == [
        (USER, None, 0), (CLIENT_ID, "app", INVALID)]
    assert broker.quotas.active
    answer = handle_describe_client_quotas(_ctx(broker, 48), D(components=[
        D.ComponentData(entity_type=USER, match_type=1, match=None)], strict=True))
    assert answer.error_code == 0 and answer.entries is not None
    assert [([(e.entity_type, e.entity_name) for e in x.entity], [(v.key, v.value) for v in x.values])
            for x in answer.entries] == [([(USER, None)], [(PRODUCER, 1024.0)])]
    refused = handle_describe_client_quotas(_ctx(broker, 48), D(components=[
        D.ComponentData(entity_type=USER, match_type=0, match=None)]))
    assert (refused.error_code, refused.entries) == (INVALID, None)


def test_handlers_refuse_without_the_cluster_config_operations(tables: TableStore) -> None:
    acls = AclTable(tables)  # no ACLs, no super user: ANONYMOUS may do nothing
    acls.load()
    broker = _Broker(tables, acls)
    denied = _result(handle_alter_client_quotas(_ctx(broker, 49), _alter_request()))
    assert [(e.error_code, e.error_message) for e in denied.entries] == [
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")] * 2
    assert broker.quotas.table.quotas == {}
    answer = handle_describe_client_quotas(_ctx(broker, 48), D())
    assert (answer.error_code, answer.error_message) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                         "Cluster authorization failed.")
    allowed = AclTable(tables, super_users=frozenset({ANONYMOUS}))
    allowed.load()
    broker.acls = allowed
    assert handle_describe_client_quotas(_ctx(broker, 48), D()).error_code == 0


# Enforcement against a real server.

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(str(tmp_path_factory.mktemp("quotas")), "--override", "quota.window.num=2") as s:
        yield s


def _set(port: int, client_id: str, key: str, value: float | None) -> None:
    with local(port, client_id="quota-admin") as admin:
        answer = admin.send(49, 1, A(entries=[A.EntryData(
            entity=[A.EntityData(entity_type=CLIENT_ID, entity_name=client_id)],
            ops=[A.OpData(key=key, value=value or 0.0, remove=value is None)])]))
    assert answer.entries[0].error_code == 0


def test_a_producer_over_its_quota_is_throttled_and_muted(server: ServerProcess) -> None:
    _set(server.kafka_port, "slow-wire", PRODUCER, 100_000.0)  # 100 kB/s: a 1 MB window's worth (quota.window.num=2)
    batch = build_record_batch([NewRecord(key=None, value=b"x" * 100_000) for _ in range(3)])
    with local(server.kafka_port, client_id="fast-wire") as fast:
        fast.create("quota-produce")
        assert fast.produce("quota-produce", 0, batch).error_code == 0
    with local(server.kafka_port, client_id="slow-wire") as slow:
        first = slow.send(PRODUCE, 9, _produce_request(batch))
        assert first.throttle_time_ms > 0  # 300 kB in a 1 s window at 100 kB/s: (300 - 100) / 100 * 1 s
        started = time.monotonic()
        slow.send(PRODUCE, 9, _produce_request(batch))  # not read until the mute ends (KIP-219)
        assert time.monotonic() - started >= first.throttle_time_ms / 1000 * 0.9
    with local(server.kafka_port, client_id="fast-wire") as fast:
        assert fast.send(PRODUCE, 9, _produce_request(batch)).throttle_time_ms == 0  # others are not throttled
    _set(server.kafka_port, "slow-wire", PRODUCER, None)
    with local(server.kafka_port, client_id="slow-wire") as slow:
        assert slow.send(PRODUCE, 9, _produce_request(batch)).throttle_time_ms == 0  # removed: unlimited again


def test_a_throttled_fetch_returns_no_data(server: ServerProcess) -> None:
    batch = build_record_batch([NewRecord(key=None, value=b"y" * 100_000) for _ in range(3)])
    with local(server.kafka_port, client_id="fill") as fill:
        fill.create("quota-fetch")
        for _ in range(3):
            assert fill.produce("quota-fetch", 0, batch).error_code == 0
    _set(server.kafka_port, "slow-reader", "consumer_byte_rate", 100_000.0)
    F = request_class(FETCH)  # noqa: N806 - a generated message class
    fetch = F(max_wait_ms=0, min_bytes=1, max_bytes=1 << 22, isolation_level=0, session_id=0, session_epoch=-1,
              topics=[F.FetchTopic(topic="quota-fetch", partitions=[F.FetchPartition(
                  partition=0, fetch_offset=0, partition_max_bytes=1 << 22)])])
    with local(server.kafka_port, client_id="slow-reader") as reader:
        answers = [reader.send(FETCH, 12, fetch) for _ in range(2)]
    # The first gets at most a window's worth (100 kB: at least one batch, KIP-74) and is not throttled yet,
    # or returns nothing and is; either way a throttled one carries no records.
    throttled = [a for a in answers if a.throttle_time_ms > 0]
    assert throttled, [a.throttle_time_ms for a in answers]
    assert all(a.responses == [] for a in throttled)
    with local(server.kafka_port, client_id="other-reader") as other:
        data = other.send(FETCH, 12, fetch)
    assert data.throttle_time_ms == 0 and len(data.responses[0].partitions[0].records) > 300_000


def _produce_request(batch: bytes) -> Any:
    P = request_class(PRODUCE)  # noqa: N806 - a generated message class
    return P(acks=-1, timeout_ms=10000, topic_data=[P.TopicProduceData(
        name="quota-produce", partition_data=[P.PartitionProduceData(index=0, records=batch)])])
