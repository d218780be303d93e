"""The repository-wide pytest plugins: test tiers (``unit``/``process``, see tests/tiers.py) for tests/ and
compat_tests/ alike, and pytester for the tiers' own tests (tests/test_tiers.py)."""

pytest_plugins = ("tests.tiers", "pytester")
