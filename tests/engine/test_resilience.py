"""Out-of-core fits, checkpoints and resume, lost workers."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster
from sklearn.base import clone

import daskclust
from daskclust.cli import main
from daskclust.errors import CheckpointError
from daskclust.persistence import checkpoint

from conftest import Interrupt, assert_same_model, birch, interrupt_at


def write_zarr(path, X, rows):
    z = zarr.create_array(str(path), shape=X.shape, chunks=(rows, X.shape[1]), dtype=X.dtype)
    z[:] = X
    return str(path)


@pytest.fixture(scope="module")
def data():
    return birch(64, points=50, seed=31)[0]


@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
def test_resume_equals_the_uninterrupted_fit(client, tmp_path, data, kind):
    common = dict(random_state=3, init="random", n_init=1, tol=0, max_iter=14)  # random seeds: 15 iterations to go
    est = daskclust.KMeans(64, **common) if kind == "kmeans" else daskclust.GaussianMixture(64, covariance_type="isotropic", **common)
    plain = clone(est).fit(data, client=client)
    whole = clone(est).fit(data, client=client, checkpoint=tmp_path / "whole", checkpoint_every=3)
    assert_same_model(plain, whole)
    broken = clone(est).set_params(callback=interrupt_at(8))
    with pytest.raises(Interrupt):
        broken.fit(data, client=client, checkpoint=tmp_path / "run", checkpoint_every=3)
    assert checkpoint.list_checkpoints(str(tmp_path / "run")) == ["ckpt-000003", "ckpt-000006"]
    resumed = clone(est).fit(data, client=client, resume=tmp_path / "run", checkpoint=tmp_path / "run",
                             checkpoint_every=3)
    assert_same_model(plain, resumed)
    assert [r["iteration"] for r in resumed.history_] == list(range(len(plain.history_)))


def test_interrupted_checkpoint_is_refused_and_the_previous_one_used(client, tmp_path, data, monkeypatch):
    est = daskclust.KMeans(64, random_state=5, init="random", n_init=1, tol=0, max_iter=10)
    plain = clone(est).fit(data, client=client)
    run = tmp_path / "run"
    real_save = daskclust.engine.engine.Engine.save_state
    calls = []

    def crash_on_third(self, url):
        calls.append(url)
        if len(calls) == 3:
            real_save(self, url)
            raise Interrupt("killed while writing a checkpoint")
        real_save(self, url)

    monkeypatch.setattr(daskclust.engine.engine.Engine, "save_state", crash_on_third)
    with pytest.raises(Interrupt):
        clone(est).fit(data, client=client, checkpoint=run, checkpoint_every=2)
    monkeypatch.undo()
    partial = str(run / "ckpt-000006.tmp")
    assert os.path.isdir(partial)
    with pytest.raises(CheckpointError, match="incomplete: it was interrupted while writing"):
        checkpoint.read_checkpoint(partial)
    group = zarr.open_group(str(run / "ckpt-000004"), mode="a")  # a marker-less copy is refused as well
    del group.attrs["complete"]
    with pytest.raises(CheckpointError, match="incomplete"):
        checkpoint.read_checkpoint(str(run / "ckpt-000004"))
    group.attrs["complete"] = True
    resumed = clone(est).fit(data, client=client, resume=run)
    assert_same_model(plain, resumed)


def test_resume_refuses_other_data_or_parameters(client, tmp_path, data):
    run = tmp_path / "run"
    daskclust.KMeans(64, random_state=5, tol=0, max_iter=4).fit(data, client=client, checkpoint=run, checkpoint_every=2)
    with pytest.raises(CheckpointError, match="other data"):
        daskclust.KMeans(64, random_state=5, tol=0, max_iter=4).fit(data[:-10], client=client, resume=run)
    with pytest.raises(CheckpointError, match="other parameters: n_neighbors=10"):
        daskclust.KMeans(64, random_state=5, n_neighbors=3).fit(data, client=client, resume=run)
    with pytest.raises(CheckpointError, match="is of a KMeans"):
        daskclust.GaussianMixture(64, covariance_type="isotropic", random_state=5).fit(data, client=client, resume=run)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        daskclust.KMeans(64).fit(data, client=client, resume=tmp_path / "nothing")


@pytest.mark.parametrize("form", ["numpy", "zarr"])
def test_resume_refuses_other_data_of_the_same_shape_and_chunking(client, tmp_path, data, form):
    """The content fingerprint, not the shape, says whose checkpoint it is: one changed value is other data."""
    other = data.copy()
    other[123, 1] += 1.0
    if form == "zarr":
        data, other = write_zarr(tmp_path / "a.zarr", data, 400), write_zarr(tmp_path / "b.zarr", other, 400)
    run = tmp_path / "run"
    first = daskclust.KMeans(64, random_state=5, tol=0, max_iter=4).fit(data, client=client, checkpoint=run,
                                                                  checkpoint_every=2)
    assert len(first.training_data_["fingerprint"]["content"]) == 64
    with pytest.raises(CheckpointError, match="same shape, dtype and chunking, but its data's content fingerprint"):
        daskclust.KMeans(64, random_state=5, tol=0, max_iter=6).fit(other, client=client, resume=run)
    resumed = daskclust.KMeans(64, random_state=5, tol=0, max_iter=6).fit(data, client=client, resume=run)
    assert resumed.training_data_["fingerprint"] == first.training_data_["fingerprint"]


def test_fit_resume_on_the_command_line_refuses_other_data(tmp_path, data, capsys):
    other = data.copy()
    other[::7] *= 1.001
    a, b = write_zarr(tmp_path / "a.zarr", data, 400), write_zarr(tmp_path / "b.zarr", other, 400)
    run, out = str(tmp_path / "run"), str(tmp_path / "m.zarr")
    assert main(["fit", a, "--clusters", "16", "--max-iter", "2", "--checkpoint", run, "--checkpoint-every", "1", "--quiet",
                 "--output", str(tmp_path / "first.zarr")]) == 0
    assert main(["fit", "--resume", run, b, "--max-iter", "4", "--quiet", "--output", out]) == 2
    assert "content fingerprint" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_a_checkpoint_without_a_content_fingerprint_is_refused(client, tmp_path, data):
    run = tmp_path / "run"
    daskclust.KMeans(64, random_state=5, tol=0, max_iter=2).fit(data, client=client, checkpoint=run, checkpoint_every=2)
    group = zarr.open_group(checkpoint.latest(run), mode="a")
    meta = json.loads(group.attrs["meta"])
    del meta["data"]["content"]
    group.attrs["meta"] = json.dumps(meta)
    with pytest.raises(CheckpointError, match="records no content fingerprint"):
        daskclust.KMeans(64, random_state=5, tol=0, max_iter=4).fit(data, client=client, resume=run)


@pytest.mark.parametrize("state", ["memory", "zarr"])
def test_out_of_core_fit_equals_the_in_memory_fit(client, tmp_path, data, state):
    """zarr data 4x larger than the memory budget: every pass streams the chunks."""
    store = write_zarr(tmp_path / "X.zarr", data, 200)
    nbytes = data.nbytes
    est = daskclust.KMeans(64, random_state=6)
    in_memory = clone(est).fit(store, client=client)
    streamed = clone(est).set_params(memory_budget=nbytes // 4, state=state,
                                     state_store=str(tmp_path / "state") if state == "zarr" else None)
    streamed.fit(store, client=client)
    assert in_memory.converged_ and streamed.converged_
    assert_same_model(in_memory, streamed)


@pytest.fixture()
def fragile_cluster():
    """Two worker processes under nannies (a killed one is restarted), for this test alone."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      memory_limit="2GiB") as cluster, Client(cluster, set_as_default=False) as c:
        yield c


@pytest.mark.parametrize("with_checkpoint", [False, True])
def test_a_killed_worker_does_not_change_the_model(fragile_cluster, tmp_path, data, with_checkpoint):
    client = fragile_cluster
    est = daskclust.KMeans(64, random_state=5, init="random", n_init=1, tol=0, max_iter=12)
    undisturbed = clone(est).fit(data, client=client)
    pids = client.run(os.getpid)
    victim = sorted(pids)[-1]
    killed = []

    def kill_once(row):
        if row["iteration"] == 5 and not killed:
            killed.append(pids[victim])
            os.kill(pids[victim], signal.SIGKILL)

    extra = dict(checkpoint=tmp_path / "run", checkpoint_every=2) if with_checkpoint else {}
    survived = clone(est).set_params(callback=kill_once).fit(data, client=client, **extra)
    assert killed
    assert_same_model(undisturbed, survived, rtol=1e-10)


def test_cli_checkpoint_and_resume(tmp_path, data, client, capsys):
    store = write_zarr(tmp_path / "X.zarr", data, 400)
    address = client.scheduler.address
    base = ["fit", store, "--clusters", "64", "--seed", "3", "--scheduler", address, "--quiet", "--tol", "0",
            "--max-iter", "12", "--init", "random", "--n-init", "1"]
    assert main(base + ["--output", str(tmp_path / "a.zarr")]) == 0
    assert main(base + ["--output", str(tmp_path / "b.zarr"), "--checkpoint", str(tmp_path / "run"),
                        "--checkpoint-every", "3"]) == 0
    assert main(["fit", "--resume", str(tmp_path / "run" / "ckpt-000009"), "--scheduler", address, "--quiet",
                 "--output", str(tmp_path / "c.zarr")]) == 0
    a, c = daskclust.load(tmp_path / "a.zarr"), daskclust.load(tmp_path / "c.zarr")
    np.testing.assert_allclose(a.cluster_centers_, c.cluster_centers_, rtol=1e-12)
    assert "resumed from" not in capsys.readouterr().out  # --quiet


def test_a_worker_added_mid_fit_changes_nothing(tmp_path, data):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                      memory_limit="2GiB") as cluster, Client(cluster, set_as_default=False) as client:
        est = daskclust.KMeans(64, random_state=8, init="random", n_init=1, tol=0, max_iter=10)
        undisturbed = clone(est).fit(data, client=client)

        def grow(row):
            if row["iteration"] == 3 and len(cluster.workers) == 1:
                cluster.scale(2)

        grown = clone(est).set_params(callback=grow).fit(data, client=client)
        client.wait_for_workers(2, timeout=60)
        assert len(client.scheduler_info(n_workers=-1)["workers"]) == 2
        assert_same_model(undisturbed, grown)
