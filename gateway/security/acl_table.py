"""Where the server's ACLs live: one table segment, ``ACL_TABLE``, with an ``Authorizer`` over them in memory.

Each binding is one entry, keyed by ``acl_key`` (a digest of its encoding), so creating a binding twice
writes one entry and deleting it names one key.

Invariants:
- Every write reaches the table before memory changes: memory never holds an ACL the store has not,
  and a failed write leaves memory as it was.
- ``authorizer`` is replaced whole, never changed in place: the reactor may ask the one it holds while a
  worker thread writes (copy-on-write; a write rebuilds the index, cheap next to the store's round trip,
  and ACL changes are rare next to authorizations).
- Writes are serialized by a lock, so two concurrent CreateAcls or DeleteAcls cannot lose each other's
  ACLs when each publishes its new Authorizer.

Owning the Authorizer (rather than handing bindings to the caller to install) keeps the two invariants
above in one place: the caller reads ``authorizer`` per request and never installs anything.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Sequence

from millrace.gateway.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Authorizer,
    acl_key,
    decode_binding,
    encode_binding,
    validate_filter,
    validate_new_binding,
)
from millrace.gateway.security.principal import KafkaPrincipal
from millrace.store.errors import SegmentExistsError
from millrace.store.tables import TableStore

ACL_TABLE = "_system/_tables/kafka_acls"


class AclTable:
    """Every ACL of the server, in the table ``ACL_TABLE``, and the Authorizer that decides by them."""

    def __init__(self, tables: TableStore, *, super_users: frozenset[KafkaPrincipal] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._tables = tables
        self._super_users = super_users
        self._allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._write_lock = threading.Lock()
        self._authorizer = self._authorizer_of(())

    @property
    def authorizer(self) -> Authorizer:
        """The current ACLs; never changed once published (read this again to see later changes)."""
        return self._authorizer

    def load(self) -> None:
        """Blocking: read every ACL (at start, and to see another node's changes), creating the table if
        it is missing."""
        with self._write_lock:
            if not self._tables.exists(ACL_TABLE):
                with contextlib.suppress(SegmentExistsError):  # another node created it meanwhile
                    self._tables.create_table(ACL_TABLE)
            bindings = [decode_binding(entry.value) for entry in self._tables.entries(ACL_TABLE)]
            if set(bindings) != set(self._authorizer.bindings()):  # cluster nodes reload each second
                self._authorizer = self._authorizer_of(bindings)

    def create(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Blocking: CreateAcls. Per binding, its error or None (created, or there already, as Kafka answers
        a duplicate); the valid ones are written in one all-or-nothing batch. A store error propagates, and
        then none is created."""
        results: list[AclError | None] = []
        valid: dict[AclBinding, None] = {}
        for binding in bindings:
            try:
                validate_new_binding(binding)
            except AclError as e:
                results.append(e)
                continue
            results.append(None)
            valid[binding] = None
        if valid:
            with self._write_lock:
                # Written even when memory has them: memory may lag another node's deletion, and a
                # rewrite under the same key is harmless.
                self._tables.put(ACL_TABLE, [(acl_key(binding), encode_binding(binding)) for binding in valid])
                self._authorizer = self._authorizer_of([*self._authorizer.bindings(), *valid])
        return results

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | AclError]:
        """Blocking: DeleteAcls. Per filter, the bindings it matched, or its error. Every filter is matched
        against the ACLs as they were before the call (a binding two filters match is listed by both), and
        the removal is one all-or-nothing batch. A store error propagates, and then none is deleted."""
        results: list[list[AclBinding] | AclError] = []
        with self._write_lock:
            current = self._authorizer
            doomed: dict[AclBinding, None] = {}
            for acl_filter in filters:
                try:
                    validate_filter(acl_filter)
                except AclError as e:
                    results.append(e)
                    continue
                matched = current.describe(acl_filter)
                results.append(matched)
                doomed.update(dict.fromkeys(matched))
            if doomed:
                self._tables.remove(ACL_TABLE, [acl_key(binding) for binding in doomed])
                self._authorizer = self._authorizer_of(b for b in current.bindings() if b not in doomed)
        return results

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls, from memory."""
        return self._authorizer.describe(acl_filter)

    def _authorizer_of(self, bindings: Iterable[AclBinding]) -> Authorizer:
        return Authorizer(self._super_users, self._allow_everyone_if_no_acl_found, bindings)

    def __repr__(self) -> str:
        return f"AclTable({self._authorizer!r})"
