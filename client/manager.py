"""``StreamManager``: scopes, streams and stream cuts, the entry point of the native client.

    from millrace import StreamManager
    with StreamManager("tcp://127.0.0.1:9090") as sm:
        sm.create_scope("iot")
        sm.create_stream("iot", "readings", initial_segments=2)

Calls block until the controller has answered (its metadata is durable by then). One manager holds
one connection pool; it reconnects by itself after a lost connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from millrace.client.batch import BatchClient
from millrace.client.byte_stream import ByteStreamReader, ByteStreamWriter
from millrace.client.connection import ConnectionPool, Endpoint
from millrace.client.controller import ControllerClient
from millrace.client.kvtable import KeyValueTable
from millrace.client.reader_group import (
    ConfigMismatchError,
    EventPointer,
    ReaderGroup,
    ReaderGroupManager,
    ReaderGroupNotFoundError,
    StreamDataRetention,
    cut_positions,
    fetch_event,
    group_config,
    open_state,
    retention_of,
    split_stream,
    state_stream,
    subscriber_name,
)
from millrace.client.security import ClientSecurity
from millrace.client.serializers import BytesSerializer, JsonSerializer, Serializer
from millrace.client.streams import (
    RetentionPolicy,
    ScalingPolicy,
    Segment,
    StreamConfiguration,
    StreamCut,
    StreamDescription,
)
from millrace.client.synchronizer import (
    StateNotInitializedError,
    StateSynchronizer,
    claim_synchronizer_format,
)
from millrace.client.transactions import DEFAULT_LEASE_MS, TransactionalEventStreamWriter
from millrace.client.writer import DEFAULT_MAX_BLOCK_SECONDS, DEFAULT_MAX_BUFFERED_BYTES, EventStreamWriter
from millrace.protocol import messages as m
from millrace.protocol.contracts import FORMAT_ATTRIBUTE, AttributeUpdate, SegmentFormat
from millrace.protocol.errors import (
    InvalidRequestError,
    InvalidStreamCutError,
    ScopeNotFoundError,
    StreamExistsError,
    StreamNotFoundError,
)
from millrace.protocol.names import parse_segment_name
from millrace.protocol.reader_group_state import SegmentPosition, initial_state

T = TypeVar("T")
U = TypeVar("U")


RESERVED_PREFIX = "_"  # Millrace's own streams (reader group state: _RG<name>), as Pravega reserves it


def check_user_stream_name(stream: str) -> None:
    """ValueError for a name a user's stream may not take: one starting with ``_`` would be mistaken for
    Millrace's own (a reader group's state stream), as Pravega's validateUserStreamName refuses it."""
    if stream.startswith(RESERVED_PREFIX):
        raise ValueError(f"stream name {stream!r}: names starting with {RESERVED_PREFIX!r} are reserved for "
                         "Millrace's own streams (reader groups' state)")


class StreamManager:
    def __init__(self, controller_uri: str, timeout: float = 30.0, reconnect_timeout: float = 30.0, *,
                 username: str | None = None, password: str | None = None, mechanism: str | None = None,
                 token: str | None = None, token_provider: Callable[[], str] | None = None,
                 ca_file: str | None = None, certfile: str | None = None, keyfile: str | None = None) -> None:
        """``controller_uri``: a node's native endpoint, or a comma-separated list of a cluster's (as a
        Kafka bootstrap list): calls go to the first, and to the others when it cannot be reached.
        ``tls://host:port`` endpoints are reached over TLS (the server checked against ``ca_file``, else the
        system's CAs; ``certfile`` and ``keyfile``: the client's certificate, for mutual TLS).

        Authentication (a listener secured by ``--config``): ``username`` and ``password`` with
        ``mechanism`` SCRAM-SHA-512 (the default), SCRAM-SHA-256 or PLAIN; or an OAUTHBEARER ``token``, or
        a ``token_provider`` called for a fresh token at each authentication (each new connection, and
        before a session ends with its token). Every connection of this manager, and of every writer,
        reader, group, table and synchronizer made from it, authenticates so. A refusal raises
        ``AuthenticationError``; a command the principal may not make, ``AuthorizationError``."""
        endpoints = [Endpoint.parse(part.strip()) for part in controller_uri.split(",") if part.strip()]
        if not endpoints:
            raise ValueError(f"{controller_uri!r} names no endpoint")
        security = ClientSecurity.of(username=username, password=password, mechanism=mechanism, token=token,
                                     token_provider=token_provider, ca_file=ca_file, certfile=certfile,
                                     keyfile=keyfile)
        if any(e.tls for e in endpoints) and not all(e.tls for e in endpoints):
            raise ValueError(f"{controller_uri!r}: every endpoint is tls:// or none is")
        if security is not None and (security.ca_file or security.certfile) and not endpoints[0].tls:
            raise ValueError("ca_file, certfile and keyfile are for tls:// endpoints")
        self.endpoint = endpoints[0]
        self.pool = ConnectionPool(reconnect_timeout=reconnect_timeout, security=security)
        self.controller = ControllerClient(self.endpoint, self.pool, timeout, endpoints[1:])
        try:
            self.pool.get(self.endpoint)  # fail here, not on the first call, when nothing listens
        except BaseException:
            self.pool.close()
            raise

    # -- scopes -----------------------------------------------------------------------------------
    def create_scope(self, scope: str) -> bool:
        """Create ``scope``; False if it already existed."""
        return self.controller.create_scope(scope)

    def check_scope_exists(self, scope: str) -> bool:
        """Whether ``scope`` exists (Pravega's ``checkScopeExists``)."""
        return scope in self.controller.list_scopes()

    def delete_scope(self, scope: str) -> None:
        """Delete an empty scope (ScopeNotEmptyError while it holds streams or key-value tables)."""
        self.controller.delete_scope(scope)

    def list_scopes(self) -> list[str]:
        return self.controller.list_scopes()

    # -- streams ----------------------------------------------------------------------------------
    def create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None, *,
                      initial_segments: int | None = None, scaling: ScalingPolicy | None = None,
                      retention: RetentionPolicy | None = None, tags: Iterable[str] | None = None) -> bool:
        """Create a stream; False if it already existed. Keyword arguments override ``config``'s
        fields; a rate scaling policy starts at ``min_segments`` segments unless told otherwise.
        ``tags`` label the stream for ``list_streams(scope, tag)`` (at most 128, of 1..256
        characters). Names starting with ``_`` are reserved for Millrace's own streams (reader
        groups' state), as Pravega reserves them: ValueError."""
        check_user_stream_name(stream)
        return self._create_stream(scope, stream, config, initial_segments=initial_segments, scaling=scaling,
                                   retention=retention, tags=tags)

    def _create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None, *,
                       initial_segments: int | None = None, scaling: ScalingPolicy | None = None,
                       retention: RetentionPolicy | None = None, tags: Iterable[str] | None = None) -> bool:
        base = config or StreamConfiguration()
        if scaling is not None and initial_segments is None and config is None:
            initial_segments = scaling.min_segments
        resolved = StreamConfiguration(
            initial_segments if initial_segments is not None else base.initial_segments,
            scaling if scaling is not None else base.scaling,
            retention if retention is not None else base.retention,
            tuple(tags) if tags is not None else base.tags,
        )
        try:
            self.controller.create_stream(scope, stream, resolved)
        except StreamExistsError:
            return False
        return True

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Replace the scaling and retention policies and the tags (the segment count changes only by
        scaling)."""
        self.controller.update_stream(scope, stream, config)

    def describe_stream(self, scope: str, stream: str) -> StreamDescription:
        return self.controller.describe_stream(scope, stream)

    def check_stream_exists(self, scope: str, stream: str) -> bool:
        """Whether ``scope/stream`` exists (Pravega's ``checkStreamExists``): False also when the scope
        does not."""
        try:
            described = self.describe_stream(scope, stream)
        except (StreamNotFoundError, ScopeNotFoundError):
            return False
        return described.state != "deleting"

    def get_stream_tags(self, scope: str, stream: str) -> tuple[str, ...]:
        return self.describe_stream(scope, stream).config.tags

    def list_streams(self, scope: str, tag: str | None = None) -> list[str]:
        """The streams of ``scope`` (Millrace's own reader-group streams included); with ``tag``, only
        those tagged so (Pravega's ``listStreams(scope, tag)``)."""
        return self.controller.list_streams(scope, tag)

    def seal_stream(self, scope: str, stream: str) -> None:
        """No more writes: every segment is sealed; readers reach the end."""
        self.controller.seal_stream(scope, stream)

    def delete_stream(self, scope: str, stream: str) -> None:
        """Delete a sealed stream and its data (StreamNotSealedError otherwise)."""
        self.controller.delete_stream(scope, stream)

    def truncate_stream(self, cut: StreamCut) -> None:
        """Drop everything before ``cut``; the stream's head becomes ``cut``."""
        self.controller.truncate_stream(cut)

    def split_segment(self, scope: str, stream: str, segment: Segment, pieces: int = 2,
                      at: list[float] | None = None) -> StreamDescription:
        """Scale up by hand: seal ``segment`` and create ``pieces`` equal successors over its key range,
        or successors split at the points ``at`` (a native stream anywhere inside it; a Kafka topic at
        its partitions' boundaries)."""
        return self.controller.split_segment(scope, stream, segment, pieces, at)

    def merge_segments(self, scope: str, stream: str, segments: list[Segment]) -> StreamDescription:
        """Scale down by hand: seal adjacent open ``segments`` and create one successor over their union."""
        return self.controller.merge_segments(scope, stream, segments)

    # -- stream cuts --------------------------------------------------------------------------------
    def head_cut(self, scope: str, stream: str) -> StreamCut:
        """Where the stream's data begins now: its truncation cut, or its first segments at offset 0."""
        described = self.describe_stream(scope, stream)
        if described.truncation:
            return StreamCut(scope, stream, dict(described.truncation))
        return StreamCut(scope, stream, {s.segment_id: 0 for s in described.history[0].created})

    def tail_cut(self, scope: str, stream: str) -> StreamCut:
        """Where the stream ends now: the current segments at their durable lengths. Everything
        acknowledged before this call lies before the cut."""
        described = self.describe_stream(scope, stream)
        return StreamCut(scope, stream, {s.segment.segment_id: s.length or 0 for s in described.segments})

    def cut_at_time(self, scope: str, stream: str, timestamp_ms: int) -> StreamCut:
        """A cut at or before ``timestamp_ms``: the start of the epoch in effect then (segments carry
        no per-event times, so the cut is as precise as the stream's scaling history), never before
        the stream's head."""
        described = self.describe_stream(scope, stream)
        open_ids: set[int] = set()
        chosen_epoch = 0
        for epoch in described.history:
            if epoch.created_ms > timestamp_ms and open_ids:
                break
            open_ids.difference_update(s.segment_id for s in epoch.sealed)
            open_ids.update(s.segment_id for s in epoch.created)
            chosen_epoch = epoch.epoch
        head = described.truncation
        if any(sid >> 32 > chosen_epoch for sid in head):
            return StreamCut(scope, stream, dict(head))  # the epoch in effect then was truncated away
        return StreamCut(scope, stream, {sid: head.get(sid, 0) for sid in open_ids})

    def get_distance(self, from_cut: StreamCut, to_cut: StreamCut) -> int:
        """Bytes the stream holds between two of its cuts (stored batches with their envelopes, as the
        batch client lists them; data truncated away does not count). InvalidStreamCutError for cuts of
        two streams or ``from_cut`` after ``to_cut``."""
        if (from_cut.scope, from_cut.stream) != (to_cut.scope, to_cut.stream):
            raise InvalidStreamCutError(f"cuts of two streams: {from_cut} and {to_cut}")
        ranges = self.create_batch_client().list_segments(from_cut.scope, from_cut.stream, from_cut, to_cut)
        return sum(r.length for r in ranges)

    def fetch_event(self, pointer: EventPointer, serializer: Serializer[T] | None = None) -> T:
        """The event at ``pointer`` (an ``EventRead.event_pointer``) read again, deserialized with
        ``serializer`` (bytes by default), as Pravega's ``fetchEvent``. NoSuchEventError if no event
        is there; SegmentTruncatedError once truncation (or retention) removed it."""
        chosen: Any = serializer if serializer is not None else BytesSerializer()
        return fetch_event(self.controller, pointer, chosen)

    # -- writers ----------------------------------------------------------------------------------------
    def create_writer(self, scope: str, stream: str, serializer: Serializer[T] | None = None,
                      writer_id: str | None = None, *, max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
                      max_block_seconds: float = DEFAULT_MAX_BLOCK_SECONDS) -> EventStreamWriter[T]:
        """A writer of events with routing keys. Give a stable ``writer_id`` to fence an earlier
        instance of the same writer (after a crash) and to write exactly once across restarts: the
        stream records the id's event numbers, and events numbered at or below them are not written
        again (``EventStreamWriter``); by default each writer gets a fresh id. The writer holds at most
        ``max_buffered_bytes`` of events unacknowledged (32 MiB): ``write_event`` waits for room up to
        ``max_block_seconds`` (60 s), then raises WriterBufferFullError, as Kafka's producer does."""
        return EventStreamWriter(self.controller, scope, stream, serializer, writer_id,
                                 max_buffered_bytes=max_buffered_bytes, max_block_seconds=max_block_seconds)

    def create_transaction_writer(self, scope: str, stream: str, writer_id: str | None = None,
                                  serializer: Serializer[T] | None = None,
                                  lease_ms: int = DEFAULT_LEASE_MS) -> TransactionalEventStreamWriter[T]:
        """A writer of transactions (``begin_txn()``): events visible all at once on commit, or never.
        ``lease_ms``: how long a transaction may stay open before the server aborts it."""
        return TransactionalEventStreamWriter(self.controller, scope, stream, writer_id, serializer, lease_ms)

    # -- state synchronizers ------------------------------------------------------------------------
    def create_synchronizer(self, scope: str, name: str, initial: T | None = None,
                            serializer: Serializer[T] | None = None, *,
                            apply_update: Callable[[T, U], T] | None = None,
                            update_serializer: Serializer[U] | None = None) -> StateSynchronizer[T, U]:
        """A member of the shared state ``scope/name``, kept in a stream of that name with one fixed
        segment (created if missing). With ``initial`` the state is initialized if it holds none yet;
        either way the member has read the current state when this returns. ``serializer`` turns
        states into bytes (JSON by default); ``apply_update(state, update) -> state`` and
        ``update_serializer`` serve update functions that return ``Updates`` instead of a state. Its
        name, a stream's, may not start with ``_`` (``create_stream``)."""
        check_user_stream_name(name)
        return self.internal_synchronizer(scope, name, initial, serializer, apply_update=apply_update,
                                          update_serializer=update_serializer)

    def internal_synchronizer(self, scope: str, name: str, initial: T | None = None,
                              serializer: Serializer[T] | None = None, *,
                              apply_update: Callable[[T, U], T] | None = None,
                              update_serializer: Serializer[U] | None = None) -> StateSynchronizer[T, U]:
        """``create_synchronizer`` for the client's own state streams, whose names are reserved (a reader
        group's ``_RG<name>``)."""
        self._create_stream(scope, name, scaling=ScalingPolicy.fixed(1))
        described = self.describe_stream(scope, name)
        # Scaling would seal the segment under the members, and retention would truncate it where no
        # snapshot lies: only compaction may move the head of a synchronizer's stream.
        if (len(described.segments) != 1 or described.config.scaling != ScalingPolicy.fixed(1)
                or described.config.retention != RetentionPolicy()):
            raise InvalidRequestError(f"{scope}/{name} is not a stream of one fixed segment without "
                                      "retention: it cannot hold a synchronizer's state")
        segment = described.segments[0].segment
        claim_synchronizer_format(self.controller, segment.name)
        default: Any = JsonSerializer()
        sync: StateSynchronizer[T, U] = StateSynchronizer(
            self.controller, scope, name, segment.segment_id, segment.name,
            serializer if serializer is not None else default, apply_update, update_serializer,
        )
        if initial is not None:
            sync.initialize(initial)
        else:
            sync.fetch_updates()
        return sync

    # -- byte streams ----------------------------------------------------------------------------------
    def create_byte_stream(self, scope: str, name: str) -> bool:
        """Make ``scope/name`` a byte stream: a stream of one fixed segment (created if missing; False
        if it existed) marked so that event writers are refused on it. A stream of several segments,
        one that ever scaled, or one event writers have partitioned is refused."""
        check_user_stream_name(name)
        created = self._create_stream(scope, name, scaling=ScalingPolicy.fixed(1))
        self._byte_stream_segment(scope, name, mark=True)
        return created

    def create_byte_writer(self, scope: str, name: str, writer_id: str | None = None) -> ByteStreamWriter:
        """A writer appending to the byte stream ``scope/name``. A writer given the ``writer_id`` of an
        earlier one continues its event numbers (two live writers must not share an id)."""
        segment_id, segment = self._byte_stream_segment(scope, name, mark=True)
        return ByteStreamWriter(self.controller, scope, name, segment_id, segment, writer_id)

    def create_byte_reader(self, scope: str, name: str, timeout: float | None = None) -> ByteStreamReader:
        """A reader of the byte stream ``scope/name`` from its head; ``timeout`` bounds each read's wait
        (None: wait until a byte arrives or the stream is sealed and read)."""
        segment_id, segment = self._byte_stream_segment(scope, name, mark=False)
        return ByteStreamReader(self.controller, scope, name, segment_id, segment, timeout)

    def _byte_stream_segment(self, scope: str, name: str, mark: bool) -> tuple[int, str]:
        """The (id, name) of a byte stream's segment. ``mark`` sets the byte-stream mark first and then
        looks again: the gateway looks for the mark after recording event partitions, so whichever of
        the two comes second sees the other and refuses."""
        described = self.describe_stream(scope, name)
        for attempt in range(2 if mark else 1):
            if (len(described.segments) != 1 or len(described.history) != 1
                    or described.config.scaling != ScalingPolicy.fixed(1)):
                raise InvalidRequestError(f"{scope}/{name} is not a stream of one fixed segment: it cannot be "
                                          "a byte stream")
            if described.partition_count is not None:
                raise InvalidRequestError(f"{scope}/{name} holds events (event writers partitioned it): it "
                                          "cannot be a byte stream")
            segment = described.segments[0].segment
            if mark and attempt == 0:
                self.controller.call(m.UpdateSegmentAttributes(
                    segment=segment.name, attributes=(AttributeUpdate(FORMAT_ATTRIBUTE, SegmentFormat.BYTES),)), retry=True)
                described = self.describe_stream(scope, name)
        return segment.segment_id, segment.name

    # -- key-value tables ------------------------------------------------------------------------------
    def create_key_value_table(self, scope: str, table: str, partitions: int = 1) -> KeyValueTable:
        """Create (or open, if it exists) the key-value table ``scope/table`` with ``partitions``
        table segments; key families spread over them."""
        _, actual = self.controller.create_kv_table(scope, table, partitions)
        return KeyValueTable(self.controller, scope, table, actual)

    def key_value_table(self, scope: str, table: str) -> KeyValueTable:
        """An existing table (KeyValueTableNotFoundError otherwise)."""
        return KeyValueTable(self.controller, scope, table, self.controller.kv_table_partitions(scope, table))

    def delete_key_value_table(self, scope: str, table: str) -> None:
        self.controller.delete_kv_table(scope, table)

    def list_key_value_tables(self, scope: str) -> list[str]:
        return self.controller.list_kv_tables(scope)

    # -- batch reads ----------------------------------------------------------------------------------
    def create_batch_client(self) -> BatchClient:
        """Pravega's batch API: a stream's history between two cuts as segment ranges that tasks read
        in parallel (``list_segments``, ``read_segment``). It uses this manager's connections."""
        return BatchClient(self)

    # -- reader groups ----------------------------------------------------------------------------------
    def create_reader_group(self, name: str, scope: str, streams: str | list[str],
                            start: StreamCut | list[StreamCut] | None = None,
                            serializer: Serializer[T] | None = None, *,
                            end: StreamCut | list[StreamCut] | None = None,
                            automatic_checkpoint_interval: float | None = None,
                            retention_type: StreamDataRetention = StreamDataRetention.NONE) -> ReaderGroup[T]:
        """A reader group ``name`` in ``scope`` reading ``streams`` (names in ``scope``, or
        "other-scope/stream") from ``start`` (a cut per stream; by default each stream's head) up to
        ``end`` (a cut per stream whose read ends there; by default none ends: the group follows the
        streams' tails). If the group exists already with this configuration it is opened as it is;
        with another one (streams, start or end cuts; a reset changes its start) ConfigMismatchError,
        as Pravega's. ``serializer`` turns event bytes into events (bytes by default); readers may
        override it. ``automatic_checkpoint_interval`` (seconds, Pravega's
        ``automaticCheckpointIntervalMillis``): readers start a checkpoint by themselves that often
        (each returns a checkpoint event for it); by default only the application starts them.
        ``retention_type`` (``StreamDataRetention``, Pravega's): other than NONE, the group is a
        subscriber of its streams, holding their data back from consumption-based retention from its
        start cuts until it releases it."""
        wanted = [split_stream(scope, s) for s in ([streams] if isinstance(streams, str) else streams)]
        starts = self._cuts_by_stream(start, wanted, "start")
        ends = self._cuts_by_stream(end, wanted, "end")
        positions: dict[str, SegmentPosition] = {}
        for sc, st in wanted:
            positions.update(cut_positions(starts[(sc, st)] if (sc, st) in starts else self.head_cut(sc, st)))
        end_positions: dict[str, SegmentPosition] = {}
        for cut in ends.values():
            end_positions.update(cut_positions(cut))
        for key, pos in positions.items():
            if key in end_positions and end_positions[key].offset < pos.offset:
                raise InvalidStreamCutError(f"end cut before the start cut: segment {key} starts at {pos.offset} "
                                            f"and ends at {end_positions[key].offset}")
        qualified = [f"{sc}/{st}" for sc, st in wanted]
        config = group_config(qualified, starts.values(), ends.values(), automatic_checkpoint_interval,
                              retention_type)
        initial = initial_state(qualified, positions, end_positions, config)
        sync = open_state(self, scope, name, initial)
        found = sync.state.config
        if found is not None and found != config:
            sync.close()
            raise ConfigMismatchError(f"reader group {scope}/{name} exists with another configuration: {found} "
                                      f"(asked for {config}); open it with reader_group(), or delete it first")
        if retention_type != StreamDataRetention.NONE:
            # A subscriber from its start, unless it is one already (an existing group opened again:
            # what it released stays released).
            subscriber = subscriber_name(scope, name)
            for sc, st in wanted:
                if subscriber not in self.controller.subscriber_cuts(sc, st):
                    start_cut = starts[(sc, st)] if (sc, st) in starts else self._cut_of(positions, sc, st)
                    self.controller.update_subscriber_cut(sc, st, subscriber, start_cut)
        chosen: Any = serializer if serializer is not None else BytesSerializer()
        return ReaderGroup(self, scope, name, sync, chosen)

    @staticmethod
    def _cut_of(positions: dict[str, SegmentPosition], scope: str, stream: str) -> StreamCut:
        prefix = f"{scope}/{stream}/"
        return StreamCut(scope, stream, {parse_segment_name(k)[2]: p.offset for k, p in positions.items()
                                         if k.startswith(prefix)})

    def subscriber_cuts(self, scope: str, stream: str) -> dict[str, StreamCut]:
        """The subscriber reader groups of ``scope/stream`` ("scope/group") with their retention cuts:
        a stream with consumption-based retention is never truncated past the lowest of them."""
        return self.controller.subscriber_cuts(scope, stream)

    @staticmethod
    def _cuts_by_stream(cuts: StreamCut | list[StreamCut] | None, wanted: list[tuple[str, str]],
                        what: str) -> dict[tuple[str, str], StreamCut]:
        """One cut per stream: InvalidRequestError for a cut of a stream the group does not read, or two
        cuts of one stream."""
        listed = [cuts] if isinstance(cuts, StreamCut) else list(cuts or [])
        by_stream = {(c.scope, c.stream): c for c in listed}
        if len(by_stream) != len(listed):
            raise InvalidRequestError(f"two {what} cuts of one stream: {[str(c) for c in listed]}")
        strangers = sorted(set(by_stream) - set(wanted))
        if strangers:
            raise InvalidRequestError(f"{what} cuts of streams the group does not read: {strangers}")
        return by_stream

    def reader_group(self, name: str, scope: str, serializer: Serializer[T] | None = None) -> ReaderGroup[T]:
        """The existing reader group ``name`` of ``scope`` (ReaderGroupNotFoundError otherwise)."""
        try:
            self.describe_stream(scope, state_stream(name))
        except StreamNotFoundError:
            raise ReaderGroupNotFoundError(f"no reader group {name!r} in scope {scope!r}") from None
        chosen: Any = serializer if serializer is not None else BytesSerializer()
        return ReaderGroup(self, scope, name, open_state(self, scope, name, None), chosen)

    def list_reader_groups(self, scope: str) -> list[str]:
        """The names of the reader groups of ``scope``."""
        prefix = state_stream("")
        return sorted(s[len(prefix):] for s in self.list_streams(scope) if s.startswith(prefix))

    def reader_group_manager(self, scope: str) -> ReaderGroupManager:
        """The reader groups of ``scope`` (Pravega's ``ReaderGroupManager``), on this manager's connections."""
        return ReaderGroupManager(self, scope)

    def delete_reader_group(self, name: str, scope: str) -> None:
        """Delete the group and its state (its readers fail at their next state refresh). A subscriber
        group stops being one: its streams' consumption-based retention no longer waits for it."""
        streams: list[str] = []
        try:
            group: ReaderGroup[bytes]
            with self.reader_group(name, scope, BytesSerializer()) as group:
                state = group.state()
                if retention_of(state) != StreamDataRetention.NONE:
                    streams = state.streams
        except (ReaderGroupNotFoundError, StateNotInitializedError):
            pass  # no group (the seal below says so), or one never initialized: no subscriber
        for qualified in streams:
            sc, st = qualified.split("/", 1)
            with contextlib.suppress(StreamNotFoundError):
                self.controller.update_subscriber_cut(sc, st, subscriber_name(scope, name), None)
        try:
            self.seal_stream(scope, state_stream(name))
            self.delete_stream(scope, state_stream(name))
        except StreamNotFoundError:
            raise ReaderGroupNotFoundError(f"no reader group {name!r} in scope {scope!r}") from None

    # -- lifetime -------------------------------------------------------------------------------------
    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> StreamManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
