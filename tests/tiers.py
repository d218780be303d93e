"""Test tiers: every collected test is either ``unit`` (in-process) or ``process`` (starts real processes:
Millrace servers, logd, ZooKeeper, the S3 server, Java, kcat, Spark). Nobody marks the ~1,000 tests by hand:
``classify`` reads each test's code and the code of the fixtures it uses, and a test is ``process`` when
that code reaches something that starts a process (``subprocess``, ``multiprocessing``, PySpark, or a
helper of this repository's test code that uses one of those). Everything else is ``unit``, and a
``unit`` test that starts a process anyway fails, naming itself, instead of silently running in the
wrong tier (``guard_unit_test``). An explicit ``@pytest.mark.unit`` or ``@pytest.mark.process`` overrides
the reading; both at once is a collection error."""

from __future__ import annotations

import inspect
import multiprocessing.process
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Modules whose use means "this starts a process". The repository's own test helpers are not listed:
# they count when they use one of these (see ``_module_starts_processes``).
PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "pyspark", "testcontainers"})
TIERS = ("unit", "process")

# The packages of the test code (the ``testpaths`` of the configuration: tests, compat_tests): modules there
# are read; everything else (the product, libraries) is taken as it is, and the guard catches what it does.
_test_packages: set[str] = set()

_module_verdicts: dict[str, bool] = {}
_code_verdicts: dict[types.CodeType, bool] = {}


def _root(module_name: str) -> str:
    return module_name.partition(".")[0]


def _is_test_code(module_name: str | None) -> bool:
    return module_name is not None and _root(module_name) in _test_packages


def _module_starts_processes(module: types.ModuleType) -> bool:
    """Whether a module is a process starter, or one of the repository's test modules that imports one.

    Module granularity is right for helpers (``tests/server_process.py``, ``tests/s3server.py``...): what
    they export exists to run processes."""
    name = module.__name__
    if _root(name) in PROCESS_MODULES:
        return True
    if not _is_test_code(name) or module.__file__ is None or module.__file__.endswith("__init__.py"):
        return False
    if name not in _module_verdicts:
        _module_verdicts[name] = False  # an import cycle answers "not (yet) known to start processes"
        _module_verdicts[name] = any(_starts_processes(value) for value in list(vars(module).values()))
    return _module_verdicts[name]


def _code_starts_processes(code: types.CodeType, namespace: dict[str, Any]) -> bool:
    """Whether a function's code names something that starts processes: a global it calls, or a module it
    imports inside its body (``from pyspark.sql import SparkSession``). Nested functions count too."""
    if code in _code_verdicts:
        return _code_verdicts[code]
    _code_verdicts[code] = False  # recursion answers "not (yet) known"
    verdict = False
    for name in code.co_names:
        if _root(name) in PROCESS_MODULES or (name in namespace and _starts_processes(namespace[name])):
            verdict = True
            break
    if not verdict:
        verdict = any(_code_starts_processes(const, namespace)
                      for const in code.co_consts if isinstance(const, types.CodeType))
    _code_verdicts[code] = verdict
    return verdict


def _starts_processes(value: Any) -> bool:
    """Whether a name a test can reach starts processes: a process module, a function whose code reaches
    one, or a class from a module that does. Data (strings, numbers, instances) never does."""
    if isinstance(value, types.ModuleType):
        # A helper module's ``import os`` is not a process; its ``import subprocess`` is.
        return _module_starts_processes(value)
    module_name = getattr(value, "__module__", None)
    if not isinstance(module_name, str):
        return False
    if _root(module_name) in PROCESS_MODULES:
        return True
    if isinstance(value, types.FunctionType):
        return _function_starts_processes(value)
    if not _is_test_code(module_name):
        return False
    if isinstance(value, type):
        module = sys.modules.get(module_name)
        return module is not None and _module_starts_processes(module)
    return False


def _function_starts_processes(function: Callable[..., Any]) -> bool:
    """Reads the function's code when it is the repository's test code (not this module's guard, which
    patches the process starters but starts nothing); any other function counts by its module."""
    function = _unwrapped(function)
    module_name = getattr(function, "__module__", None)
    if not isinstance(module_name, str) or module_name == __name__:
        return False
    if not _is_test_code(module_name):
        return _root(module_name) in PROCESS_MODULES
    code = getattr(function, "__code__", None)
    if code is None:
        return False
    return _code_starts_processes(code, getattr(function, "__globals__", {}))


def _unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """The test's own function under Hypothesis's and functools' wrappers."""
    inner = getattr(getattr(function, "hypothesis", None), "inner_test", None)
    return inspect.unwrap(inner if inner is not None else function)


def pytest_configure(config: pytest.Config) -> None:
    _test_packages.update(Path(path).name for path in config.getini("testpaths"))


def classify(item: pytest.Item) -> str:
    """``unit`` or ``process`` for one collected test (see the module docstring)."""
    explicit = [tier for tier in TIERS if item.get_closest_marker(tier) is not None]
    if len(explicit) > 1:
        raise pytest.UsageError(f"{item.nodeid} is marked both unit and process: pick one")
    if explicit:
        return explicit[0]
    function = getattr(item, "function", None)
    if function is not None and _function_starts_processes(function):
        return "process"
    fixture_info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        definitions = fixture_info.name2fixturedefs.get(name, ()) if fixture_info is not None else ()
        if any(_function_starts_processes(definition.func) for definition in definitions):
            return "process"
    return "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test with its tier before ``-m`` selects, so ``-m unit`` and ``-m process`` work."""
    for item in items:
        tier = classify(item)
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)


@pytest.fixture(autouse=True)
def guard_unit_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fails a ``unit`` test that starts a process: its classification missed a way to start one (a new
    helper, a library call), and the fast tier would run it while claiming to start nothing."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    started: list[str] = []

    def recorded(what: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            return original(*args, **kwargs)
        return record

    monkeypatch.setattr(subprocess.Popen, "__init__", recorded("subprocess.Popen", subprocess.Popen.__init__))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start",
                        recorded("multiprocessing", multiprocessing.process.BaseProcess.start))
    for name in ("fork", "system", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, recorded(f"os.{name}", getattr(os, name)))
    yield
    if started:
        pytest.fail(f"{request.node.nodeid} is tiered 'unit' but started a process ({', '.join(started)}): "
                    f"mark it @pytest.mark.process, or let tests/tiers.py see the helper that starts it",
                    pytrace=False)
