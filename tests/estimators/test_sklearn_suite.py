"""scikit-learn's own tests of KMeans and GaussianMixture, run against daskclust's classes.

The installed scikit-learn ships ``sklearn/cluster/tests/test_k_means.py`` and
``sklearn/mixture/tests/test_gaussian_mixture.py``. Each is copied with one line changed, the import
of the class under test, and run by pytest in a child process with scikit-learn's fixtures
(``-p sklearn.conftest``), its float32 tests switched on (``SKLEARN_RUN_FLOAT32_TESTS=1``) and one Dask
client for the session; the tests of array-API inputs (torch, cupy, ...) skip themselves here. Every test must pass except those in
:data:`EXPECTED_FAILURES`, each with its reason; the list is checked both ways, so a listed test
that passes fails this one too (the list stays true as daskclust or scikit-learn change).
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import sklearn

SKLEARN = Path(sklearn.__file__).parent
FILES = {
    "test_k_means.py": (SKLEARN / "cluster" / "tests" / "test_k_means.py",
                        "from sklearn.cluster import KMeans, MiniBatchKMeans, k_means, kmeans_plusplus\n",
                        "from sklearn.cluster import MiniBatchKMeans, k_means, kmeans_plusplus\n"
                        "from daskclust import KMeans\n"),
    "test_gaussian_mixture.py": (SKLEARN / "mixture" / "tests" / "test_gaussian_mixture.py",
                                 "from sklearn.mixture import GaussianMixture\n",
                                 "from daskclust import GaussianMixture\n"),
}
"""Each copied file: scikit-learn's original, and the import line replaced."""

CONFTEST = '''
import pytest
from distributed import Client, LocalCluster


@pytest.fixture(scope="session", autouse=True)
def daskclust_client():
    """One in-process cluster for every fit of the session (the active client the estimators find)."""
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \\
            Client(cluster) as client:
        yield client
'''

PRIVATE = "tests scikit-learn's private helpers, which daskclust's classes do not have"
EXPECTED_FAILURES: dict[str, str] = {
    # scikit-learn's private helpers and attributes
    "test_k_means.py::test_sample_weight_init": PRIVATE + " (KMeans._init_centroids)",
    "test_k_means.py::test_sample_weight_zero": PRIVATE + " (KMeans._init_centroids)",
    "test_k_means.py::test_kmeans_init_auto_with_initial_centroids[KMeans-*]": PRIVATE + " (KMeans._n_init; daskclust's "
    "runs of n_init='auto' are tested in test_sklearn_semantics.py)",
    "test_k_means.py::test_n_init_auto[KMeans-*]": PRIVATE + " (KMeans._n_init; see test_sklearn_semantics.py)",
    "test_gaussian_mixture.py::test_gaussian_mixture_precisions_init": PRIVATE + " (GaussianMixture._set_parameters)",
    "test_gaussian_mixture.py::test_gaussian_mixture_all_init_does_not_estimate_gaussian_parameters":
        PRIVATE + " (counts calls of sklearn.mixture._gaussian_mixture._estimate_gaussian_parameters)",
    # behaviour daskclust deliberately differs on (docs/guide/from-sklearn.md)
    "test_gaussian_mixture.py::test_check_weights": "scikit-learn's message prints the weights' min as 'max value' "
    "and their max as 'min value'; daskclust's names them right",
    "test_gaussian_mixture.py::test_regularisation": "with reg_covar=0, a diagonal or spherical component "
    "collapsed onto repeated rows gets the variance floor (float64 rounding at the means' scale) where scikit-learn "
    "raises; the full and tied families raise scikit-learn's error",
}
"""``file::test`` (every parametrization) or ``file::test[pattern]`` (fnmatch: ``*`` for any
parameters) -> why it fails."""


def listed(test_id: str, key: str) -> bool:
    """Whether ``key`` of :data:`EXPECTED_FAILURES` names ``test_id``: its test function, or a pattern of
    its whole id."""
    test, _, params = test_id.partition("[")
    name, _, pattern = key.partition("[")
    return test == name and (not pattern or fnmatch.fnmatchcase(params.rstrip("]"), pattern.rstrip("]")))


def expected_reason(test_id: str) -> str | None:
    """The reason listed for ``test_id``, if any."""
    return next((reason for key, reason in EXPECTED_FAILURES.items() if listed(test_id, key)), None)


def outcomes(report: Path) -> dict[str, str]:
    """``file::test[params]`` -> "passed", "failed" or "skipped", from pytest's JUnit XML report."""
    results = {}
    for case in ElementTree.parse(report).iter("testcase"):
        module = case.get("classname").rsplit(".", 1)[-1]
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
            elif child.tag == "skipped":
                state = "skipped"
        results[f"{module}.py::{case.get('name')}"] = state
    return results


@pytest.fixture(scope="module")
def suite_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sklearn_suite")
    for name, (original, old, new) in FILES.items():
        text = original.read_text()
        assert old in text, f"scikit-learn's {original} no longer imports its class with {old!r}"
        (folder / name).write_text(text.replace(old, new, 1))
    (folder / "conftest.py").write_text(CONFTEST)
    report = folder / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "sklearn.conftest", "-p", "no:cacheprovider",
                    f"--junitxml={report}", "-W", "ignore::DeprecationWarning", *FILES], cwd=folder, check=False,
                   capture_output=True, text=True, timeout=1500,
                   env={**os.environ, "SKLEARN_RUN_FLOAT32_TESTS": "1"})  # float32 in, float32 out: tested too
    return outcomes(report)


def test_scikit_learn_suite_runs_every_test(suite_results):
    assert len(suite_results) > 150
    assert {test.split("::")[0] for test in suite_results} == set(FILES)


def test_every_unlisted_test_passes(suite_results):
    failing = sorted(t for t, state in suite_results.items() if state == "failed" and expected_reason(t) is None)
    assert not failing, f"{len(failing)} of scikit-learn's tests fail on daskclust's classes: {failing}"


def test_every_listed_failure_still_fails(suite_results):
    passing = sorted(t for t, state in suite_results.items() if state == "passed" and expected_reason(t) is not None)
    assert not passing, f"listed as expected failures, but pass: {passing}"
    unknown = sorted(k for k in EXPECTED_FAILURES if not any(listed(t, k) for t in suite_results))
    assert not unknown, f"listed tests that scikit-learn's files no longer have: {unknown}"
