"""The committed modules of Pravega's controller interface are what ``proto/controller.proto`` gives
(``python -m millrace.gateway.pravega.generate`` rewrites them)."""

from __future__ import annotations

from millrace.gateway.pravega.generate import COMMAND, stale


def test_generated_modules_are_current() -> None:
    assert stale() == [], f"run {COMMAND}"
