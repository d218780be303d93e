"""``millrace.aio`` against a real server: the asyncio API writes, reads, commits and updates tables without
blocking the event loop, and a cancelled read loses no event. (No pytest-asyncio: each test runs its
coroutine with ``asyncio.run``.)"""

from __future__ import annotations

import asyncio

import pytest

from millrace import (
    Insert,
    Put,
    Remove,
    StringSerializer,
    TableKeyVersionMismatchError,
    TxnStatus,
    WriterBufferFullError,
)
from millrace.aio import AsyncEventReader, AsyncEventWriter, AsyncStreamManager
from tests.server_process import ServerProcess


def test_scopes_streams_writes_and_reads(uri: str) -> None:
    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            assert await sm.create_scope("aio")
            assert await sm.check_scope_exists("aio")
            assert await sm.create_stream("aio", "events", initial_segments=2)
            assert not await sm.create_stream("aio", "events")
            assert await sm.check_stream_exists("aio", "events")
            async with await sm.create_writer("aio", "events", StringSerializer()) as writer:
                first = await writer.write_event("e-0", routing_key="k")
                # Pipelined: every send is in flight before any is awaited.
                pending = [await writer.send(f"e-{i}", routing_key="k") for i in range(1, 500)]
                await writer.flush()
                assert all(p.done() for p in pending)  # flush waited for all of them
                positions = [first, *await asyncio.gather(*pending)]
                assert [p.offset for p in positions] == list(range(positions[0].offset, positions[0].offset + 500))
                await writer.write_events("k", ["a-0", "a-1"])
            group = await sm.create_reader_group("g", "aio", "events", serializer=StringSerializer())
            async with await group.create_reader("r1") as reader:
                got = []
                while len(got) < 502:
                    read = await reader.read_next_event(timeout=5.0)
                    assert read is not None, f"only {len(got)} events came"
                    if read.data is not None:
                        got.append(read.data)
                assert got == [f"e-{i}" for i in range(500)] + ["a-0", "a-1"]
            await group.close()
            await sm.delete_reader_group("g", "aio")
            await sm.seal_stream("aio", "events")
            await sm.delete_stream("aio", "events")
            assert not await sm.check_stream_exists("aio", "events")

    asyncio.run(main())


def test_a_waiting_read_leaves_the_loop_free(uri: str) -> None:
    """A read waits on its own thread: while it waits, the same loop writes the event it then returns
    (a read that blocked the loop would time out first, the write never made)."""

    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            await sm.create_scope("aio-free")
            await sm.create_stream("aio-free", "s")
            group = await sm.create_reader_group("g", "aio-free", "s")
            reader = await group.create_reader("r1")
            writer = await sm.create_writer("aio-free", "s")
            read = asyncio.create_task(reader.read_next_event(timeout=60.0))
            await asyncio.sleep(0.2)  # the read is waiting on its thread
            await writer.write_event(b"while you wait")
            got = await read
            assert got is not None and got.data == b"while you wait"
            await reader.close()
            await writer.close()
            await group.close()

    asyncio.run(main())


async def small_buffer_writer(sm: AsyncStreamManager, scope: str, max_buffered_bytes: int,
                              max_block_seconds: float) -> AsyncEventWriter[bytes]:
    """A writer of a new stream with a small buffer, its first event (offset 0) acknowledged."""
    await sm.create_scope(scope)
    await sm.create_stream(scope, "s")
    writer: AsyncEventWriter[bytes] = await sm.create_writer(
        scope, "s", max_buffered_bytes=max_buffered_bytes, max_block_seconds=max_block_seconds)
    await writer.write_event(b"first")
    return writer


def test_a_full_writer_buffer_is_waited_out_off_the_loop(server: ServerProcess, uri: str) -> None:
    """With the server paused, a send that does not fit the writer's buffer waits for room on the pool:
    the loop keeps running meanwhile, and the send completes once the server answers again."""

    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            writer = await small_buffer_writer(sm, "aio-full", 3_000, 60)
            server.pause()
            try:
                pending = [await writer.send(b"x" * 1000) for _ in range(3)]
                blocked = asyncio.ensure_future(writer.send(b"x" * 1000))
                ticks = 0
                while ticks < 20:  # the loop runs while the send waits
                    await asyncio.sleep(0.01)
                    ticks += 1
                assert not blocked.done() and not any(p.done() for p in pending)
            finally:
                server.resume()
            last = await asyncio.wait_for(blocked, 30)
            positions = await asyncio.gather(*pending, last)
            assert [p.offset for p in positions] == [1, 2, 3, 4]
            await writer.close()

    asyncio.run(main())


def test_a_full_buffer_raises_on_the_loop_after_its_block_time(server: ServerProcess, uri: str) -> None:
    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            writer = await small_buffer_writer(sm, "aio-full-raise", 1_000, 0.2)
            server.pause()
            try:
                pending = await writer.send(b"x" * 1000)
                with pytest.raises(WriterBufferFullError):
                    await writer.send(b"y")
            finally:
                server.resume()
            assert (await pending).offset == 1
            await writer.close()

    asyncio.run(main())


def test_a_cancelled_read_loses_no_event(uri: str) -> None:
    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            await sm.create_scope("aio-cancel")
            await sm.create_stream("aio-cancel", "s")
            group = await sm.create_reader_group("g", "aio-cancel", "s")
            reader = await group.create_reader("r1")
            read = asyncio.create_task(reader.read_next_event(timeout=30.0))
            await asyncio.sleep(0.2)  # its thread is waiting now
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
            writer = await sm.create_writer("aio-cancel", "s")
            await writer.write_event(b"first")  # the cancelled read's thread takes it
            await writer.write_event(b"second")
            got = await reader.read_next_event(timeout=10.0)
            assert got is not None and got.data == b"first"
            got = await reader.read_next_event(timeout=10.0)
            assert got is not None and got.data == b"second"
            await reader.close()
            await writer.close()
            await group.close()

    asyncio.run(main())


def test_async_for_ends_with_a_bounded_read(uri: str) -> None:
    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            await sm.create_scope("aio-bounded")
            await sm.create_stream("aio-bounded", "s", initial_segments=3)
            async with await sm.create_writer("aio-bounded", "s") as writer:
                for i in range(30):
                    await writer.send(f"{i}".encode(), routing_key=f"key-{i % 7}")
            end = await sm.tail_cut("aio-bounded", "s")
            async with await sm.create_writer("aio-bounded", "s") as writer:
                await writer.write_event(b"after the end cut")
            group = await sm.create_reader_group("g", "aio-bounded", "s", end=end)
            reader: AsyncEventReader[bytes] = await group.create_reader("r1", poll_seconds=0.2)
            seen = sorted([int(read.data) async for read in reader if read.data is not None])
            assert seen == list(range(30))
            await reader.close()
            await group.close()

    asyncio.run(main())


def test_transactions(uri: str) -> None:
    async def main() -> None:
        async with AsyncStreamManager(uri) as sm:
            await sm.create_scope("aio-txn")
            await sm.create_stream("aio-txn", "s")
            async with await sm.create_transaction_writer("aio-txn", "s") as txw:
                async with await txw.begin_txn() as txn:
                    for i in range(5):
                        await txn.send(f"in-{i}".encode(), routing_key="k")
                assert await txw.txn_status(txn.txn_id) is TxnStatus.COMMITTED
                dropped = await txw.begin_txn()
                await dropped.write_event(b"never visible", routing_key="k")
                await dropped.abort()
                assert await dropped.check_status() is TxnStatus.ABORTED
            group = await sm.create_reader_group("g", "aio-txn", "s", end=await sm.tail_cut("aio-txn", "s"))
            reader = await group.create_reader("r1", poll_seconds=0.2)
            assert [read.data async for read in reader if read.data is not None] == \
                [f"in-{i}".encode() for i in range(5)]
            await reader.close()
            await group.close()

    asyncio.run(main())


def test_key_value_tables(uri: str) -> None:
    async def main() -> None:
        async with AsyncStreamManager(uri, max_workers=2) as sm:
            await sm.create_scope("aio-kv")
            table = await sm.create_key_value_table("aio-kv", "t", partitions=2)
            v = await table.put(b"\x00k", b"v1")
            assert await table.get(b"\x00k") == (b"v1", v)
            with pytest.raises(TableKeyVersionMismatchError):
                await table.put(b"\x00k", b"stale", if_version=v + 1)
            await table.remove(b"\x00k", if_version=v)
            assert await table.get(b"\x00k") is None
            # More than a page, concurrently: the two pool threads take turns.
            await asyncio.gather(*(table.put_all([(f"k{i:04d}-{j}", b"x") for j in range(10)], key_family="f")
                                   for i in range(120)))
            keys = [k async for k, _ in table.keys(key_family="f")]
            assert keys == sorted(f"k{i:04d}-{j}" for i in range(120) for j in range(10))
            ranged = [e.key async for e in table.entries(key_family="f", start="k0005", end="k0006")]
            assert ranged == [f"k0005-{j}" for j in range(10)]
            versions = await table.update([Remove("k0000-0"), Put("k0000-1", b"y"), Insert("new", b"z")],
                                          key_family="f")
            assert versions[0] is None
            assert await table.get_all(["k0000-0", "k0000-1", "new"], key_family="f") == \
                [None, (b"y", versions[1]), (b"z", versions[2])]
            assert await sm.list_key_value_tables("aio-kv") == ["t"]

    asyncio.run(main())


def test_max_workers_must_allow_a_call() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        AsyncStreamManager("tcp://127.0.0.1:1", max_workers=0)
