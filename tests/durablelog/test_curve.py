"""CURVE on the log replica links, against real ``millrace logd`` processes: a log whose nodes hold the
cluster's keys appends and reads as ever; a client without keys, with keys the replicas do not let in,
or expecting another replica key gets no answer at all (ZeroMQ drops it in the handshake), so it can
neither append, fence, read nor truncate."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
import zmq.auth

from millrace.store.durablelog.curve import (
    CurveClientKeys,
    CurveKeyError,
    CurveServerKeys,
    create_cluster_keys,
)
from millrace.store.durablelog.replica_rpc import ReplicaRpc, connect_dealer
from millrace.store.durablelog.zmq_frames import send_frames
from millrace.store.logd import wire
from tests.durablelog.logd_process import Replicas

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return create_cluster_keys(tmp_path_factory.mktemp("curve") / "keys")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> Iterator[Replicas]:
    replicas = Replicas(tmp_path_factory.mktemp("curve-logds"), 3, "--curve-secret-key", str(keys["logd_secret"]),
                        "--curve-authorized-keys", str(keys["node_public"].parent))
    try:
        yield replicas.start()
    finally:
        replicas.close()


def _node_keys(keys: dict[str, Path]) -> CurveClientKeys:
    return CurveClientKeys.load(keys["node_secret"], keys["logd_public"])


def test_a_node_with_the_cluster_keys_appends_and_reads(secured: Replicas, keys: dict[str, Path]) -> None:
    log = secured.opened("curve-log", curve=_node_keys(keys))
    try:
        for i in range(20):
            log.append(f"entry {i}".encode()).result(30)
    finally:
        log.close()
    again = secured.opened("curve-log", curve=_node_keys(keys))  # recovery reads it back from the replicas
    try:
        assert [bytes(e.payload) for e in again.read_all()] == [f"entry {i}".encode() for i in range(20)]
    finally:
        again.close()


def _last_confirmed(address: str, curve: CurveClientKeys | None) -> bool:
    """Whether the replica answers a harmless read-only request on this link within a second."""
    rpc = ReplicaRpc(zmq.Context.instance(), curve)
    try:
        return rpc.call_one(address, {"op": "last_confirmed", "log": "curve-log"}, [], timeout=1.0) is not None
    finally:
        rpc.close()


def test_who_lacks_the_keys_gets_no_answer(secured: Replicas, keys: dict[str, Path], tmp_path: Path) -> None:
    address = secured.addresses[0]
    assert _last_confirmed(address, _node_keys(keys))  # the right keys are answered
    assert not _last_confirmed(address, None)  # plain TCP
    stranger_public, stranger_secret = zmq.auth.create_certificates(str(tmp_path), "stranger")
    assert not _last_confirmed(address, CurveClientKeys.load(stranger_secret, keys["logd_public"]))  # not let in
    # The right client keys, but expecting another replica key: the client refuses the replica.
    assert not _last_confirmed(address, CurveClientKeys.load(keys["node_secret"], stranger_public))
    rpc = ReplicaRpc(zmq.Context.instance(), None)  # nor can a stranger append or fence
    try:
        fence = {"op": "fence", "log": "curve-log", "epoch": 10**9, "first": 1, "entry_epoch": 10**9}
        assert rpc.call_one(address, fence, [], timeout=1.0) is None
    finally:
        rpc.close()
    log = secured.opened("curve-log", curve=_node_keys(keys))  # the stranger's fence never landed
    try:
        assert log.epoch < 10**9
    finally:
        log.close()


def test_a_send_to_a_replica_that_refused_the_handshake_never_waits(secured: Replicas) -> None:
    """After a refused handshake ZeroMQ drops the connection's pipe until it reconnects; a message sent
    meanwhile must not wait for that (a blocking send hung an RPC here): it is taken or refused at once,
    and an RPC to that replica then returns at its timeout."""
    address = secured.addresses[0]
    header = wire.encode_header({"op": "last_confirmed", "log": "curve-log", "id": 1})
    for delay in (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3, 0.6, 1.0):
        dealer = connect_dealer(zmq.Context.instance(), address)  # no keys: the replica refuses its handshake
        time.sleep(delay)
        sender = threading.Thread(target=send_frames, args=(dealer, [header]), daemon=True)
        sender.start()
        sender.join(10)
        assert not sender.is_alive(), f"a send {delay} s after a refused handshake waits"
        dealer.close(0)
    rpc = ReplicaRpc(zmq.Context.instance(), None)
    try:
        started = time.monotonic()
        assert rpc.call_one(address, {"op": "last_confirmed", "log": "curve-log"}, [], timeout=0.5) is None
        assert time.monotonic() - started < 5
    finally:
        rpc.close()


def test_key_files_are_checked(keys: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(CurveKeyError, match="no secret key"):
        CurveClientKeys.load(keys["node_public"], keys["logd_public"])
    with pytest.raises(CurveKeyError, match="no public key"):
        CurveServerKeys.load(keys["logd_secret"], tmp_path)
    with pytest.raises(FileExistsError):
        create_cluster_keys(keys["node_public"].parent.parent)
    assert "secret" not in repr(_node_keys(keys)).replace("secret=", "")
    assert (keys["node_secret"].stat().st_mode & 0o077) == 0


def test_a_node_takes_its_keys_from_its_flags(keys: dict[str, Path]) -> None:
    from millrace.gateway.shared.assembly import replication_config
    from millrace.gateway.shared.options import ServerOptions

    options = ServerOptions(log_replicas="a:1,b:2,c:3", log_curve_secret_key=str(keys["node_secret"]),
                            log_curve_server_key=str(keys["logd_public"]))
    config = replication_config(options)
    assert config is not None and config.curve == _node_keys(keys)
    with pytest.raises(ValueError, match="go together"):
        replication_config(ServerOptions(log_replicas="a:1,b:2,c:3", log_curve_secret_key=str(keys["node_secret"])))
