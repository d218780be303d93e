"""Fixtures shared by every test package."""

from tests.s3server import s3_server  # noqa: F401  (re-exported: pytest finds fixtures by name)
