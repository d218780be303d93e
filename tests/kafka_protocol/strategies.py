"""Hypothesis strategies derived from the Kafka message specs (the same specs the codec uses)."""

from __future__ import annotations

import random
import uuid
from typing import Any

from hypothesis import strategies as st

from millrace.gateway.kafka_protocol import codec
from millrace.gateway.kafka_protocol.schema import FieldSpec, MessageSpec, StructSpec, load_specs

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _primitive(t: str) -> st.SearchStrategy[Any]:
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.integers(lo, hi)
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": st.text(max_size=8),
        "bytes": st.binary(max_size=8),
        "records": st.binary(max_size=24),
        "uuid": st.uuids(),
    }[t]


def present(f: FieldSpec, version: int, flexible: bool) -> bool:
    """Whether the field is on the wire at this version (tagged fields only in flexible versions)."""
    if version not in f.versions:
        return False
    return f.tag is None or (flexible and version in f.tagged_versions)


def _field(spec: MessageSpec, f: FieldSpec, version: int, flexible: bool, depth: int) -> st.SearchStrategy[Any]:
    if f.struct is not None:
        elem = struct_strategy(spec, f.struct, version, depth + 1)
    else:
        elem = _primitive(f.elem_type)
    base = st.lists(elem, max_size=2 if depth < 2 else 1) if f.is_array else elem
    if version in f.nullable_versions:
        return st.none() | base
    return base


def struct_strategy(spec: MessageSpec, s: StructSpec, version: int, depth: int = 0) -> st.SearchStrategy[Any]:
    """Objects of struct ``s`` valid at ``version``; absent fields keep their defaults."""
    flexible = version in spec.flexible_versions
    cls = codec.message_class(spec.name)
    if s is not spec.struct:
        cls = getattr(cls, s.name)
    kwargs = {f.attr: _field(spec, f, version, flexible, depth) for f in s.fields if present(f, version, flexible)}
    if flexible:
        # unknown tags must survive a round trip; the encoder sorts tags, so generate them sorted
        kwargs["_unknown_tagged_fields"] = st.none() | st.lists(
            st.tuples(st.integers(200, 210), st.binary(max_size=4)), max_size=2, unique_by=lambda t: t[0]
        ).map(sorted)
    return st.builds(cls, **kwargs)


def message_strategy(name: str, version: int) -> st.SearchStrategy[Any]:
    spec = load_specs()[name]
    return struct_strategy(spec, spec.struct, version)


def _random_primitive(t: str, rnd: random.Random) -> Any:
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return rnd.choice((0, -1 if lo < 0 else 1, lo, hi, rnd.randint(lo, hi)))
    if t == "bool":
        return rnd.random() < 0.5
    if t == "float64":
        return rnd.uniform(-1e9, 1e9)
    if t == "string":
        return "".join(rnd.choice("abcxyzé€-_") for _ in range(rnd.randint(0, 6)))
    if t in ("bytes", "records"):
        return rnd.randbytes(rnd.randint(0, 12))
    if t == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    raise AssertionError(t)


def random_struct(spec: MessageSpec, s: StructSpec, version: int, rnd: random.Random, depth: int = 0) -> Any:
    """A plain-random (non-hypothesis) object, for fuzz corpora and benchmarks."""
    flexible = version in spec.flexible_versions
    cls = codec.message_class(spec.name)
    if s is not spec.struct:
        cls = getattr(cls, s.name)
    kwargs: dict[str, Any] = {}
    for f in s.fields:
        if not present(f, version, flexible):
            continue
        if version in f.nullable_versions and rnd.random() < 0.15:
            kwargs[f.attr] = None
            continue

        def one(f: FieldSpec = f) -> Any:
            if f.struct is not None:
                return random_struct(spec, f.struct, version, rnd, depth + 1)
            return _random_primitive(f.elem_type, rnd)

        kwargs[f.attr] = [one() for _ in range(rnd.randint(0, 3 if depth < 2 else 1))] if f.is_array else one()
    return cls(**kwargs)


def random_message(name: str, version: int, rnd: random.Random) -> Any:
    spec = load_specs()[name]
    return random_struct(spec, spec.struct, version, rnd)
