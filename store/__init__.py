"""Millrace segment store: segments on containers, durable log (tier 1), long-term storage (tier 2)."""
