"""A checkpoint whose metadata were altered is a CheckpointError (exit status 2), never a raw KeyError,
TypeError or UnboundLocalError, and runtime settings are never taken from it."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr

import daskclust
from daskclust.cli import main
from daskclust.errors import CheckpointError
from daskclust.persistence import checkpoint

from conftest import birch

pytestmark = pytest.mark.boundscheck  # also run under NUMBA_BOUNDSCHECK=1 (README, .ci/run)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A GaussianMixture fit checkpointed every iteration, from a zarr store, by the command line."""
    base = tmp_path_factory.mktemp("tamper")
    X = birch(16, points=40, seed=4)[0]
    zarr.create_array(str(base / "x.zarr"), data=X, chunks=(160, 2))
    assert main(["fit", str(base / "x.zarr"), "--algorithm", "gmm", "--clusters", "16", "--max-iter", "3", "--tol", "0",
                 "--checkpoint", str(base / "run"), "--checkpoint-every", "1", "--quiet",
                 "--output", str(base / "m.zarr")]) == 0
    return base


def altered(run, tmp_path, edit) -> str:
    """A copy of the newest checkpoint of ``run`` with its metadata passed through ``edit``."""
    import shutil

    newest = checkpoint.latest(run / "run")
    copy = tmp_path / "ck" / os.path.basename(newest)
    shutil.copytree(newest, copy)
    group = zarr.open_group(str(copy), mode="a")
    meta = json.loads(group.attrs["meta"])
    result = edit(meta)
    group.attrs["meta"] = json.dumps(meta if result is None else result)
    return str(copy)


def set_in(path, value):
    def edit(meta):
        node = meta
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


EDITS = {
    "n_components a string": (set_in(["params", "n_components"], "many"), "invalid parameters"),
    "n_components negative": (set_in(["params", "n_components"], -3), "invalid parameters"),
    "covariance_type unknown": (set_in(["params", "covariance_type"], "banded"), "invalid parameters"),
    "a parameter it does not take": (set_in(["params", "bandwidth"], 2), "does not take (bandwidth)"),
    "source a string": (set_in(["source"], "x.zarr"), "source location"),
    "seed a string": (set_in(["seed"], "7"), "seed '7' is not a non-negative integer"),
    "params a list": (set_in(["params"], [1, 2]), "parameters are not a mapping"),
    "metadata a list": (lambda meta: [meta], "metadata are a list"),
    "bounds not splitting": (set_in(["data", "bounds"], [0, 5]), "chunk bounds do not split"),
    "callback recorded": (set_in(["params", "callback"], "print"), "runtime settings (callback)"),
    "state_store recorded": (set_in(["params", "state_store"], "/elsewhere"), "runtime settings (state_store)"),
    "kind unknown": (set_in(["kind"], "Birch"), "unknown estimator 'Birch'"),
    "kind a number": (set_in(["kind"], 3), "estimator kind 3 is not a name"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_altered_metadata_is_a_checkpoint_error_on_the_command_line(run, tmp_path, capsys, case):
    edit, message = EDITS[case]
    ck = altered(run, tmp_path, edit)
    out = tmp_path / "resumed.zarr"
    assert main(["fit", "--resume", ck, str(run / "x.zarr"), "--quiet", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err, err
    assert not out.exists()


def test_a_huge_iteration_is_a_checkpoint_error(run, tmp_path, capsys):
    ck = altered(run, tmp_path, lambda meta: None)
    zarr.open_group(ck, mode="a").attrs["iteration"] = 10 ** 12
    assert main(["fit", "--resume", ck, str(run / "x.zarr"), "--quiet", "--output", str(tmp_path / "r.zarr")]) == 2
    assert "is not a count of its" in capsys.readouterr().err


def test_resuming_beyond_max_iter_says_to_raise_it(run, client):
    X = zarr.open_array(str(run / "x.zarr"), mode="r")
    saved = checkpoint.read_checkpoint(run / "run")
    assert saved.iteration >= 2
    model = daskclust.GaussianMixture(**{**saved.meta["params"], "max_iter": 1})
    with pytest.raises(CheckpointError, match="beyond max_iter=1: pass a larger max_iter"):
        model.fit(X, client=client, resume=run / "run")


def test_the_untouched_checkpoint_resumes(run, tmp_path):
    out = tmp_path / "resumed.zarr"
    assert main(["fit", "--resume", str(run / "run"), str(run / "x.zarr"), "--max-iter", "5", "--quiet",
                 "--output", str(out)]) == 0
    assert np.all(np.isfinite(daskclust.load(out).means_))
