"""Shell commands as a README writes them: lines joined across their trailing backslashes."""

from __future__ import annotations

from collections.abc import Iterable


def joined_commands(lines: Iterable[str]) -> list[str]:
    """One command per logical line: a line ending in a backslash continues on the next."""
    out, pending = [], ""
    for line in lines:
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
        else:
            out.append(pending)
            pending = ""
    assert not pending, f"a command ends in a continuation: {pending}"
    return out
