"""The container -> node policy (store/cluster/assignment.py): balance, stickiness, epochs, no ZooKeeper."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from millrace.store.cluster.assignment import Assignment, balance, plan_handovers

NODES = [f"n{i}" for i in range(6)]


def counts(result: dict[int, Assignment]) -> dict[str | None, int]:
    load: dict[str | None, int] = {}
    for a in result.values():
        load[a.node] = load.get(a.node, 0) + 1
    return load


def test_three_nodes_share_eight_containers_three_three_two() -> None:
    result = balance({}, 8, {"a": 1, "b": 2, "c": 3})
    assert sorted(counts(result).values()) == [2, 3, 3]
    assert all(a.epoch == 1 for a in result.values())
    assert all(a.incarnation == {"a": 1, "b": 2, "c": 3}[a.node or ""] for a in result.values())


def test_a_dead_nodes_containers_move_and_only_they_do() -> None:
    live = {"a": 1, "b": 2, "c": 3}
    before = balance({}, 9, live)
    after = balance(before, 9, {"a": 1, "b": 2})
    moved = {cid for cid in before if after[cid] != before[cid]}
    assert moved == {cid for cid, a in before.items() if a.node == "c"}
    assert all(after[cid].epoch == before[cid].epoch + 1 and after[cid].node in ("a", "b") for cid in moved)
    assert sorted(counts(after).values()) == [4, 5]


def test_a_restarted_node_is_a_new_owner() -> None:
    before = balance({}, 4, {"a": 1, "b": 2})
    after = balance(before, 4, {"a": 1, "b": 7})  # b came back: same id, new registration
    for cid, a in before.items():
        if a.node == "b":
            assert after[cid].node is not None and after[cid].epoch == a.epoch + 1
        else:
            assert after[cid] == a


def test_a_joining_node_takes_only_the_excess() -> None:
    before = balance({}, 6, {"a": 1})
    after = balance(before, 6, {"a": 1, "b": 2, "c": 3})
    assert counts(after) == {"a": 2, "b": 2, "c": 2}
    assert [cid for cid in before if after[cid] == before[cid]] == [0, 1]  # a keeps its lowest ids


def test_no_live_node_leaves_containers_unowned_with_their_epochs() -> None:
    before = balance({}, 3, {"a": 1})
    after = balance(before, 3, {})
    assert all(a.node is None and a.epoch == before[cid].epoch for cid, a in after.items())
    again = balance(after, 3, {"b": 5})
    assert all(a.node == "b" and a.epoch == before[cid].epoch + 1 for cid, a in again.items())


assignments = st.builds(Assignment, st.one_of(st.none(), st.sampled_from(NODES)), st.integers(0, 2),
                        st.integers(0, 5))


@given(current=st.dictionaries(st.integers(0, 15), assignments),
       container_count=st.integers(1, 16),
       live=st.dictionaries(st.sampled_from(NODES), st.integers(0, 2)))
def test_balance_invariants(current: dict[int, Assignment], container_count: int, live: dict[str, int]) -> None:
    result = balance(current, container_count, live)
    assert sorted(result) == list(range(container_count))
    before = {cid: current.get(cid, Assignment()) for cid in range(container_count)}
    if not live:
        assert all(a.node is None and a.epoch == before[cid].epoch for cid, a in result.items())
        return
    load = counts(result)
    assert None not in load and all(a.owned_by(live) for a in result.values())
    per_node = [load.get(node, 0) for node in live]
    assert max(per_node) - min(per_node) <= 1
    for cid, a in result.items():
        # A new owner means exactly one more epoch; the same owner means the same assignment.
        if a == before[cid]:
            continue
        assert a.epoch == before[cid].epoch + 1
        assert (a.node, a.incarnation) != (before[cid].node, before[cid].incarnation)
    # Fewest moves: a balanced result keeps at most floor(C/N) per node, plus one on C mod N of them;
    # the most it can keep is with those extra places on the nodes holding the most.
    held: dict[str, int] = {}
    for a in before.values():
        if a.owned_by(live):
            assert a.node is not None
            held[a.node] = held.get(a.node, 0) + 1
    floor_share, extra = divmod(container_count, len(live))
    by_held = sorted((held.get(node, 0) for node in live), reverse=True)
    most_kept = sum(min(h, floor_share + (1 if i < extra else 0)) for i, h in enumerate(by_held))
    moved = sum(1 for cid in result if result[cid] != before[cid])
    assert moved == container_count - most_kept
    assert balance(result, container_count, live) == result


def test_a_live_owner_releases_before_its_container_moves() -> None:
    live = {"a": 1, "b": 2}
    current = balance({}, 4, {"a": 1})  # a holds all four
    target = balance(current, 4, live)
    moving = {cid for cid in current if target[cid] != current[cid]}
    assert moving == {2, 3}
    write, release = plan_handovers(current, target, live, {})
    assert write == {} and release == moving  # ask a first
    write, release = plan_handovers(current, target, live, {2: current[2].epoch})
    assert write == {2: target[2]} and release == {3}  # a released 2 only
    stale = plan_handovers(current, target, live, {3: current[3].epoch - 1})  # an older term's release
    assert stale == ({}, moving)


def test_dead_owners_containers_move_without_a_handover() -> None:
    current = balance({}, 4, {"a": 1, "b": 2})
    target = balance(current, 4, {"a": 1})
    write, release = plan_handovers(current, target, {"a": 1}, {})
    assert release == set() and write == {cid: a for cid, a in target.items() if current[cid].node == "b"}


def test_a_released_container_that_stays_gets_a_new_term() -> None:
    """b joined, a released container 3 for b, then b died: 3 stays with a, restarted in a new term."""
    current = balance({}, 4, {"a": 1})
    target = balance(current, 4, {"a": 1})  # b is gone again
    write, release = plan_handovers(current, target, {"a": 1}, {3: current[3].epoch})
    assert release == set() and write == {3: Assignment("a", 1, current[3].epoch + 1)}
