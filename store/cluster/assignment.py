"""Which live node owns which segment container: a pure policy, no ZooKeeper in sight.

Invariants of ``balance`` (checked by tests/cluster/test_assignment_policy.py):
- with at least one live node, every container has a live owner, and owners' counts differ by at most
  one (each node gets floor(C/N) or ceil(C/N));
- a container stays where it is while its owner is live (same node *and* incarnation) and within its
  share: only containers of dead owners and a node's excess over its share move, so the number moved is
  the least any balanced result needs;
- a container's epoch rises by exactly one each time it gets a new owner, and never otherwise, so the
  pair (container, epoch) names one ownership term and a newer term always has the larger epoch;
- with no live node, containers are left unowned (node None) and keep their epoch;
- the result depends only on the inputs (ties broken by node id, then container id): ``balance`` of
  its own output changes nothing.

``plan_handovers`` turns a balanced target into what may be written now: a container leaves a *live*
owner only after that owner released its term (stopped the container cleanly), so two live nodes
never run one container at once; containers of dead owners move at once (fencing covers a zombie).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Assignment:
    """One container's owner: a node id and the incarnation of that node's registration (the creation
    zxid of its ephemeral znode, so a restarted node with the same id is a different owner), and the
    ownership epoch. ``node`` None: nobody owns it."""

    node: str | None = None
    incarnation: int = 0
    epoch: int = 0

    def owned_by(self, live: Mapping[str, int]) -> bool:
        """Whether the owner is one of ``live`` (node id -> incarnation)."""
        return self.node is not None and live.get(self.node) == self.incarnation


def shares(container_count: int, live: Mapping[str, int], held: Mapping[str, int]) -> dict[str, int]:
    """How many containers each live node should own: floor or ceil of C/N, the ceilings going to the
    nodes that already hold the most (fewest moves), ties to the smaller node id."""
    nodes = sorted(live)
    base, extra = divmod(container_count, len(nodes))
    by_load = sorted(nodes, key=lambda n: (-held.get(n, 0), n))
    return {node: base + (1 if i < extra else 0) for i, node in enumerate(by_load)}


def balance(current: Mapping[int, Assignment], container_count: int,
            live: Mapping[str, int]) -> dict[int, Assignment]:
    """The assignment of containers ``0 .. container_count - 1`` over ``live`` nodes (id -> incarnation),
    starting from ``current`` (missing containers count as unowned with epoch 0)."""
    assignments = {cid: current.get(cid, Assignment()) for cid in range(container_count)}
    if not live:
        return {cid: Assignment(None, 0, a.epoch) if a.node is not None else a for cid, a in assignments.items()}
    kept: dict[str, list[int]] = {node: [] for node in live}
    for cid in sorted(assignments):
        a = assignments[cid]
        if a.owned_by(live):
            assert a.node is not None
            kept[a.node].append(cid)
    quota = shares(container_count, live, {node: len(cids) for node, cids in kept.items()})
    result: dict[int, Assignment] = {}
    orphans: list[int] = []
    for node, cids in kept.items():
        for cid in cids[:quota[node]]:  # the lowest ids stay, the excess moves
            result[cid] = assignments[cid]
        orphans.extend(cids[quota[node]:])
    orphans.extend(cid for cid, a in assignments.items() if not a.owned_by(live))
    load = {node: min(len(cids), quota[node]) for node, cids in kept.items()}
    for cid in sorted(orphans):
        node = min(live, key=lambda n: (load[n] - quota[n], n))  # the most room left
        load[node] += 1
        result[cid] = Assignment(node, live[node], assignments[cid].epoch + 1)
    return dict(sorted(result.items()))


def plan_handovers(current: Mapping[int, Assignment], target: Mapping[int, Assignment], live: Mapping[str, int],
                   released: Mapping[int, int]) -> tuple[dict[int, Assignment], set[int]]:
    """Split ``target`` (from ``balance``) into the assignments to write now and the containers whose
    live owner must first release them. ``released`` maps a container to the epoch its owner released.

    - a move away from a live owner waits until that owner released the current epoch;
    - a move away from a dead owner (or an unowned container) is written at once;
    - a container released but meant to stay (its would-be new owner died meanwhile) gets a new term on
      the same owner, since the owner stopped it for good in the released one.
    """
    write: dict[int, Assignment] = {}
    release: set[int] = set()
    for cid, wanted in target.items():
        now = current.get(cid, Assignment())
        was_released = now.node is not None and released.get(cid) == now.epoch
        if wanted == now:
            if was_released:
                write[cid] = replace(now, epoch=now.epoch + 1)
        elif now.owned_by(live) and not was_released:
            release.add(cid)
        else:
            write[cid] = wanted
    return write, release
