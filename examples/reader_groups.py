"""Reader groups: readers sharing a stream's segments, following a split, a checkpoint and a reset; an
event read again from its pointer; a generated stream cut, a bounded read up to it, a truncation under
a reader, and checkpoints the readers take by themselves.

    python examples/reader_groups.py tcp://127.0.0.1:9090

Orders are written with the customer as routing key, so each customer's orders stay in order. Two
readers of the group "billing" share the stream's segments; after a split they go on in the
successors, and each customer's orders still come in the order they were written.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from millrace import (
    EventPointer,
    EventRead,
    EventStreamReader,
    JsonSerializer,
    ReinitializationRequiredError,
    StreamManager,
    TruncatedDataError,
)


def read_all(reader: EventStreamReader[Any], into: list[EventRead[Any]]) -> None:
    """Read until nothing more comes for a second."""
    while (event := reader.read_next_event(timeout=1.0)) is not None:
        into.append(event)


def write_orders(sm: StreamManager, first: int, count: int) -> None:
    with sm.create_writer("shop", "orders", JsonSerializer()) as writer:
        for n in range(first, first + count):
            customer = f"customer-{n % 3}"
            writer.write_event({"order": n, "customer": customer}, routing_key=customer)


def in_customer_order(events: list[EventRead[Any]]) -> bool:
    last: dict[str, int] = {}
    for event in events:
        order = event.data["order"]
        if order < last.get(event.routing_key or "", -1):
            return False
        last[event.routing_key or ""] = order
    return True


def main(uri: str) -> None:
    with StreamManager(uri) as sm:
        sm.create_scope("shop")
        sm.create_stream("shop", "orders", initial_segments=2)
        write_orders(sm, 0, 20)

        # A group reading "orders" from its head; events come back as JSON values.
        group = sm.create_reader_group("billing", "shop", "orders", serializer=JsonSerializer())
        alice, bob = group.create_reader("alice"), group.create_reader("bob")
        got: dict[str, list[EventRead[Any]]] = {"alice": [], "bob": []}
        threads = [threading.Thread(target=read_all, args=(r, got[r.reader_id])) for r in (alice, bob)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        orders = sorted(e.data["order"] for events in got.values() for e in events)
        print(f"read {len(orders)} orders, each once: {orders == list(range(20))}")
        print(f"online: {group.online_readers()}")

        # Scale up: the busiest segment splits in two. Readers finish it, then read its successors.
        segment = sm.describe_stream("shop", "orders").segments[0].segment
        sm.split_segment("shop", "orders", segment)
        write_orders(sm, 20, 10)
        after: list[EventRead[Any]] = []
        bob.close()  # bob leaves; alice takes his segments over from where he was
        read_all(alice, after)
        print(f"after the split: {len(after)} more, per-customer order kept: {in_customer_order(after)}")

        # A checkpoint needs the readers to go on reading (each returns a checkpoint event).
        events: list[EventRead[Any]] = []
        reading = threading.Thread(target=read_all, args=(alice, events))
        reading.start()
        checkpoint = group.initiate_checkpoint("before-refund-run", timeout=30)
        reading.join()
        print(f"checkpoint {checkpoint.name}: {checkpoint.cuts['shop/orders']}")
        write_orders(sm, 30, 5)
        read_all(alice, events)
        print(f"checkpoint event returned: {[e.checkpoint_name for e in events if e.is_checkpoint]}")

        # Back to the checkpoint: as in Pravega, a reset takes every reader offline, and readers
        # created again read from the checkpoint, so alice reads what came after it again.
        group.reset_to(checkpoint)
        try:
            alice.read_next_event(timeout=1.0)
        except ReinitializationRequiredError:
            alice.close()
            alice = group.create_reader("alice")
        again: list[EventRead[Any]] = []
        read_all(alice, again)
        print(f"after reset_to: {sorted(e.data['order'] for e in again)}")

        # Every event has a pointer: kept as text (beside a result, say), it reads that event again.
        first = next(e for e in again if e.event_pointer is not None)
        kept = first.event_pointer.to_base64() if first.event_pointer is not None else ""
        print(f"fetched again: {sm.fetch_event(EventPointer.from_base64(kept), JsonSerializer())}")

        # A cut agreed with the reading readers (no event is returned for it), then a bounded read up
        # to it by another group: it returns what lies before the cut, never what came after, and
        # then reports the read complete.
        reading = threading.Thread(target=read_all, args=(alice, []))
        reading.start()
        cut = group.generate_stream_cuts(timeout=30)["shop/orders"]
        reading.join()
        write_orders(sm, 35, 5)  # after the cut
        audit = sm.create_reader_group("audit", "shop", "orders", end=cut, serializer=JsonSerializer())
        auditor = audit.create_reader("auditor")
        audited: list[int] = []
        while (event := auditor.read_next_event(timeout=5.0)) is not None and not event.is_read_completed:
            if event.data is not None:  # not a checkpoint
                audited.append(event.data["order"])
        print(f"bounded read up to the cut: {sorted(audited) == list(range(35))}, "
              f"read completed: {event is not None and event.is_read_completed}")

        # Truncation past what alice has read: she is told (TruncatedDataError), then goes on from
        # the new head.
        write_orders(sm, 40, 5)
        sm.truncate_stream(sm.tail_cut("shop", "orders"))
        write_orders(sm, 45, 5)
        told, rest = False, list[int]()
        while True:
            try:
                event = alice.read_next_event(timeout=1.0)
            except TruncatedDataError:
                told = True
                continue
            if event is None:
                break
            if event.data is not None:
                rest.append(event.data["order"])
        print(f"after truncation: told of lost data: {told}, then read {sorted(rest)}")

        # A group whose readers take a checkpoint every half second by themselves (Pravega's
        # automatic checkpoints): each returns a checkpoint event, and the group keeps the last one.
        nightly = sm.create_reader_group("nightly", "shop", "orders", serializer=JsonSerializer(),
                                         automatic_checkpoint_interval=0.5)
        reader = nightly.create_reader("night-reader")
        read, after_all = 0, 0
        while after_all < 1:  # until a checkpoint comes after all five events
            event = reader.read_next_event(timeout=1.0)
            if event is not None and event.is_checkpoint:
                after_all += read == 5
            elif event is not None:
                read += 1
        last = nightly.last_checkpoint()
        print(f"automatic checkpoint after {read} events, its cut at the tail: "
              f"{last is not None and last.cuts['shop/orders'] == sm.tail_cut('shop', 'orders')}")
        reader.close()

        alice.close()
        sm.delete_reader_group("nightly", "shop")
        sm.delete_reader_group("audit", "shop")
        sm.delete_reader_group("billing", "shop")
        print("group deleted")


if __name__ == "__main__":
    main(sys.argv[1])
