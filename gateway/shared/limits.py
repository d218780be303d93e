"""What every listener (Kafka, native, HTTP) holds a client to, above all one that has not authenticated:
how large a request may be, how much memory requests still arriving may hold together, how long a
connection may stay idle or unauthenticated, and how many failed logins an address may make.

``ConnectionLimits`` are the settings, read from the Kafka properties (``security.properties``) with
Kafka's names where Kafka has them:

- ``socket.request.max.bytes`` (100 MiB): a larger Kafka request closes its connection;
- ``queued.max.request.bytes`` (256 MiB here; Kafka's -1, no bound, may be given): the ``MemoryPool`` every
  listener reserves a frame's announced size from when its first bytes arrive, until it is whole. A
  connection whose next frame cannot be reserved stops reading until bytes return (Kafka's MemoryPool
  muting a channel), so clients announcing large frames and trickling them hold at most this much;
- ``sasl.server.max.receive.size`` (512 KiB): the largest frame any listener reads before its client
  authenticated (``SecuritySettings.sasl_server_max_receive_size``);
- ``connections.max.idle.ms`` (600000): a connection that neither sent nor was sent anything for this
  long, with no request outstanding, is closed;
- ``millrace.authentication.timeout.ms`` (30000; Kafka has no such setting): a connection that must
  authenticate and has not within this long is closed, and so is a TLS connection whose handshake is not
  done by then, on every listener (``TlsHandshakeDeadline``), and an HTTP connection that has not sent its
  first request's headers;
- ``connection.failed.authentication.delay.ms`` (100): a failed login is answered, and its connection
  closed, this long after it failed, reading nothing from the client meanwhile (Kafka's KIP-306), so a
  guesser cannot learn each answer at once;
- ``millrace.authentication.failures.max`` (100) within ``millrace.authentication.failures.window.ms``
  (60000): after that many failed logins from one address over every listener, its next attempts are
  refused without running the mechanism until the window has passed (``LoginFailures``);
- ``millrace.http.max.request.body.bytes`` (1 MiB): a larger HTTP request body is answered 413 before
  it is read.

``ConnectionGuards`` is what a running server shares between its listeners: the limits, the one pool and
the one count of failed logins. Everything here runs on the reactor thread.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MIB = 1024 * 1024

SOCKET_REQUEST_MAX_BYTES = "socket.request.max.bytes"
QUEUED_MAX_REQUEST_BYTES = "queued.max.request.bytes"
CONNECTIONS_MAX_IDLE_MS = "connections.max.idle.ms"
AUTHENTICATION_TIMEOUT_MS = "millrace.authentication.timeout.ms"
CONNECTION_FAILED_AUTHENTICATION_DELAY_MS = "connection.failed.authentication.delay.ms"
AUTHENTICATION_FAILURES_MAX = "millrace.authentication.failures.max"
AUTHENTICATION_FAILURES_WINDOW_MS = "millrace.authentication.failures.window.ms"
HTTP_MAX_REQUEST_BODY_BYTES = "millrace.http.max.request.body.bytes"

# How long a user name a log line shows: enough to recognise a real one, never a client's megabyte.
LOGGED_NAME_CHARS = 64


def loggable_name(name: str) -> str:
    """``name`` as a log line may carry it: cut to ``LOGGED_NAME_CHARS``, saying how long it was."""
    if len(name) <= LOGGED_NAME_CHARS:
        return repr(name)
    return f"{name[:LOGGED_NAME_CHARS]!r}... ({len(name)} characters)"


@dataclass(frozen=True)
class ConnectionLimits:
    """The settings (module docstring); defaults as there."""

    socket_request_max_bytes: int = 100 * MIB
    queued_max_request_bytes: int = 256 * MIB  # -1: no bound (Kafka's default)
    connections_max_idle_ms: int = 600_000
    authentication_timeout_ms: int = 30_000
    connection_failed_authentication_delay_ms: int = 100
    authentication_failures_max: int = 100
    authentication_failures_window_ms: int = 60_000
    http_max_request_body_bytes: int = 1 * MIB

    def describe(self) -> str:
        return (f"{SOCKET_REQUEST_MAX_BYTES}={self.socket_request_max_bytes}, "
                f"{QUEUED_MAX_REQUEST_BYTES}={self.queued_max_request_bytes}, "
                f"{CONNECTIONS_MAX_IDLE_MS}={self.connections_max_idle_ms}, "
                f"{AUTHENTICATION_TIMEOUT_MS}={self.authentication_timeout_ms}, "
                f"{CONNECTION_FAILED_AUTHENTICATION_DELAY_MS}={self.connection_failed_authentication_delay_ms}, "
                f"{AUTHENTICATION_FAILURES_MAX}={self.authentication_failures_max} per "
                f"{self.authentication_failures_window_ms} ms, "
                f"{HTTP_MAX_REQUEST_BODY_BYTES}={self.http_max_request_body_bytes}")


class MemoryPool:
    """Bytes of frames being received, over every connection of every listener (Kafka's MemoryPool for
    ``queued.max.request.bytes``). A reservation succeeds while the pool has room for it, or when nothing
    is reserved at all (so a frame larger than the pool is still read, alone); a connection refused waits
    (``wait``) and is called, in the order they waited, as bytes return. ``capacity`` None: no bound."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.reserved = 0
        self._waiting: collections.deque[Callable[[], bool]] = collections.deque()

    def try_reserve(self, size: int) -> bool:
        if self.capacity is not None and self.reserved and self.reserved + size > self.capacity:
            return False
        self.reserved += size
        return True

    def release(self, size: int) -> None:
        self.reserved -= size
        waiting = self._waiting
        # Each waiter reserves what it needs and says whether it got it; the first that cannot stays first.
        while waiting:
            if not waiting[0]():
                break
            waiting.popleft()

    def wait(self, retry: Callable[[], bool]) -> None:
        """Call ``retry`` as bytes return, until it answers True (it reserved what it needed)."""
        self._waiting.append(retry)

    def forget(self, retry: Callable[[], bool]) -> None:
        """A waiting connection closed."""
        with contextlib.suppress(ValueError):  # it was not waiting
            self._waiting.remove(retry)

    @property
    def waiting(self) -> int:
        return len(self._waiting)


class LoginFailures:
    """Failed logins per client address, over every listener: once an address has ``most`` failures in a
    window of ``window_s`` seconds (counted from its first failure in it), its attempts are refused until
    that window ends, before any mechanism runs.

    One misconfigured client must not lock out every other user of its host (or of a NAT): a user who
    logged in from the address before (``succeeded``) is still let try there, and counted on its own,
    losing that once it fails ``most`` times in a window itself. A success resets no count: one valid
    account must not let an address guess at others. At most ``addresses`` addresses and as many
    address-and-user pairs are remembered, the oldest forgotten first, so the counts themselves are
    bounded."""

    def __init__(self, most: int, window_s: float, addresses: int = 65536,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.most = most
        self.window_s = window_s
        self._addresses = addresses
        self._clock = clock
        # [window start, failures] by address, and by (address, user) for users trusted there
        self._failures: collections.OrderedDict[object, list[float]] = collections.OrderedDict()
        self._trusted: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def refused(self, address: str, user: str | None = None) -> bool:
        """Whether ``address`` may not try to log in now (as ``user``, where the attempt names one)."""
        if user is not None and (address, user) in self._trusted:
            return self._over((address, user))
        return self._over(address)

    def failed(self, address: str, user: str | None = None) -> None:
        self._count(address)
        pair = (address, user or "")
        if user is not None and pair in self._trusted:
            self._count(pair)
            if self._over(pair):
                del self._trusted[pair]

    def succeeded(self, address: str, user: str) -> None:
        self._trusted[(address, user)] = None
        self._trusted.move_to_end((address, user))
        while len(self._trusted) > self._addresses:
            self._trusted.popitem(last=False)

    def _over(self, key: object) -> bool:
        entry = self._failures.get(key)
        if entry is None:
            return False
        if self._clock() - entry[0] >= self.window_s:
            del self._failures[key]
            return False
        return entry[1] >= self.most

    def _count(self, key: object) -> None:
        now = self._clock()
        entry = self._failures.get(key)
        if entry is None or now - entry[0] >= self.window_s:
            self._failures[key] = [now, 1.0]
        else:
            entry[1] += 1
        self._failures.move_to_end(key)
        while len(self._failures) > 2 * self._addresses:
            self._failures.popitem(last=False)


@dataclass
class ConnectionGuards:
    """What a server's listeners share: the limits, the memory pool, the failed logins. Reactor only."""

    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    pre_auth_max_bytes: int = 524288  # sasl.server.max.receive.size
    pool: MemoryPool = field(init=False)
    login_failures: LoginFailures = field(init=False)

    def __post_init__(self) -> None:
        queued = self.limits.queued_max_request_bytes
        self.pool = MemoryPool(None if queued < 0 else queued)
        self.login_failures = LoginFailures(self.limits.authentication_failures_max,
                                            self.limits.authentication_failures_window_ms / 1000)
