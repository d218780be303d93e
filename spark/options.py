"""The options of ``format("millrace")``, read and checked once, on the driver, before any task runs.

Plain values only (strings, ints, ``StreamCut`` s): the readers and writers holding them are pickled to
Spark's Python workers, which open their own ``StreamManager`` from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from millrace import StreamCut, StreamManager

DEFAULT_TXN_LEASE_MS = 600_000  # a sink's transactions wait from the tasks' writes to the driver's commit
COMMIT_TABLE = "spark-commits"  # default key-value table (in the sink stream's scope) of committed batch ids
_SECURITY = ("username", "password", "mechanism", "token", "ca_file", "certfile", "keyfile")


class MillraceOptionError(ValueError):
    """An option of ``format("millrace")`` is missing or malformed."""


def split_stream(qualified: str) -> tuple[str, str]:
    """``scope/stream`` -> (scope, stream)."""
    scope, slash, stream = qualified.strip().partition("/")
    if not slash or not scope or not stream or "/" in stream:
        raise MillraceOptionError(f"stream {qualified!r}: expected scope/stream")
    return scope, stream


@dataclass(frozen=True)
class Connection:
    """Where the native listener is and how to log in: what every driver and task needs to connect
    (``StreamManager``'s arguments of the same names)."""

    endpoint: str
    timeout_s: float = 30.0
    username: str | None = None
    password: str | None = None
    mechanism: str | None = None
    token: str | None = None
    ca_file: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def manager(self) -> StreamManager:
        return StreamManager(self.endpoint, timeout=self.timeout_s, username=self.username, password=self.password,
                             mechanism=self.mechanism, token=self.token, ca_file=self.ca_file,
                             certfile=self.certfile, keyfile=self.keyfile)

    def __repr__(self) -> str:  # Spark logs plans and errors: never the password or token
        return f"Connection({self.endpoint!r}, user={self.username!r})"


def connection(options: Mapping[str, str]) -> Connection:
    endpoint = options.get("endpoint")
    if not endpoint:
        raise MillraceOptionError("option endpoint is required: the native listener's host:port")
    try:
        timeout = float(options.get("timeout", "30"))
    except ValueError:
        raise MillraceOptionError(f"option timeout: seconds, not {options.get('timeout')!r}") from None
    return Connection(endpoint, timeout, **{k: options.get(k) or None for k in _SECURITY})


@dataclass(frozen=True)
class SourceOptions:
    """What to read: streams (``scope/stream``, comma-separated) and, per stream, the cuts to read
    between (None: the head, resp. the tail when the read is planned)."""

    connection: Connection
    streams: tuple[tuple[str, str], ...]
    start_cuts: Mapping[str, StreamCut]  # "scope/stream" -> cut
    end_cuts: Mapping[str, StreamCut]


def source_options(options: Mapping[str, str]) -> SourceOptions:
    streams_option = options.get("stream")
    if not streams_option:
        raise MillraceOptionError("option stream is required: scope/stream (several: comma-separated)")
    streams = tuple(split_stream(s) for s in streams_option.split(",") if s.strip())
    names = {f"{sc}/{st}" for sc, st in streams}
    if len(names) != len(streams):
        raise MillraceOptionError(f"option stream names a stream twice: {streams_option!r}")
    return SourceOptions(connection(options), streams, _cuts(options, "start_cut", names),
                         _cuts(options, "end_cut", names))


def _cuts(options: Mapping[str, str], name: str, streams: set[str]) -> dict[str, StreamCut]:
    """Comma-separated base64 ``StreamCut`` s (``StreamCut.to_base64()``), at most one per stream read."""
    found: dict[str, StreamCut] = {}
    for text in (options.get(name) or "").split(","):
        if not text.strip():
            continue
        try:
            cut = StreamCut.from_base64(text.strip())
        except ValueError as exc:
            raise MillraceOptionError(f"option {name}: not a base64 StreamCut ({exc})") from None
        key = f"{cut.scope}/{cut.stream}"
        if key not in streams:
            raise MillraceOptionError(f"option {name}: a cut of {key}, which option stream does not name")
        if key in found:
            raise MillraceOptionError(f"option {name}: two cuts of {key}")
        found[key] = cut
    return found


@dataclass(frozen=True)
class SinkOptions:
    """Where to write (one stream) and where the sink records the batches it committed."""

    connection: Connection
    scope: str
    stream: str
    sink_id: str | None  # the key of this sink's record in the commit table
    commit_scope: str
    commit_table: str
    txn_lease_ms: int
    batch_id: int | None  # a batch write's own id (streaming writes get Spark's)


def sink_options(options: Mapping[str, str], streaming: bool) -> SinkOptions:
    stream_option = options.get("stream")
    if not stream_option or "," in stream_option:
        raise MillraceOptionError("option stream is required: the one scope/stream to write to")
    scope, stream = split_stream(stream_option)
    commit_scope, commit_table = split_stream(options.get("commit_table") or f"{scope}/{COMMIT_TABLE}")
    batch_id = _int(options, "batch_id")
    sink_id = options.get("sink_id") or None
    if sink_id is None and (streaming or batch_id is not None):
        # Without a name of its own, a sink would share its record with any other query's, and skip its batches.
        raise MillraceOptionError("option sink_id is required for exactly-once writes (streaming, or a batch "
                                  "write with batch_id): it names this sink's record of committed batch ids")
    lease = _int(options, "txn_lease_ms")
    return SinkOptions(connection(options), scope, stream, sink_id, commit_scope, commit_table,
                       DEFAULT_TXN_LEASE_MS if lease is None else lease, batch_id)


def _int(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise MillraceOptionError(f"option {name}: an integer, not {text!r}") from None
