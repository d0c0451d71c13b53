"""What importing daskclust imports: scikit-learn only with the estimators, matplotlib only with a figure.

The command line, the kernels' helper process and Dask workers unpickling an operation import
daskclust's modules; scikit-learn's base module (which imports scipy.stats and pandas) costs them
1.6 s of CPU, so the package root and :mod:`daskclust.errors` import it when first asked for (pandas
and scipy.sparse come with dask.array, which the data need).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
import sklearn.exceptions

import daskclust
import daskclust.errors

SCRIPT = """
import json, sys
import daskclust, daskclust.cli.main, daskclust.fit, daskclust.fit.warmup, daskclust.em.loop
import daskclust.errors
heavy = ["sklearn", "scipy.stats", "matplotlib"]
before = {name: name in sys.modules for name in heavy}
daskclust.KMeans
print(json.dumps({"before": before, "after": {name: name in sys.modules for name in heavy}}))
"""


def test_the_command_line_and_the_fit_import_neither_scikit_learn_nor_matplotlib():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["before"] == {"sklearn": False, "scipy.stats": False, "matplotlib": False}
    assert found["after"]["sklearn"]  # the estimators are scikit-learn estimators
    assert not found["after"]["matplotlib"]  # drawn only by a report


@pytest.mark.parametrize(("name", "base"), [("NotFittedError", sklearn.exceptions.NotFittedError),
                                            ("ConvergenceWarning", sklearn.exceptions.ConvergenceWarning)])
def test_the_errors_refining_scikit_learns_are_one_class_wherever_they_are_taken(name, base):
    cls = getattr(daskclust.errors, name)
    assert issubclass(cls, base) and cls.__module__ == "daskclust.errors"
    assert name in dir(daskclust.errors) and name in daskclust.errors.__all__
    from daskclust.errors import ConvergenceWarning, NotFittedError

    assert cls is {"NotFittedError": NotFittedError, "ConvergenceWarning": ConvergenceWarning}[name]
    assert type(pickle.loads(pickle.dumps(cls("x")))) is cls  # pickled by its public name
    if name == "NotFittedError":
        assert daskclust.NotFittedError is cls and issubclass(cls, daskclust.errors.DaskclustError)
        with pytest.raises(base):
            raise cls("not fitted")


MAKE_DATA = """
import sys
from daskclust.cli.main import main
assert main(["make-data", "birch", "--clusters", "4", "--output", sys.argv[1], "--quiet"]) == 0
print("sklearn" in sys.modules)
"""


def test_a_command_other_than_fit_builds_no_estimator_options(tmp_path):
    """``daskclust fit``'s options come from the estimators; ``make-data`` does not import them."""
    run = subprocess.run([sys.executable, "-c", MAKE_DATA, str(tmp_path / "d.zarr")], capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["False"] and (tmp_path / "d.zarr").is_dir()


@pytest.mark.parametrize(("argv", "command"), [(["demo"], "demo"), (["--log-level", "DEBUG", "make-data", "birch"],
                                                                     "make-data"),
                                               (["--log-level=ERROR", "fit"], "fit"), (["--help"], None),
                                               (["--log", "DEBUG", "demo"], None), ([], None)])
def test_the_command_is_named_before_parsing_or_every_parser_is_built(argv, command):
    from daskclust.cli.main import build_parser, named_command

    assert named_command(argv) == command
    full = {action.dest for action in subparser(build_parser(), "fit")._actions}
    assert {action.dest for action in subparser(build_parser("fit"), "fit")._actions} == full
    assert {action.dest for action in subparser(build_parser("demo"), "fit")._actions} == {"help"}
    assert len(full) > 30  # the estimators' parameters


def subparser(parser, name):
    import argparse

    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        daskclust.errors.Nope  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        daskclust.Nope  # noqa: B018
    assert set(daskclust.__all__) <= set(dir(daskclust))
    assert all(getattr(daskclust, name) is not None for name in daskclust.__all__)


DEMO_START = """
import sys
from pathlib import Path
from daskclust.cli.main import build_parser
from daskclust.report import DEFAULT_SAMPLE, report_paths
from daskclust.report.write import check_targets
build_parser("demo")
check_targets(report_paths(Path(sys.argv[1]) / "demo.html"), overwrite=True, inputs=[])
print(DEFAULT_SAMPLE, *(name in sys.modules for name in ("dask.array", "daskclust.kernels.validation", "numba")))
"""


def test_the_demo_checks_its_report_before_importing_dask_arrays_or_kernels(tmp_path):
    """What ``daskclust demo`` does before it starts compiling on a first run (its parser, with the
    report's default sample size, and the check of the report's files) imports no Dask array and
    no kernel: those imports (3 s) come while the kernels compile."""
    run = subprocess.run([sys.executable, "-c", DEMO_START, str(tmp_path)], capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["20000", "False", "False", "False"]
