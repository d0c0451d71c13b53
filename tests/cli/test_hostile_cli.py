"""The command line against a real ``dask scheduler`` / ``dask worker`` cluster whose processes run
in another working directory, used as a careless or hostile user would (issue 8, items 1-3)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

import daskclust

from conftest import snapshot
from process_cluster import process_cluster


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} within {timeout} s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two workers on 127.0.0.1, started in a directory of their own."""
    elsewhere = tmp_path_factory.mktemp("cluster-cwd")
    with process_cluster(elsewhere, processes=2,
                         worker_args=("--nthreads", "1", "--memory-limit", "2GiB", "--no-dashboard")) as running:
        yield running.address, elsewhere


def cli(*args, cwd, timeout=300):
    """Run ``daskclust ARGS`` in ``cwd`` as a new process; returns the completed process."""
    return subprocess.run([sys.executable, "-m", "daskclust", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def zarr_stores(directory: pathlib.Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*.zarr*"))


@pytest.fixture(scope="module")
def driver(tmp_path_factory, cluster):
    """The user's directory: a data set, notes, and a model fitted there with relative paths."""
    address, elsewhere = cluster
    here = tmp_path_factory.mktemp("driver-cwd")
    (here / "notes").mkdir()
    (here / "notes" / "notes.txt").write_text("do not delete\n")
    done = cli("make-data", "birch", "--output", "data.zarr", "--clusters", "16", "--points-per-cluster", "50", cwd=here)
    assert done.returncode == 0, done.stderr
    done = cli("fit", "data.zarr", "--clusters", "16", "--scheduler", address, "--output", "m.zarr",
               "--checkpoint", "ck.zarr", "--checkpoint-every", "1", "--quiet", cwd=here)  # converges in 2 iterations
    assert done.returncode == 0, done.stderr
    return here


def test_relative_paths_mean_the_driver_s_directory(driver, cluster, client):
    address, elsewhere = cluster
    assert zarr_stores(elsewhere) == []  # nothing read from or written to the workers' directory
    assert {"data.zarr", "m.zarr", "ck.zarr"} <= set(os.listdir(driver))
    model = daskclust.load(driver / "m.zarr")
    same = daskclust.KMeans(16, random_state=0, tol=1e-5).fit(str(driver / "data.zarr"), client=client)
    np.testing.assert_allclose(model.centres_, same.centres_, rtol=1e-10, atol=1e-10)


def test_predict_writes_labels_where_the_user_is(driver, cluster):
    address, elsewhere = cluster
    done = cli("predict", "m.zarr", "data.zarr", "--scheduler", address, "--output", "l.zarr", cwd=driver)
    assert done.returncode == 0, done.stderr
    X = zarr.open_group(str(driver / "data.zarr"), mode="r")["X"][:]
    labels = zarr.open_array(str(driver / "l.zarr"), mode="r")[:]
    np.testing.assert_array_equal(labels, daskclust.load(driver / "m.zarr").predict(X))
    assert len(np.unique(labels)) > 1
    assert zarr_stores(elsewhere) == []


def test_resume_from_a_relative_checkpoint(driver, cluster):
    address, _ = cluster
    done = cli("fit", "--resume", "ck.zarr", "--scheduler", address, "--output", "resumed.zarr", "--quiet",
               cwd=driver)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(daskclust.load(driver / "resumed.zarr").centres_,
                               daskclust.load(driver / "m.zarr").centres_, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("command", [
    ["predict", "m.zarr", "data.zarr", "--output", "notes"],
    ["predict", "m.zarr", "data.zarr", "--output", "."],
    ["predict", "m.zarr", "data.zarr", "--output", "data.zarr"],
    ["predict", "m.zarr", "data.zarr", "--output", "m.zarr", "--overwrite"],
    ["fit", "data.zarr", "--clusters", "8", "--output", "data.zarr", "--overwrite"],
    ["fit", "data.zarr", "--clusters", "8", "--output", "notes", "--overwrite"],
    ["fit", "data.zarr", "--clusters", "8", "--output", "m.zarr"],
    ["fit", "data.zarr", "--clusters", "8", "--output", "new.zarr", "--checkpoint", "data.zarr"],
    ["make-data", "birch", "--output", "m.zarr", "--clusters", "4", "--overwrite"],
    ["make-data", "birch", "--output", "notes", "--clusters", "4", "--overwrite"],
])
def test_hostile_outputs_leave_every_file_intact(driver, cluster, command):
    address, _ = cluster
    if command[0] != "make-data":
        command = [*command, "--scheduler", address]
    before = snapshot(driver)
    done = cli(*command, cwd=driver)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error:" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(driver) == before


def _default_sigint():
    """In the child: Ctrl-C's default action, which Python turns into KeyboardInterrupt (a shell
    starts background jobs, such as a CI script's, with SIGINT ignored, and children inherit it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_interrupted_predict_leaves_no_temporary_store(tmp_path, cluster):
    """SIGINT while the workers write labels: the temporary store is removed once no task writes."""
    address, _ = cluster
    rng = np.random.default_rng(0)
    X = zarr.create_array(str(tmp_path / "big.zarr"), shape=(400_000, 16), chunks=(25_000, 16), dtype="f4")
    X[:] = rng.standard_normal((400_000, 16), dtype=np.float32)
    model = daskclust.KMeans(4000)  # a slow predict: 400k x 4000 distances in 16-D, 16 spans
    model.centres_ = rng.standard_normal((4000, 16))
    model.__dict__.update(sigma2_=1.0, n_iter_=0, converged_=True, inertia_=1.0, n_features_in_=16, seed_=0,
                          seeding_time_=0.0, seeding_distances_=0, fit_time_=0.0, history_=[])
    model.save(tmp_path / "m.zarr")
    before = snapshot(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "daskclust", "predict", "m.zarr", "big.zarr", "--output",
                             "l.zarr", "--scheduler", address], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    try:
        _wait_for(lambda: any((p / "c").exists() for p in tmp_path.glob("l.zarr.tmp-*")), 120,
                  "no label chunk was written")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert code == 130, err
    assert "predict: interrupted; nothing is left half-written" in err
    assert snapshot(tmp_path) == before  # no l.zarr, no l.zarr.tmp-*
