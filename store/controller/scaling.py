"""Pure helpers of stream scaling: validating a scale against an epoch and deriving the next epoch.

Key-range boundaries are compared with ``==`` on purpose: neighbouring segments must share the very
same float, otherwise some key would fall into a gap or into two segments. Callers build ranges
from the boundaries they were given (segment starts/ends, or split points computed once), never
by re-deriving the same value through different arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from millrace.store.controller.errors import InvalidScaleError
from millrace.store.controller.names import segment_id
from millrace.store.controller.records import EpochRecord, PendingScale

Range = tuple[float, float]


def normalize_ranges(new_ranges: Sequence[Sequence[float]]) -> list[Range]:
    """The ranges as float pairs sorted by start; InvalidScaleError on an empty or inverted range."""
    ranges = []
    for r in new_ranges:
        lo, hi = r
        lo, hi = float(lo), float(hi)
        if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo < hi <= 1.0):
            raise InvalidScaleError(f"key range [{lo}, {hi}) is empty or outside [0, 1)")
        ranges.append((lo, hi))
    if not ranges:
        raise InvalidScaleError("a scale needs at least one new key range")
    return sorted(ranges)


def validate_scale(current: EpochRecord, seal: Sequence[int], ranges: list[Range]) -> list[int]:
    """Check that ``seal`` names adjacent open segments of ``current`` and that ``ranges`` (sorted)
    cover their union exactly once. Returns the sealed ids ordered by key range."""
    if not seal:
        raise InvalidScaleError("a scale must seal at least one segment")
    if len(set(seal)) != len(seal):
        raise InvalidScaleError(f"segments to seal named twice: {list(seal)}")
    by_id = {sid: (lo, hi) for sid, lo, hi in current.segments}
    missing = [sid for sid in seal if sid not in by_id]
    if missing:
        raise InvalidScaleError(f"segments {missing} are not open in epoch {current.epoch}")
    ordered = sorted(seal, key=lambda sid: by_id[sid][0])
    for a, b in zip(ordered, ordered[1:], strict=False):
        if by_id[a][1] != by_id[b][0]:
            raise InvalidScaleError(f"segments {a} and {b} are not adjacent")
    start, end = by_id[ordered[0]][0], by_id[ordered[-1]][1]
    position = start
    for lo, hi in ranges:
        if lo != position:
            kind = "overlap" if lo < position else "gap"
            raise InvalidScaleError(f"new key ranges {kind} at {position} (next range starts at {lo})")
        position = hi
    if position != end or ranges[0][0] != start:
        raise InvalidScaleError(f"new key ranges cover [{ranges[0][0]}, {position}), sealed union is [{start}, {end})")
    if len(ranges) == 1 and len(ordered) == 1:
        raise InvalidScaleError("replacing one segment by the same range changes nothing")
    return ordered


def plan_scale(
    current: EpochRecord, seal: Sequence[int], ranges: list[Range], next_number: int, reason: str, now_ms: int
) -> PendingScale:
    """The PendingScale turning ``current`` into the next epoch (validated)."""
    ordered = validate_scale(current, seal, ranges)
    epoch = current.epoch + 1
    successors = tuple((segment_id(next_number + i, epoch), lo, hi) for i, (lo, hi) in enumerate(ranges))
    return PendingScale(epoch, now_ms, tuple(ordered), successors, reason)


def next_epoch(current: EpochRecord, pending: PendingScale) -> EpochRecord:
    """The epoch record ``pending`` creates; deterministic, so every retry writes the same one."""
    sealed = set(pending.sealed)
    kept = [s for s in current.segments if s[0] not in sealed]
    segments = tuple(sorted(kept + list(pending.successors), key=lambda s: s[1]))
    old = {sid: (lo, hi) for sid, lo, hi in current.segments if sid in sealed}
    edges = tuple(
        sorted(
            (p, s)
            for p, (plo, phi) in old.items()
            for s, slo, shi in pending.successors
            if plo < shi and slo < phi
        )
    )
    return EpochRecord(pending.epoch, pending.created_ms, segments, pending.reason, edges)


def split_points_ranges(lo: float, hi: float, at: Sequence[float]) -> list[Range]:
    """[lo, hi) cut at the points ``at`` (each strictly inside, increasing after sorting)."""
    points = sorted(float(x) for x in at)
    if not points:
        raise InvalidScaleError("a split needs at least one split point")
    bounds = [lo, *points, hi]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if not a < b:
            raise InvalidScaleError(f"split points {points} must lie strictly inside [{lo}, {hi}), distinct")
    return list(zip(bounds, bounds[1:], strict=False))


def equal_split_points(lo: float, hi: float, pieces: int) -> list[float]:
    """``pieces - 1`` interior points cutting [lo, hi) into equal parts (dropping any that rounding
    pushes onto an end, which can only happen for absurdly narrow ranges)."""
    points = {lo + (hi - lo) * i / pieces for i in range(1, pieces)}
    return sorted(p for p in points if lo < p < hi)
