"""Which tests a run selects: a plain run leaves out the opt-in tests, ``--full`` (what .ci/run
runs) keeps them, and naming a file or choosing with ``-m`` runs them too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import OPT_IN

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
MODULE = """
import pytest

def test_plain(): pass

@pytest.mark.slow
def test_slow(): pass

@pytest.mark.browser
def test_browser(): pass

@pytest.mark.vllm
def test_vllm(): pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    markers = "".join(f"\n    {name}: opt-in" for name in OPT_IN)
    pytester.makeini(f"[pytest]\naddopts = --strict-markers\nmarkers ={markers}\n")
    pytester.makepyfile(test_a=MODULE, test_b="def test_other(): pass\n")
    return pytester


def passed(run: pytest.HookRecorder) -> list[str]:
    return sorted(report.nodeid.split("::")[-1] for report in run.listoutcomes()[0])


def test_a_plain_run_leaves_out_the_opt_in_tests(suite: pytest.Pytester) -> None:
    result = suite.inline_run()
    assert passed(result) == ["test_other", "test_plain"]
    assert len(result.getcalls("pytest_deselected")[0].items) == 3


def test_full_runs_every_test(suite: pytest.Pytester) -> None:
    result = suite.inline_run("--full")
    assert passed(result) == ["test_browser", "test_other", "test_plain", "test_slow", "test_vllm"]


def test_a_named_file_or_a_mark_expression_runs_its_opt_in_tests(suite: pytest.Pytester) -> None:
    named = suite.inline_run("test_a.py")
    assert passed(named) == ["test_browser", "test_plain", "test_slow", "test_vllm"]
    chosen = suite.inline_run("-m", "slow")
    assert passed(chosen) == ["test_slow"]


def test_a_named_folder_does_not_opt_in(suite: pytest.Pytester) -> None:
    result = suite.inline_run(str(suite.path))
    assert passed(result) == ["test_other", "test_plain"]
