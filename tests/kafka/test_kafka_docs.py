"""docs/kafka.md's table of APIs is the server's: every API the registry serves is listed once, with its
key and the versions ApiVersions advertises, and nothing else is."""

from __future__ import annotations

import re
from pathlib import Path

from millrace.gateway.kafka import registry

PAGE = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"
_ROW = re.compile(r"^\| (\w+) \| (\d+) \| (\d+)-(\d+) \|")


def documented() -> dict[int, tuple[str, int, int]]:
    rows: dict[int, tuple[str, int, int]] = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            name, key, low, high = match.groups()
            assert int(key) not in rows, f"API key {key} is listed twice"
            rows[int(key)] = (name, int(low), int(high))
    return rows


def test_api_table_is_what_api_versions_advertises() -> None:
    served = {key: (h.name, h.min_version, h.max_version) for key, h in registry.load_handlers().items()}
    assert len(served) > 40, "the registry loaded its handlers"
    assert documented() == served
