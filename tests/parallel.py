"""How the suite runs on several pytest-xdist workers (``-n N``): which tests stay together, and in what order.

The suite mostly waits (servers starting, clients backing off, processes killed and recovered): run serially
it keeps a quarter of this 2-core machine busy. Workers overlap those waits. Two rules keep that safe and
short:

- A test file runs whole on one worker (as ``--dist loadfile``), because most files share one server, one
  ZooKeeper or one Spark session between their tests through module- or session-scoped fixtures; split
  over workers, each worker would start its own.
- Every Spark test runs on one worker ("spark" below): one JVM of several hundred MB and the machine's
  heaviest user of CPU. Spread over workers, each starts its own session and the Spark tests ran 2-4x
  slower beside each other.

Work is handed out in collection order, so on workers the heaviest groups are collected first (Spark, then
the cluster and the external clients): they start at once and the short files fill in around them.
Serial runs keep the plain collection order."""

from __future__ import annotations

import os
from typing import Any

import pytest

SPARK_GROUP = "spark"
# Nodeid prefixes whose tests run in the Spark group.
_SPARK_PREFIXES = ("tests/spark/", "compat_tests/test_spark_wire.py")
# Groups handed out first, heaviest first: the Spark group, then files of process-heavy tests.
_FIRST = (SPARK_GROUP, "tests/cluster/", "compat_tests/test_transactions", "tests/client/", "compat_tests/")


def group_of(nodeid: str) -> str:
    """The unit of work a test belongs to: the Spark group, or its file."""
    path = nodeid.split("::", 1)[0]
    return SPARK_GROUP if path.startswith(_SPARK_PREFIXES) else path


def _rank(nodeid: str) -> int:
    group = group_of(nodeid)
    return next((i for i, prefix in enumerate(_FIRST) if group.startswith(prefix)), len(_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: _rank(item.nodeid))  # stable: files keep their order within a rank


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown to pytest when xdist is absent
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") == "each":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileAndSparkScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Hands out whole files, and the Spark tests as one unit, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # keep the heaviest-first order of the collection
    return FileAndSparkScheduling(config, log)
