"""The console's memory of the recent past: a sample every few seconds, a fixed number of them kept, saved
under the server's data dir and loaded again at start (``ConsoleHistory``).

Nothing else in the server keeps rates over time: a segment's rates (``store.containers.rates``) are
moving averages of now, and the epoch history says when segments were created and sealed but not how
busy they were. So each sample holds, per stream, every open segment's measured rate (its shortest
window), the node's bytes in and out per second (from the containers' counters), each consumer group's
total lag and each native reader group's unread bytes. The heat map colours a segment's band by these
samples; the overview and the group pages draw them as lines. The same pass measures the stream list
(``stream_list.StreamList``), of which only the latest rows are kept, outside the samples.

Bounds: ``kept`` samples (a ring), and in each at most ``MAX_GROUPS`` consumer groups (the ones lagging
most), ``MAX_READER_GROUPS`` reader groups (likewise) and ``MAX_SEGMENT_RATES`` segment rates (the
streams with the fewest open segments first, whole streams only): memory and the saved files stay bounded
whatever the traffic and however many topics and groups there are.

Sampling runs on a timer from ``start`` (never per request, so the data path pays nothing for it), every
``interval`` seconds. The samples and the loop live on the reactor thread; the segment rates and the
reader groups need controller calls and segment reads, which run on the controller pool, one at a time (a
tick that finds the previous one still running keeps no rates in its sample).

Persistence (``HistoryFiles``): samples are appended, one JSON line each, to one of two files under the
data dir's ``console/``; once the current file holds ``kept`` samples the other is emptied and becomes
the current one. So a save writes only the samples finished since the last (a few KiB: encoding a whole
ring would hold the interpreter lock long enough to stall the reactor), the files never hold more than
twice ``kept`` samples, and the newest ``kept`` are always on disk. Saves run every ``SAVE_SECONDS`` at
most, on a reactor worker thread, one at a time, and once more at a clean shutdown; ``start`` loads the
files (the newest ``kept`` samples), before the loop runs. A line a crash cut short ends its file and is
dropped; a file that does not parse otherwise is logged and ignored.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, task, threads
from twisted.internet.interfaces import IReactorCore, IReactorTime
from twisted.python.failure import Failure

from millrace.gateway.shared.metrics import live_streams
from millrace.store.errors import SegmentNotFoundError
from millrace.streams.futures import every

if TYPE_CHECKING:
    from millrace.gateway.http.console.stream_list import StreamList, StreamListing
    from millrace.gateway.http.reader_groups import ReaderGroupViews
    from millrace.gateway.http.site import NodeView, StreamViews

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 5.0
SAMPLES_KEPT = 360  # half an hour at 5 s
SAVE_SECONDS = 10.0
MAX_GROUPS = 100  # consumer groups' lags per sample
MAX_READER_GROUPS = 100  # reader groups' unread bytes per sample
MAX_SEGMENT_RATES = 500  # open segments' rates per sample
FILE_VERSION = 1
FILES = ("history-0.jsonl", "history-1.jsonl")

# (events/s, bytes/s) of each open segment of each stream, by "scope/stream" and segment id
StreamRates = dict[str, dict[int, tuple[float, float]]]


@dataclass
class Sample:
    """One moment: when (ms since the epoch) and what was measured then. Never changed in place once
    in the ring (a field is replaced whole), so a copy of the ring can be written on another thread."""

    time_ms: int
    bytes_in_per_s: float | None = None  # None on the first sample: no earlier counters to compare with
    bytes_out_per_s: float | None = None
    group_lag: dict[str, int] = field(default_factory=dict)
    streams: StreamRates = field(default_factory=dict)
    reader_group_unread: dict[str, int] = field(default_factory=dict)  # by "scope/group"

    def to_json(self) -> dict[str, Any]:
        return {"time_ms": self.time_ms, "bytes_in_per_s": self.bytes_in_per_s, "bytes_out_per_s": self.bytes_out_per_s,
                "group_lag": self.group_lag, "reader_group_unread": self.reader_group_unread,
                "streams": {k: {str(sid): list(r) for sid, r in v.items()} for k, v in self.streams.items()}}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Sample:
        def rate(x: Any) -> float | None:
            return None if x is None else float(x)

        return cls(int(raw["time_ms"]), rate(raw["bytes_in_per_s"]), rate(raw["bytes_out_per_s"]),
                   {str(k): int(v) for k, v in raw["group_lag"].items()},
                   {str(k): {int(sid): (float(r[0]), float(r[1])) for sid, r in v.items()}
                    for k, v in raw["streams"].items()},
                   {str(k): int(v) for k, v in raw["reader_group_unread"].items()})


def largest(values: dict[str, int], limit: int) -> dict[str, int]:
    """At most ``limit`` of ``values``: the largest (what an operator watches), then by name."""
    if len(values) <= limit:
        return values
    return dict(sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:limit])


def bounded_rates(rates: StreamRates, limit: int) -> StreamRates:
    """Whole streams, those with the fewest open segments first, up to ``limit`` segments in all."""
    out: StreamRates = {}
    room = limit
    for key, segments in sorted(rates.items(), key=lambda kv: (len(kv[1]), kv[0])):
        if len(segments) > room:
            break
        out[key] = segments
        room -= len(segments)
    return out


def stream_rates(views: StreamViews, store: NodeView) -> StreamRates:
    """Every open segment's rate over the shortest window (blocking: controller and store calls)."""
    out: StreamRates = {}
    for info, segments in live_streams(views.controller):
        rates: dict[int, tuple[float, float]] = {}
        for seg in segments:
            try:
                r = store.segment_rates(seg.name)
            except SegmentNotFoundError:
                continue
            rates[seg.segment_id] = (r.events_per_s[0], r.bytes_per_s[0])
        out[f"{info.scope}/{info.stream}"] = rates
    return bounded_rates(out, MAX_SEGMENT_RATES)


def reader_group_unread(groups: ReaderGroupViews) -> dict[str, int]:
    """Each reader group's unread bytes, by "scope/group" (blocking: controller calls, segment reads)."""
    return largest({f"{g['scope']}/{g['group']}": g["unread_bytes"] for g in groups.summaries()}, MAX_READER_GROUPS)


class HistoryFiles:
    """Two append-only files of samples, one JSON line each after a header line; the current one gets the
    new samples until it holds ``kept``, then the other is emptied and takes over. Blocking file I/O:
    ``load`` before the sampling loop runs, ``append`` on one worker thread at a time."""

    def __init__(self, directory: str, kept: int = SAMPLES_KEPT) -> None:
        self.directory = directory
        self.kept = kept
        self.current = 0  # which of FILES gets the next samples
        self.count = 0  # samples in it

    def path(self, index: int) -> str:
        return os.path.join(self.directory, FILES[index])

    def read(self, index: int, repair: bool = False) -> list[Sample]:
        """A file's samples ([] when it does not exist). A last line without its newline (a write a crash
        cut short) is left out (``repair``: and cut off the file, so the next append starts a line of its
        own); anything else that does not parse raises ValueError."""
        path = self.path(index)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        whole = data.rfind(b"\n") + 1
        if repair and whole < len(data):
            os.truncate(path, whole)
        lines = data[:whole].decode().splitlines()
        if not lines:
            return []
        try:
            header = json.loads(lines[0])
            if header.get("version") != FILE_VERSION:
                raise ValueError(f"version {header.get('version')!r}, not {FILE_VERSION}")
            return [Sample.from_json(json.loads(line)) for line in lines[1:]]
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"{path}: {exc}") from None

    def load(self, repair: bool = True) -> list[Sample]:
        """The newest ``kept`` samples saved, oldest first. The file with the newest samples stays the
        current one. ``repair`` (what a server does before it appends): a line cut short is cut off, and
        an unreadable file is logged and removed; otherwise it raises ValueError."""
        files: list[list[Sample]] = []
        for index in range(len(FILES)):
            try:
                files.append(self.read(index, repair))
            except ValueError as exc:
                if not repair:
                    raise
                log.warning("console history file removed, it does not parse: %s", exc)
                os.remove(self.path(index))
                files.append([])
        newest = [max((s.time_ms for s in f), default=-1) for f in files]
        self.current = 0 if newest[0] >= newest[1] else 1
        self.count = len(files[self.current])
        return sorted((s for f in files for s in f), key=lambda s: s.time_ms)[-self.kept:]

    def append(self, samples: list[Sample]) -> None:
        """Add ``samples`` at the end of the current file, switching files whenever it is full."""
        os.makedirs(self.directory, exist_ok=True)
        pending = list(samples)
        while pending:
            if self.count >= self.kept:
                self.current, self.count = 1 - self.current, 0
                self._start(self.current)
            elif not os.path.exists(self.path(self.current)):
                self.count = 0
                self._start(self.current)
            batch, pending = pending[:self.kept - self.count], pending[self.kept - self.count:]
            with open(self.path(self.current), "a") as f:
                f.write("".join(json.dumps(s.to_json(), separators=(",", ":")) + "\n" for s in batch))
            self.count += len(batch)

    def _start(self, index: int) -> None:
        with open(self.path(index), "w") as f:
            f.write(json.dumps({"version": FILE_VERSION}) + "\n")


def read_saved(directory: str, kept: int = SAMPLES_KEPT) -> list[Sample]:
    """The samples saved under ``directory``, changing nothing there (blocking; for tools and tests)."""
    return HistoryFiles(directory, kept).load(repair=False)


class ConsoleHistory:
    """The bounded samples, the loop that takes them, and their files (reactor thread)."""

    def __init__(self, views: StreamViews, store: NodeView, lags: Callable[[], dict[str, int]],
                 reader_groups: ReaderGroupViews | None = None, directory: str | None = None,
                 clock: IReactorTime | None = None, interval: float = SAMPLE_SECONDS,
                 kept: int = SAMPLES_KEPT, save_seconds: float = SAVE_SECONDS,
                 stream_list: StreamList | None = None) -> None:
        if clock is None:
            from twisted.internet import reactor

            clock = IReactorTime(reactor)
        self.views = views
        self.store = store
        self.lags = lags
        self.reader_groups = reader_groups
        self.stream_list = stream_list  # measured in the same pass as the rates (None: not measured)
        # None: kept in memory only. Its state is the writing thread's once the loop runs.
        self.files = None if directory is None else HistoryFiles(directory, kept)
        self.clock = clock
        self.interval = interval
        self.save_seconds = save_seconds
        self.samples: deque[Sample] = deque(maxlen=kept)
        self._loop: task.LoopingCall | None = None
        self._reading: Sample | None = None  # the sample whose rates are being read
        self._counters: tuple[float, int, int] | None = None  # (monotonic time, bytes in, bytes out)
        self._finished: list[Sample] = []  # samples complete and not saved yet, at most ``kept``
        self._saving: defer.Deferred | None = None
        self._last_save = float("-inf")

    @property
    def running(self) -> bool:
        return self._loop is not None and self._loop.running

    def load(self) -> None:
        """Take the samples a previous run saved (blocking file reads: call before the loop runs)."""
        if self.files is None:
            return
        try:
            self.samples.extend(self.files.load())
        except OSError as exc:
            log.warning("console history in %s not loaded, starting empty: %s", self.files.directory, exc)

    def start(self) -> None:
        """Load what a previous run saved and sample every ``interval`` from now on (and save once more
        at a clean shutdown)."""
        self.load()
        self._loop = every(self.interval, self._tick, "console sampling", self.clock, now=True)
        if self.files is not None and IReactorCore.providedBy(self.clock):
            IReactorCore(self.clock).addSystemEventTrigger("before", "shutdown", self.flush)

    def stop(self) -> None:
        if self.running:
            assert self._loop is not None
            self._loop.stop()
        self._counters = None  # rates across a gap would be averages over it, not "now"

    def _node_counters(self) -> tuple[int, int]:
        appended = read = 0
        for c in self.store.containers:
            appended += c.stats["append_bytes"]
            read += c.stats["read_bytes"]
        return appended, read

    def _tick(self) -> None:
        sample = Sample(int(time.time() * 1000))
        now = time.monotonic()
        appended, read = self._node_counters()
        if self._counters is not None:
            then, appended_then, read_then = self._counters
            elapsed = max(now - then, 1e-3)
            sample.bytes_in_per_s = max(0, appended - appended_then) / elapsed
            sample.bytes_out_per_s = max(0, read - read_then) / elapsed
        self._counters = (now, appended, read)
        try:
            sample.group_lag = largest(self.lags(), MAX_GROUPS)
        except Exception:  # noqa: BLE001 - a sample without lags is still a sample; say why once per tick
            log.warning("console: group lag not sampled", exc_info=True)
        self.samples.append(sample)
        self._maybe_save()
        if self._reading is not None:
            self._finish(sample)  # the previous read still runs: this sample keeps no rates or reader groups
            return
        self._reading = sample

        def measure() -> tuple[StreamRates, dict[str, int] | None, StreamListing | None]:
            listing = None
            if self.stream_list is None:
                rates = stream_rates(self.views, self.store)
            else:  # one walk of the streams for both: the stream list measures every segment's rate anyway
                controller = self.views.controller
                listing = self.stream_list.measure(live_streams(controller), self.store, controller)
                rates = bounded_rates(listing.segment_rates, MAX_SEGMENT_RATES)
            try:
                unread = None if self.reader_groups is None else reader_group_unread(self.reader_groups)
            except Exception as exc:  # noqa: BLE001 - the rates are still worth keeping; say why
                log.warning("console: reader groups not sampled: %s: %s", type(exc).__name__, exc)
                unread = None
            return rates, unread, listing

        def got(result: tuple[StreamRates, dict[str, int] | None, StreamListing | None]) -> None:
            sample.streams, unread, listing = result
            if unread is not None:
                sample.reader_group_unread = unread
            if listing is not None and self.stream_list is not None:
                self.stream_list.install(listing)

        def failed(failure: Failure) -> None:
            log.warning("console: stream rates not sampled: %s", failure.getErrorMessage())

        def done(_: Any) -> None:
            if self._reading is sample:
                self._reading = None
                self._finish(sample)

        self.views.blocking(measure).addCallbacks(got, failed).addBoth(done)

    # -- the files (reactor thread; the writes on a worker thread) ----------------------------------------
    def _finish(self, sample: Sample) -> None:
        """``sample`` is complete: save it with the next save (never more than the ring holds)."""
        if self.files is not None:
            self._finished.append(sample)
            del self._finished[:-(self.samples.maxlen or 1)]

    def _maybe_save(self) -> None:
        if self._finished and self._saving is None and self.clock.seconds() - self._last_save >= self.save_seconds:
            self.save()

    def save(self) -> defer.Deferred:
        """Append the samples finished since the last save (after the save under way, if one is); fires
        once written."""
        if self.files is None:
            return defer.succeed(None)
        if self._saving is not None:
            return self._saving.addBoth(lambda _: self.save())
        files, batch = self.files, self._finished
        self._finished = []
        self._last_save = self.clock.seconds()

        def failed(failure: Failure) -> None:
            log.warning("console history not saved in %s: %s", files.directory, failure.getErrorMessage())

        def done(_: Any) -> None:
            self._saving = None

        d = self._saving = threads.deferToThread(files.append, batch)
        d.addErrback(failed).addBoth(done)
        return d

    def flush(self) -> defer.Deferred:
        """At shutdown: stop sampling and save every sample not saved yet (one still being read as it is)."""
        self.stop()
        if self._reading is not None:
            self._finish(self._reading)
            self._reading = None
        return self.save()

    # -- views of the samples (reactor thread) ---------------------------------------------------------
    def throughput(self) -> list[dict[str, Any]]:
        return [{"time_ms": s.time_ms, "bytes_in_per_s": s.bytes_in_per_s, "bytes_out_per_s": s.bytes_out_per_s}
                for s in self.samples if s.bytes_in_per_s is not None]

    def group_lag(self, group_id: str) -> list[dict[str, Any]]:
        return [{"time_ms": s.time_ms, "lag": s.group_lag[group_id]} for s in self.samples if group_id in s.group_lag]

    def reader_group_unread(self, scope: str, group: str) -> list[dict[str, Any]]:
        key = f"{scope}/{group}"
        return [{"time_ms": s.time_ms, "unread_bytes": s.reader_group_unread[key]}
                for s in self.samples if key in s.reader_group_unread]

    def segment_rates(self, scope: str, stream: str) -> list[dict[str, Any]]:
        """[{time_ms, segments: {segment id: {events_per_s, bytes_per_s}}}] of the samples holding the stream."""
        key = f"{scope}/{stream}"
        return [{"time_ms": s.time_ms, "segments": {str(sid): {"events_per_s": ev, "bytes_per_s": by}
                                                    for sid, (ev, by) in s.streams[key].items()}}
                for s in self.samples if key in s.streams]
