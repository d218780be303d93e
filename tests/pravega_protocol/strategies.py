"""Hypothesis strategies for every Pravega wire command, derived from the same field declarations the
codec encodes with; the hand-written layouts (table keys and values, iterator arguments) have their
own."""

from __future__ import annotations

import typing
from typing import Any

from hypothesis import strategies as st

from millrace.gateway.pravega_protocol import commands, primitives, table_commands
from millrace.gateway.pravega_protocol.base import StructCodec, WireStruct

_INT64 = st.integers(-(2**63), 2**63 - 1)
_BYTES = st.binary(max_size=40)

_FIXED: dict[object, st.SearchStrategy[Any]] = {
    primitives.BYTE: st.integers(-(2**7), 2**7 - 1),
    primitives.BOOL: st.booleans(),
    primitives.INT: st.integers(-(2**31), 2**31 - 1),
    primitives.LONG: _INT64,
    # Any text but lone surrogates, which a Python str holds only as separate code points.
    primitives.UTF: st.text(max_size=30),
    primitives.UUID: st.uuids(),
    primitives.SIZED_BYTES: _BYTES,
    primitives.REST_BYTES: _BYTES,
}

_HAND_WRITTEN: dict[type[WireStruct], st.SearchStrategy[Any]] = {
    # An empty key goes on the wire without its version (as in Pravega), so only NO_VERSION survives.
    table_commands.TableKey: st.one_of(
        st.builds(table_commands.TableKey, data=st.binary(min_size=1, max_size=20), key_version=_INT64),
        st.just(table_commands.TableKey(data=b"")),
    ),
    table_commands.TableValue: st.builds(table_commands.TableValue, data=st.binary(max_size=20)),
    table_commands.TableIteratorArgs: st.builds(
        table_commands.TableIteratorArgs, continuation_token=_BYTES, from_key=_BYTES, to_key=_BYTES
    ),
}


def _codec_strategy(codec: object, python_type: Any) -> st.SearchStrategy[Any]:
    if codec in _FIXED:
        return _FIXED[codec]
    if isinstance(codec, primitives.Trailing):
        return _codec_strategy(codec.inner, python_type)
    if isinstance(codec, primitives.ListOf):
        (element_type, _) = typing.get_args(python_type)
        return st.lists(_codec_strategy(codec.element, element_type), max_size=4).map(tuple)
    if isinstance(codec, StructCodec):
        return struct_strategy(codec.struct_type)
    if isinstance(codec, primitives.CodedEnum):
        return st.sampled_from(list(python_type))
    if type(codec).__name__ == "_PaddingBytes":
        return st.integers(0, 40)
    if type(codec).__name__ == "_EmbeddedEvent":
        return st.builds(commands.Event, data=_BYTES)
    raise AssertionError(f"no strategy for codec {codec!r}: add one so the round trip covers it")


def struct_strategy(cls: type[WireStruct]) -> st.SearchStrategy[Any]:
    """Any value of a command or nested structure, every field drawn independently."""
    if cls in _HAND_WRITTEN:
        return _HAND_WRITTEN[cls]
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {
        name: _codec_strategy(codec, typing.get_args(hints[name])[0]) for name, codec in cls.wire_fields()
    }
    return st.builds(cls, **fields)
