"""The tiers plugin (tests/tiers.py) on small made-up test modules, run by an inner pytest."""

from __future__ import annotations

import pytest

HELPER = '''
import subprocess


def start_echo():
    return subprocess.run(["true"], check=True)
'''

TESTS = '''
import os

import pytest

from madeup.helper import start_echo


def test_pure():
    assert 1 + 1 == 2


def test_through_a_helper():
    start_echo()


@pytest.fixture
def echoed():
    return start_echo()


def test_through_a_fixture(echoed):
    assert echoed.returncode == 0


def test_hidden_start():
    getattr(os, "sys" + "tem")("true")


@pytest.mark.process
def test_said_process():
    getattr(os, "sys" + "tem")("true")
'''


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner run over a made-up test package (its name in ``testpaths``, as tests/ is in ours)."""
    pytester.makeini("[pytest]\ntestpaths = madeup\n")
    package = pytester.mkpydir("madeup")
    (package / "helper.py").write_text(HELPER)
    (package / "test_made_up.py").write_text(TESTS)
    return pytester.runpytest_inprocess("-p", "tests.tiers", "-q", *args)


@pytest.mark.process  # the made-up tests start processes inside this one
def test_tiers_follow_helpers_and_fixtures(pytester: pytest.Pytester) -> None:
    unit = _run(pytester, "--collect-only", "-m", "unit")
    unit.stdout.fnmatch_lines(["*::test_pure", "*::test_hidden_start", "*2/5 tests collected*"])


@pytest.mark.process
def test_a_unit_test_that_starts_a_process_fails_naming_itself(pytester: pytest.Pytester) -> None:
    result = _run(pytester)
    result.assert_outcomes(passed=5, errors=1)  # its call passes, its teardown fails it
    result.stdout.fnmatch_lines(["*test_hidden_start is tiered 'unit' but started a process (os.system)*"])


def test_both_tiers_at_once_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_both='''
import pytest


@pytest.mark.unit
@pytest.mark.process
def test_confused():
    pass
''')
    result = pytester.runpytest_inprocess("-p", "tests.tiers", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_confused is marked both unit and process*"])
