"""millrace.aio: write, read and keep state from asyncio code, beside the blocking client.

    python examples/asyncio_client.py tcp://127.0.0.1:9090
"""

from __future__ import annotations

import asyncio
import sys

from millrace import Insert, Put, Remove, StringSerializer
from millrace.aio import AsyncStreamManager


async def main(uri: str) -> None:
    async with AsyncStreamManager(uri) as sm:
        await sm.create_scope("aio-tutorial")
        await sm.create_stream("aio-tutorial", "orders", initial_segments=2)

        async with await sm.create_writer("aio-tutorial", "orders", StringSerializer()) as writer:
            position = await writer.write_event("order-1 placed", routing_key="order-1")   # waits until durable
            print("first event at partition", position.partition)
            sent = [await writer.send(f"order-{n} placed", routing_key=f"order-{n}") for n in range(2, 6)]
            await asyncio.gather(*sent)                                                  # many in flight

        end = await sm.tail_cut("aio-tutorial", "orders")
        group = await sm.create_reader_group("shipping", "aio-tutorial", "orders", end=end,
                                             serializer=StringSerializer())
        async with await group.create_reader("shipper-1") as reader:
            received = [read.data async for read in reader if read.data is not None]      # ends at the end cut
        print("read:", sorted(received))
        await group.close()

        stock = await sm.create_key_value_table("aio-tutorial", "stock", partitions=2)
        await stock.put_all([("2026-11-01", b"10"), ("2026-11-02", b"12"), ("2026-12-01", b"7")],
                            key_family=b"warehouse-\x01")                                  # bytes work as well
        november = [e.key async for e in stock.entries(key_family=b"warehouse-\x01", prefix="2026-11-")]
        print("november:", november)
        versions = await stock.update([Remove("2026-11-01"), Put("2026-11-02", b"11"), Insert("2026-11-03", b"4")],
                                      key_family=b"warehouse-\x01")                        # all or nothing
        print("update gave versions for the puts only:", [v is not None for v in versions])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:9090"))
