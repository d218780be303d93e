"""The places import one way: gateway -> streams -> store -> protocol, client -> protocol; and the
protocol adapters in the gateway (gateway/kafka, gateway/native, gateway/pravega) stand side by side over
the stream layer, none importing another.

Read from the source (``ast``), not by importing, so a lazy or conditional import counts too. Each rule
names the place whose modules are checked and the packages they must never import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (place checked, packages it must not import, why)
RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("protocol", ("millrace.gateway", "millrace.streams", "millrace.store", "millrace.client"),
     "shared codecs depend on nothing"),
    ("store", ("millrace.gateway", "millrace.streams", "millrace.client"), "the store serves every protocol"),
    ("streams", ("millrace.gateway", "millrace.client"), "the stream layer serves both protocol adapters"),
    ("client", ("millrace.gateway", "millrace.streams", "millrace.store"), "the client ships without the server"),
    ("spark", ("millrace.gateway", "millrace.streams", "millrace.store", "millrace.client", "millrace.protocol"),
     "the Spark connector uses the native client's public API (millrace) only"),
    ("store", ("subprocess",), "the store runs inside a server; tools that run processes live with the CLI"),
    ("gateway/kafka_protocol", ("millrace.gateway.kafka", "millrace.gateway.native"), "the codec does no I/O"),
    ("gateway/pravega_protocol", ("millrace.gateway.kafka", "millrace.gateway.native", "millrace.gateway.kafka_protocol"),
     "the Pravega codec does no I/O and stands beside the Kafka one"),
    ("gateway/kafka", ("millrace.gateway.native", "millrace.gateway.pravega"),
     "the Kafka adapter stands beside the native and Pravega ones"),
    ("gateway/native", ("millrace.gateway.kafka", "millrace.gateway.pravega"),
     "the native adapter stands beside the Kafka and Pravega ones"),
    ("gateway/pravega", ("millrace.gateway.kafka", "millrace.gateway.native"),
     "the Pravega adapter stands beside the Kafka and native ones, over the controller and stream layer"),
    ("gateway/native", ("millrace.gateway.kafka_protocol",), "the native wire carries no Kafka codes"),
]


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name a file imports (``from x import y`` counts as ``x`` and ``x.y``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def violations(place: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((ROOT / place).rglob("*.py")):
        for name in sorted(imported_modules(path)):
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


@pytest.mark.parametrize(("place", "forbidden", "why"), RULES, ids=[rule[0] for rule in RULES])
def test_place_does_not_import_against_the_arrows(place: str, forbidden: tuple[str, ...], why: str) -> None:
    assert (ROOT / place).is_dir()
    assert violations(place, forbidden) == [], why


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    """The rule can fail: a lazy import inside a function is found."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from millrace.gateway.kafka import broker\n    import millrace.client.writer\n")
    assert {"millrace.gateway.kafka", "millrace.gateway.kafka.broker", "millrace.client.writer"} <= (
        imported_modules(module)
    )
