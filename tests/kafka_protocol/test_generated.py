"""The checked-in message modules are exactly what the generator writes from the specs, and they are
typed classes (not objects built at import)."""

from __future__ import annotations

import inspect
import typing

from millrace.gateway.kafka_protocol import codec, generate
from millrace.gateway.kafka_protocol.messages.produce import PRODUCE_REQUEST_CODECS, ProduceRequest
from millrace.gateway.kafka_protocol.schema import load_specs, snake_case


def test_checked_in_modules_are_current() -> None:
    expected = generate.render(load_specs(generate.SPEC_DIR))
    on_disk = {p.name: p.read_text() for p in generate.MESSAGES_DIR.glob("*.py")}
    assert sorted(on_disk) == sorted(expected), f"run {generate.COMMAND}"
    stale = sorted(name for name, text in expected.items() if on_disk[name] != text)
    assert not stale, f"{stale} differ from the specs: run {generate.COMMAND}"


def test_check_mode_reports_current() -> None:
    assert generate.main(["--check"]) == 0


def test_generated_apis_are_those_the_gateway_serves() -> None:
    from millrace.gateway.kafka.registry import load_handlers

    served = load_handlers()
    assert {h.name for h in served.values()} == generate.APIS
    assert set(codec.API_KEYS) == set(served)


def test_every_spec_has_its_class_and_versions() -> None:
    specs = generate.select(load_specs(generate.SPEC_DIR))
    for name, spec in specs.items():
        cls = codec.message_class(name)
        assert cls.__name__ == name
        for nested in spec.structs:
            assert getattr(cls, nested).__qualname__ == f"{name}.{nested}"
        table = getattr(inspect.getmodule(cls), snake_case(name).upper() + "_CODECS")
        assert sorted(table) == list(range(spec.valid_versions.lo, spec.valid_versions.hi + 1))


def test_attributes_carry_types() -> None:
    hints = typing.get_type_hints(ProduceRequest.PartitionProduceData)
    assert hints["index"] is int
    assert hints["records"] == bytes | bytearray | memoryview | None
    assert typing.get_type_hints(ProduceRequest)["topic_data"] == list[ProduceRequest.TopicProduceData]
    assert ProduceRequest.API_KEY == 0
    assert set(PRODUCE_REQUEST_CODECS) == set(range(codec.API_KEYS[0].min_version, codec.API_KEYS[0].max_version + 1))
