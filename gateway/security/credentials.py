"""Where a server's users live: SCRAM credentials in a table segment, PLAIN users in a listener's JAAS
configuration, and the store a listener's SASL exchanges look both up in.

Invariants:
- A SCRAM credential is kept as Kafka keeps it (salt, StoredKey, ServerKey, iterations), never the
  password; one per user and mechanism, durable once ``upsert`` returns.
- Lookups are served from memory (the reactor authenticates with them, and may not block); writes go
  through the table first, so memory never holds a credential the store has not.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from millrace.gateway.security.sasl import (
    SCRAM_HASHES,
    PlainUsers,
    ScramCredential,
    scram_credential,
)
from millrace.store.errors import SegmentExistsError
from millrace.store.tables import TableStore

SCRAM_TABLE = "_system/_tables/scram_credentials"
_ADD_SCRAM = re.compile(r"^(SCRAM-SHA-(?:256|512))=\[(.*)\]$")


def _key(user: str, mechanism: str) -> bytes:
    return f"{mechanism}\0{user}".encode()


def _encode(credential: ScramCredential) -> bytes:
    b64 = base64.b64encode
    return json.dumps({"salt": b64(credential.salt).decode(), "stored_key": b64(credential.stored_key).decode(),
                       "server_key": b64(credential.server_key).decode(), "iterations": credential.iterations}).encode()


def _decode(value: bytes) -> ScramCredential:
    fields = json.loads(value)
    b64 = base64.b64decode
    return ScramCredential(b64(fields["salt"]), b64(fields["stored_key"]), b64(fields["server_key"]),
                           int(fields["iterations"]))


class ScramCredentialTable:
    """Every SCRAM credential of the server, in the table ``SCRAM_TABLE``."""

    def __init__(self, tables: TableStore) -> None:
        self._tables = tables
        self._credentials: dict[tuple[str, str], ScramCredential] = {}

    def load(self) -> None:
        """Blocking: read every credential (at start, and to see another node's changes)."""
        if not self._tables.exists(SCRAM_TABLE):
            with contextlib.suppress(SegmentExistsError):
                self._tables.create_table(SCRAM_TABLE)
        loaded = {}
        for entry in self._tables.entries(SCRAM_TABLE):
            mechanism, _, user = entry.key.decode().partition("\0")
            loaded[(user, mechanism)] = _decode(entry.value)
        self._credentials = loaded  # one assignment: a reader sees the old set or the new, never half

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get((user, mechanism))

    def users(self) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations (what DescribeUserScramCredentials tells)."""
        described: dict[str, dict[str, int]] = {}
        for (user, mechanism), credential in sorted(self._credentials.items()):
            described.setdefault(user, {})[mechanism] = credential.iterations
        return described

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        """Blocking: set the user's credential for ``mechanism``."""
        self._tables.put(SCRAM_TABLE, [(_key(user, mechanism), _encode(credential))])
        self._credentials = {**self._credentials, (user, mechanism): credential}

    def delete(self, user: str, mechanism: str) -> bool:
        """Blocking: remove the user's credential for ``mechanism``; whether there was one."""
        if (user, mechanism) not in self._credentials:
            return False
        self._tables.remove(SCRAM_TABLE, [_key(user, mechanism)])
        self._credentials = {k: v for k, v in self._credentials.items() if k != (user, mechanism)}
        return True

    def add_if_missing(self, spec: str) -> str | None:
        """Blocking: an ``--add-scram-file`` item, as kafka-storage.sh format's ``--add-scram`` takes it,
        ``SCRAM-SHA-256=[name=alice,password=alice-secret(,iterations=8192)]``: created unless the user
        has a credential for that mechanism already. The user's name when created, else None."""
        mechanism, user, password, iterations = parse_add_scram(spec)
        if self.scram(user, mechanism) is not None:
            return None
        self.upsert(user, mechanism, scram_credential(mechanism, password, iterations))
        return user

    def __repr__(self) -> str:
        return f"ScramCredentialTable({sorted(f'{u}/{m}' for u, m in self._credentials)})"


def read_add_scram_items(files: Sequence[str], variables: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The items of ``--add-scram-file FILE`` and ``--add-scram-env VARIABLE``: kafka-storage.sh format's
    ``--add-scram`` values, one a line (blank lines and ``#`` comments skipped), each checked. A file or
    the environment, never the command line, which every local user can read (``ps``, /proc/PID/cmdline)
    for as long as the server runs. ValueError naming the file or variable, never with its text."""
    sources: list[tuple[str, str]] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                sources.append((f"--add-scram-file {path}", f.read()))
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--add-scram-file {path}: cannot be read: {getattr(e, 'strerror', None) or e}") from None
    for name in variables:
        if name not in environ:
            raise ValueError(f"--add-scram-env {name}: the environment has no variable {name}")
        sources.append((f"--add-scram-env {name}", environ[name]))
    items = []
    for source, text in sources:
        for number, line in enumerate(text.splitlines(), 1):
            item = line.strip()
            if not item or item.startswith("#"):
                continue
            try:
                parse_add_scram(item)
            except ValueError as e:
                raise ValueError(f"{source}, line {number}: {e}") from None
            items.append(item)
    return items


def parse_add_scram(spec: str) -> tuple[str, str, str, int]:
    """(mechanism, user, password, iterations) of an ``--add-scram`` value; ValueError (without the
    password) when it does not read."""
    match = _ADD_SCRAM.match(spec.strip())
    if match is None or match.group(1) not in SCRAM_HASHES:
        raise ValueError("expected SCRAM-SHA-256=[name=USER,password=PASSWORD] or SCRAM-SHA-512=[...]")
    options: dict[str, str] = {}
    for number, item in enumerate(match.group(2).split(","), 1):
        key, eq, value = item.partition("=")
        if not eq:  # not shown: a mistyped item may be the password itself
            raise ValueError(f"{match.group(1)}: expected key=value items, item {number} is not")
        options[key.strip()] = value.strip().strip('"')
    if not options.get("name") or "password" not in options:
        raise ValueError(f"{match.group(1)}: both name= and password= are needed")
    try:
        iterations = int(options.get("iterations", "4096"))
    except ValueError:
        raise ValueError(f"{match.group(1)}: iterations must be a number") from None
    return match.group(1), options["name"], options["password"], iterations


class ListenerCredentials:
    """A listener's ``CredentialStore``: its JAAS PLAIN users and the server's SCRAM credentials."""

    def __init__(self, plain_users: Mapping[str, str], scram: ScramCredentialTable) -> None:
        self._plain = MappingProxyType(dict(plain_users))
        self._scram = scram

    @property
    def plain_users(self) -> PlainUsers:
        return self._plain

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram.scram(user, mechanism)

    def __repr__(self) -> str:
        return f"ListenerCredentials(plain users {sorted(self._plain)}, {self._scram!r})"
