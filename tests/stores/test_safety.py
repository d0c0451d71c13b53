"""Nothing lost: outputs never replace what daskclust did not write, never overlap their inputs,
and damaged stores are refused with the project's errors (issue 8, items 1, 2, 4, 10)."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
import zarr

import daskclust
from daskclust import io
from daskclust.cli import main
from daskclust.data import as_chunked_data
from daskclust.errors import (
    CheckpointError,
    InvalidDataError,
    ModelStoreError,
    OutputRefusedError,
)
from daskclust.persistence import checkpoint

from conftest import birch, snapshot


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A data set, a fitted model saved as a store, and a user's own files."""
    root = tmp_path_factory.mktemp("safety")
    X, _ = birch(16, points=40, seed=2)
    data = zarr.create_array(str(root / "data.zarr"), shape=X.shape, chunks=(128, 2), dtype="f8")
    data[:] = X
    (root / "notes").mkdir()
    (root / "notes" / "notes.txt").write_text("my thesis, no backup\n")
    return root, X


@pytest.fixture(scope="module")
def model(workdir, client):
    root, X = workdir
    fitted = daskclust.KMeans(16, random_state=0).fit(str(root / "data.zarr"), client=client)
    fitted.save(root / "model.zarr")
    return fitted


# --------------------------------------------------------------------------- outputs
@pytest.mark.parametrize("target", ["notes", ".", "data.zarr", "data.zarr/labels", "model.zarr", "model.zarr/x"])
def test_predict_output_never_deletes_user_data(workdir, model, client, target, monkeypatch):
    root, _ = workdir
    monkeypatch.chdir(root)
    before = snapshot(root)
    with pytest.raises(OutputRefusedError):
        model.predict(str(root / "data.zarr"), output=target, inputs=[root / "model.zarr"])
    assert snapshot(root) == before


def test_output_that_contains_the_input_is_refused(workdir, model, tmp_path):
    root, X = workdir
    inner = tmp_path / "outer" / "data.zarr"
    zarr.create_array(str(inner), shape=X.shape, chunks=(128, 2), dtype="f8")[:] = X
    with pytest.raises(OutputRefusedError, match="overlaps the input"):
        model.predict(str(inner), output=tmp_path / "outer")
    assert inner.exists()


def test_labels_are_replaced_only_with_overwrite(workdir, model, tmp_path, client):
    root, X = workdir
    out = tmp_path / "labels.zarr"
    with client.as_current():
        first = model.predict(str(root / "data.zarr"), output=out)
        np.testing.assert_array_equal(first[:], model.predict(X))
        with pytest.raises(OutputRefusedError, match="overwrite=True"):
            model.predict(str(root / "data.zarr"), output=out)
        again = model.predict(str(root / "data.zarr"), output=out, overwrite=True)
    np.testing.assert_array_equal(again[:], model.predict(X))
    assert io.store_kind(io.Location.parse(out)) == "labels"
    assert sorted(os.listdir(tmp_path)) == ["labels.zarr"]  # no temporary sibling left


def test_a_failed_predict_leaves_no_output_and_no_temporary(workdir, model, tmp_path):
    root, X = workdir
    bad = X.copy()
    bad[300, 1] = np.nan
    store = zarr.create_array(str(tmp_path / "bad.zarr"), shape=X.shape, chunks=(128, 2), dtype="f8")
    store[:] = bad
    with pytest.raises(InvalidDataError, match="row 300"):
        model.predict(str(tmp_path / "bad.zarr"), output=tmp_path / "labels.zarr")  # local threads
    assert sorted(os.listdir(tmp_path)) == ["bad.zarr"]


def test_save_never_replaces_a_data_set_even_with_overwrite(workdir, model):
    root, _ = workdir
    before = snapshot(root / "data.zarr")
    for overwrite in (False, True):
        with pytest.raises(OutputRefusedError, match="not a store daskclust wrote"):
            model.save(root / "data.zarr", overwrite=overwrite)
    assert snapshot(root / "data.zarr") == before


def test_save_replaces_a_model_only_with_overwrite(model, tmp_path):
    model.save(tmp_path / "m.zarr")
    with pytest.raises(OutputRefusedError, match="overwrite=True"):
        model.save(tmp_path / "m.zarr")
    model.save(tmp_path / "m.zarr", overwrite=True)
    np.testing.assert_array_equal(daskclust.load(tmp_path / "m.zarr").centres_, model.centres_)


def test_cli_fit_output_onto_its_data_is_refused_before_any_work(workdir, model, capsys, monkeypatch):
    """``model`` saves model.zarr (a daskclust model), which ``fit`` without --overwrite must refuse."""
    root, _ = workdir
    before = snapshot(root)
    monkeypatch.setattr(daskclust.KMeans, "fit", lambda *a, **k: pytest.fail("the fit must not start"))
    for output in ("data.zarr", "data.zarr/model", "notes", "model.zarr"):
        code = main(["fit", str(root / "data.zarr"), "--clusters", "4", "--output", str(root / output), "--quiet"])
        assert code == 2
        assert "daskclust fit: error: " in capsys.readouterr().err
    assert snapshot(root) == before


def test_make_data_never_replaces_a_model_or_user_files(workdir, model, capsys):
    root, _ = workdir
    before = snapshot(root)
    for target in ("model.zarr", "notes", "data.zarr"):
        assert main(["make-data", "birch", "--output", str(root / target), "--clusters", "4", "--overwrite"]) == 2
        assert "refusing to write the data set" in capsys.readouterr().err
    assert snapshot(root) == before


def test_checkpoint_directory_rules(workdir, client, tmp_path):
    root, X = workdir
    est = daskclust.KMeans(16, init="random", n_init=1, random_state=1, max_iter=4, tol=0)  # random seeds: iterations to checkpoint
    with pytest.raises(OutputRefusedError, match="not a store daskclust wrote"):
        est.fit(X, client=client, checkpoint=root / "notes")
    with pytest.raises(OutputRefusedError, match="overlaps the input"):
        est.fit(str(root / "data.zarr"), client=client, checkpoint=root / "data.zarr" / "ck")
    run = tmp_path / "run"
    est.fit(X, client=client, checkpoint=run, checkpoint_every=2)
    assert io.store_kind(io.Location.parse(run)) == "checkpoints"
    with pytest.raises(OutputRefusedError, match="--resume. to continue from it"):
        est.fit(X, client=client, checkpoint=run, checkpoint_every=2)  # another fit's checkpoints
    est.fit(X, client=client, checkpoint=run, resume=run, checkpoint_every=2)  # continuing is fine
    est.set_params(random_state=7).fit(X, client=client, checkpoint=run, checkpoint_every=2, overwrite=True)
    assert checkpoint.read_checkpoint(run).meta["seed"] == 7  # the earlier fit's checkpoints are gone
    bad = X.copy()
    bad[5, 0] = np.nan
    with pytest.raises(InvalidDataError, match="row 5"):
        est.fit(bad, client=client, checkpoint=tmp_path / "failed")
    est.fit(X, client=client, checkpoint=tmp_path / "failed", checkpoint_every=2)  # it held no checkpoint


def test_state_store_never_replaces_user_files(workdir, client, tmp_path):
    root, X = workdir
    before = snapshot(root)
    est = daskclust.KMeans(16, random_state=1, max_iter=3, state="zarr", state_store=str(root / "notes"))
    with pytest.raises(OutputRefusedError):
        est.fit(X, client=client)
    assert snapshot(root) == before
    est.set_params(state_store=str(tmp_path / "state")).fit(X, client=client)
    assert not (tmp_path / "state").exists()  # scratch space, removed after the fit


# --------------------------------------------------------------------------- paths
def test_relative_paths_are_made_absolute(workdir, monkeypatch):
    root, _ = workdir
    monkeypatch.chdir(root)
    data = as_chunked_data("data.zarr")
    assert os.path.isabs(str(data.source.array.store.root))
    data = as_chunked_data(zarr.open_array("data.zarr", mode="r"))
    assert os.path.isabs(str(data.source.array.store.root))
    assert io.Location.parse("m.zarr").url == str(root / "m.zarr")


def test_workers_that_cannot_see_a_store_are_refused(client):
    """memory:// lives in one process: the worker processes cannot see what the driver wrote there."""
    X, _ = birch(4, points=50)
    url = "memory://daskclust-safety/data.zarr"
    zarr.create_array(url, shape=X.shape, chunks=(50, 2), dtype="f8")[:] = X
    with pytest.raises(InvalidDataError, match="cannot see memory:///?daskclust-safety/data.zarr"):
        daskclust.KMeans(4, random_state=0).fit(url, client=client)


# --------------------------------------------------------------------------- damaged stores
def test_missing_data_chunk_is_refused(workdir, client, tmp_path, capsys):
    root, X = workdir
    store = zarr.create_array(str(tmp_path / "d.zarr"), shape=X.shape, chunks=(100, 2), dtype="f8")
    store[:] = X
    os.remove(tmp_path / "d.zarr" / "c" / "3" / "0")
    with pytest.raises(InvalidDataError, match=r"1 of its 7 chunks are missing \(the first at rows 300-399\)"):
        daskclust.KMeans(4).fit(str(tmp_path / "d.zarr"), client=client)
    assert main(["predict", str(root / "model.zarr"), str(tmp_path / "d.zarr"), "--output",
                 str(tmp_path / "l.zarr")]) == 2
    assert "chunks are missing" in capsys.readouterr().err
    assert not (tmp_path / "l.zarr").exists()


def model_files(path: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def test_every_damage_to_a_model_store_is_a_model_store_error(model, tmp_path):
    """Delete, truncate or garble each file of a saved model in turn: load raises ModelStoreError."""
    model.save(tmp_path / "m.zarr")
    pristine = {p.relative_to(tmp_path): p.read_bytes() for p in model_files(tmp_path / "m.zarr")}
    assert len(pristine) > 10
    for rel, content in pristine.items():
        for damage in ("delete", "truncate", "garble"):
            path = tmp_path / rel
            if damage == "delete":
                path.unlink()
            else:
                path.write_bytes(content[: len(content) // 2] if damage == "truncate" else b"\x00{not json" * 3)
            with pytest.raises(ModelStoreError):
                daskclust.load(tmp_path / "m.zarr")
            path.write_bytes(content)
    np.testing.assert_array_equal(daskclust.load(tmp_path / "m.zarr").centres_, model.centres_)


@pytest.mark.parametrize("change, match", [
    ({"daskclust_params": "[1, 2]"}, "not a dict"),
    ({"daskclust_params": "{not json"}, "not valid JSON"),
    ({"daskclust_params": json.dumps({"n_clusters": 5})}, "5 clusters|centres for 5"),
    ({"daskclust_params": json.dumps({"n_clusters": 16, "colour": "red"})}, "unknown parameters"),
    ({"daskclust_params": json.dumps({"n_clusters": 16, "tol": -1})}, "tol must be"),
    ({"daskclust_scalars": json.dumps({"sigma2": 1.0})}, "scalars missing"),
    ({"daskclust_kind": "Birch"}, "unknown kind"),
    ({"daskclust_arrays": json.dumps(["centres", "weights"])}, "missing"),
])
def test_tampered_model_attributes_are_refused(model, tmp_path, change, match):
    model.save(tmp_path / "m.zarr")
    zarr.open_group(str(tmp_path / "m.zarr"), mode="r+").attrs.update(change)
    with pytest.raises(ModelStoreError, match=match):
        daskclust.load(tmp_path / "m.zarr")


def test_non_finite_centres_are_refused(model, tmp_path, capsys, workdir):
    root, _ = workdir
    model.save(tmp_path / "m.zarr")
    centres = zarr.open_array(str(tmp_path / "m.zarr" / "centres"), mode="r+")
    centres[0, 0] = np.nan
    with pytest.raises(ModelStoreError, match="finite"):
        daskclust.load(tmp_path / "m.zarr")
    for chunk in (tmp_path / "m.zarr" / "centres" / "c").rglob("*"):
        if chunk.is_file():
            chunk.unlink()  # today: read back as NaN centres, and predict wrote all-0 labels
    assert main(["predict", str(tmp_path / "m.zarr"), str(root / "data.zarr"), "--output",
                 str(tmp_path / "l.zarr")]) == 2
    assert "damaged" in capsys.readouterr().err
    assert not (tmp_path / "l.zarr").exists()


def test_every_damage_to_a_checkpoint_is_a_checkpoint_error(client, tmp_path):
    """Delete or garble each file of a checkpoint in turn: loading it (metadata, on the driver) or
    resuming from it (chunk states, read by the workers) raises CheckpointError, never resumes."""
    X, _ = birch(16, points=40, seed=4)
    est = daskclust.KMeans(16, init="random", n_init=1, random_state=2, max_iter=4, tol=0, chunk_rows=256)
    est.fit(X, client=client, checkpoint=tmp_path / "run", checkpoint_every=2)
    ckpt = tmp_path / "run" / "ckpt-000002"
    pristine = {p: p.read_bytes() for p in model_files(ckpt)}
    assert sum("chunks" in str(p) for p in pristine) >= 6  # 3 chunks, K(n) and row order each
    for path, content in pristine.items():
        for damage in ("delete", "garble"):
            if damage == "delete":
                path.unlink()
            else:
                path.write_bytes(b"\x00{not json" * 3)
            with pytest.raises(CheckpointError):
                checkpoint.read_checkpoint(ckpt)
                est.fit(X, client=client, resume=ckpt)
            path.write_bytes(content)
    checkpoint.read_checkpoint(ckpt)


# --------------------------------------------------------------------------- runtime parameters
def test_runtime_parameters_are_neither_saved_nor_restored(model, tmp_path):
    tuned = daskclust.KMeans(16, verbose=1, scheduler_address="tcp://127.0.0.1:1", state_store="/x",
                             memory_budget=10, callback=print)
    tuned.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    tuned.save(tmp_path / "m.zarr")
    stored = json.loads(zarr.open_group(str(tmp_path / "m.zarr")).attrs["daskclust_params"])
    assert not {"scheduler_address", "state_store", "callback", "verbose", "security", "memory_budget"} & set(stored)
    evil = {**stored, "scheduler_address": "tcp://203.0.113.9:8786", "state_store": "/etc", "verbose": 3}
    zarr.open_group(str(tmp_path / "m.zarr"), mode="r+").attrs["daskclust_params"] = json.dumps(evil)
    loaded = daskclust.load(tmp_path / "m.zarr")
    assert loaded.scheduler_address is None and loaded.state_store is None and loaded.verbose == 0
