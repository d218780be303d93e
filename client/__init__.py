"""Millrace's native Python client."""
