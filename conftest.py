"""The repository-wide pytest plugins: test tiers (``unit``/``process``, see tests/tiers.py) for tests/ and
compat_tests/ alike, the grouping and order of parallel runs (tests/parallel.py), and pytester for the tiers' own tests (tests/test_tiers.py)."""

pytest_plugins = ("tests.tiers", "tests.parallel", "pytester")
