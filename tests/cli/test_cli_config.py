"""``daskclust fit`` reaches every estimator and parameter (flags or a TOML --config), and ``daskclust info``
describes what a model was fitted on (issue 13, section 5)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import zarr

import daskclust
from daskclust.cli import main
from daskclust.cli.fit_options import ALGORITHMS, COUNT, estimator_options
from daskclust.data import as_chunked_data
from daskclust.transforms import Sketch
from daskclust.versions import MODEL_PACKAGES

from conftest import blobs

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "fit.toml"

# per algorithm: flags and the Python parameters they must give the saved model
CASES = {
    "kmeans": (["--clusters", "5", "--search", "exhaustive", "--n-neighbors", "3", "--init", "random",
                "--max-iter", "6", "--tol", "0", "--seed", "3", "--chunk-rows", "150", "--coreset", "300",
                "--refine-iter", "1"],
               dict(n_clusters=5, search="exhaustive", n_neighbors=3, init="random", max_iter=6, tol=0.0,
                    random_state=3, chunk_rows=150, coreset=300, refine_iter=1)),
    "gmm": (["--n-components", "5", "--covariance-type", "spherical", "--n-truncated", "2", "--search", "sampled",
             "--n-samples", "3", "--reg-covar", "1e-4", "--learn-weights", "false", "--max-iter", "5"],
            dict(n_components=5, covariance_type="spherical", n_truncated=2, search="sampled", n_samples=3,
                 reg_covar=1e-4, learn_weights=False, max_iter=5)),
    "sketched-gmm": (["--clusters", "4", "--n-kept", "3", "--n-shared", "1", "--precondition", "none",
                      "--n-truncated", "none", "--search", "full", "--max-iter", "4"],
                     dict(n_components=4, n_kept=3, n_shared=1, precondition="none", n_truncated=None,
                          search="full", max_iter=4)),
    "cell-gmm": (["--clusters", "4", "--covariance-type", "full", "--leaf-size", "8", "--initial-depth", "2",
                  "--max-refine", "1", "--refine-fraction", "0.25", "--max-iter", "5"],
                 dict(n_components=4, covariance_type="full", leaf_size=8, initial_depth=2, max_refine=1,
                      refine_fraction=0.25, max_iter=5)),
    "greedy-gmm": (["--n-components", "3", "--covariance-type", "diag", "--n-candidates", "2", "--partial-iter",
                    "5", "--patience", "1", "--min-improvement", "0.001", "--max-refine", "1", "--max-iter", "5"],
                   dict(n_components=3, covariance_type="diag", n_candidates=2, partial_iter=5, patience=1,
                        min_improvement=0.001, max_refine=1, max_iter=5)),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A zarr group: X (600 x 4 blobs, 100-row chunks), positive weights w, held-out rows V."""
    root = tmp_path_factory.mktemp("cli-config") / "d.zarr"
    X, _ = blobs(700, 4, 4, seed=7)
    group = zarr.open_group(str(root), mode="w")
    group.create_array("X", data=X[:600], chunks=(100, 4))
    group.create_array("w", data=np.random.default_rng(1).uniform(0.2, 3.0, 600), chunks=(100,))
    group.create_array("V", data=X[600:], chunks=(100, 4))
    return str(root)


def fit(*args, client=None):
    """``daskclust fit ARGS --quiet`` on the test cluster; the exit code."""
    return main(["fit", *map(str, args), "--quiet", *(["--scheduler", client.scheduler.address] if client else [])])


def saved_params(path) -> dict:
    return daskclust.load(path).get_params()


@pytest.mark.parametrize("algorithm", list(CASES))
def test_every_algorithm_and_its_flags(store, tmp_path, client, algorithm):
    flags, expected = CASES[algorithm]
    extra = ["--validation", "V"] if algorithm == "greedy-gmm" else []
    assert fit(store, "--algorithm", algorithm, *flags, *extra, "--output", tmp_path / "m.zarr", client=client) == 0
    model = daskclust.load(tmp_path / "m.zarr")
    assert type(model) is ALGORITHMS[algorithm]
    params = model.get_params()
    assert {name: params[name] for name in expected} == expected
    assert params["random_state"] == expected.get("random_state", 0)  # the command line's default seed


def test_sketch_store_as_data(store, tmp_path, client):
    """A sketch store is fitted without its raw rows, and the model takes its Q, Q_S and preconditioning."""
    sketch = Sketch(2, n_shared=1, random_state=4).fit_transform(zarr.open_group(store, mode="r")["X"],
                                                                 client=client, output=str(tmp_path / "s.zarr"))
    assert fit(tmp_path / "s.zarr", "--algorithm", "sketched-gmm", "--clusters", "3", "--max-iter", "3",
               "--output", tmp_path / "m.zarr", client=client) == 0
    model = daskclust.load(tmp_path / "m.zarr")
    assert (model.n_kept, model.n_shared, model.precondition) == (2, 1, "dct")
    assert model.sketch_transform_.n_kept == sketch.n_kept
    assert model.training_data_["source"]["url"] == str(tmp_path / "s.zarr")


def test_weights_from_zarr_as_in_python(store, tmp_path, client):
    group = zarr.open_group(store, mode="r")
    X, w = group["X"][:], group["w"][:]
    python = daskclust.KMeans(5, random_state=2, chunk_rows=100).fit(X, sample_weight=w, client=client)
    unweighted = daskclust.KMeans(5, random_state=2, chunk_rows=100).fit(X, client=client)
    zarr.create_array(str(tmp_path / "w.zarr"), data=w, chunks=(150,))  # a store of its own, other chunks
    for i, spec in enumerate(("w", tmp_path / "w.zarr")):
        out = tmp_path / f"m{i}.zarr"
        assert fit(store, "--clusters", "5", "--seed", "2", "--chunk-rows", "100", "--sample-weight", spec,
                   "--output", out, client=client) == 0
        model = daskclust.load(out)
        np.testing.assert_allclose(model.centres_, python.centres_, rtol=1e-10, atol=1e-10)
        assert model.training_data_["fingerprint"]["weighted"] is True
    assert not np.allclose(unweighted.centres_, python.centres_)


def test_weights_of_the_wrong_length_are_refused(store, tmp_path, capsys):
    zarr.create_array(str(tmp_path / "w.zarr"), data=np.ones(599), chunks=(100,))
    assert fit(store, "--clusters", "5", "--sample-weight", tmp_path / "w.zarr", "--output", tmp_path / "m.zarr") == 2
    assert "sample_weight must have shape (600,)" in capsys.readouterr().err
    assert not (tmp_path / "m.zarr").exists()


def write_toml(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_config_equals_flags_and_flags_override_it(store, tmp_path, client):
    config = write_toml(tmp_path / "fit.toml", f"""
algorithm = "gmm"
data = "{store}"
n_clusters = 4
n_truncated = 2
search = "estimated"
covariance_type = "diag"
max_iter = 3
tol = 0
random_state = 5
chunk_rows = 150
output = "{tmp_path / 'a.zarr'}"
""")
    assert fit("--config", config, client=client) == 0
    assert fit(store, "--algorithm", "gmm", "--clusters", "4", "--n-truncated", "2", "--search", "estimated",
               "--covariance-type", "diag", "--max-iter", "3", "--tol", "0", "--seed", "5", "--chunk-rows", "150",
               "--output", tmp_path / "b.zarr", client=client) == 0
    a, b = daskclust.load(tmp_path / "a.zarr"), daskclust.load(tmp_path / "b.zarr")
    assert a.get_params() == b.get_params()
    np.testing.assert_allclose(a.means_, b.means_, rtol=1e-12)
    assert fit("--config", config, "--max-iter", "1", "--n-truncated", "none", "--output", tmp_path / "c.zarr",
               client=client) == 0
    c = daskclust.load(tmp_path / "c.zarr").get_params()
    assert (c["max_iter"], c["n_truncated"], c["n_components"]) == (1, None, 4)


def test_the_example_config(tmp_path, client, monkeypatch):
    """examples/fit.toml, run where its relative paths lead (the BIRCH data written first)."""
    monkeypatch.chdir(tmp_path)
    assert main(["make-data", "birch", "--output", "birch.zarr", "--clusters", "16", "--points-per-cluster", "20",
                 "--quiet"]) == 0
    assert fit("--config", EXAMPLE, "--clusters", "16", client=client) == 0
    model = daskclust.load(tmp_path / "model.zarr")
    assert type(model) is daskclust.GaussianMixture and model.n_components == 16


@pytest.mark.parametrize("text, message", [
    ("n_clusters = 4\nn_neighbours = 3\n", "unknown key n_neighbours; valid keys: algorithm, array, "),
    ("n_clusters = 4\nbogus = 1\nworse = 2\n", "unknown keys bogus, worse"),
    ("n_clusters = \"four\"\n", "n_clusters must be an integer, got 'four'"),
    ("n_clusters = 4.0\n", "n_clusters must be an integer, got 4.0"),
    ("n_clusters = 4\ntol = \"small\"\n", "tol must be a number, got 'small'"),
    ("n_clusters = 4\nsearch = \"everywhere\"\n", "search must be one of full, exhaustive, estimated, sampled"),
    ("n_clusters = 4\noverwrite = \"yes\"\n", "overwrite must be true or false"),
    ("n_clusters = 4\nn_truncated = 0\nalgorithm = \"gmm\"\n", "n_truncated must be >= 1, got 0"),
    ("n_clusters = [4]\n", "n_clusters must be an integer, got [4]"),
    ("n_clusters = 4\n[section]\nx = 1\n", "unknown key section"),
    ("n_clusters = \n", "is not valid TOML"),
])
def test_bad_config_is_refused_naming_the_key(store, tmp_path, capsys, text, message):
    config = write_toml(tmp_path / "bad.toml", text)
    assert fit(store, "--config", config, "--output", tmp_path / "m.zarr") == 2
    err = capsys.readouterr().err
    assert message in err and "bad.toml" in err
    assert not (tmp_path / "m.zarr").exists()


@pytest.mark.parametrize("args, message", [
    (["--n-truncated", "3"], "--n-truncated: kmeans (KMeans) has no parameter 'n_truncated'; it applies to gmm, "
                             "sketched-gmm, cell-gmm, greedy-gmm"),
    (["--algorithm", "sketched-gmm", "--init", "random"], "sketched-gmm (SketchedGaussianMixture) does not use "
                                                          "parameter 'init'"),
    (["--algorithm", "cell-gmm", "--coreset", "100"], "cell-gmm (CellGaussianMixture) does not use parameter"),
    (["--refine-iter", "2"], "--refine-iter refines a coreset's model: it needs --coreset"),
    (["--algorithm", "gmm", "--n-components", "3"], "--n-clusters/--clusters and --n-components both give"),
    (["--n-neighbors", "0"], "--n-neighbors: n_neighbors must be >= 1, got 0"),
    (["--algorithm", "cell-gmm", "--covariance-type", "spherical"], "covariance_type='spherical' is not supported"),
    (["--validation", "V"], "--validation is for greedy-gmm"),
    (["--sketch-output", "s.zarr"], "--sketch-output is for sketched-gmm"),
])
def test_a_flag_the_algorithm_does_not_take_is_an_error(store, tmp_path, capsys, args, message):
    assert fit(store, "--clusters", "4", *args, "--output", tmp_path / "m.zarr") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.zarr").exists()


def test_resume_refuses_new_parameters(tmp_path, capsys):
    assert fit("--resume", tmp_path / "run", "--n-neighbors", "3", "--output", tmp_path / "m.zarr") == 2
    assert "--n-neighbors: --resume continues the checkpoint's fit" in capsys.readouterr().err


def test_bad_flag_values_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["fit", "d.zarr", "--n-truncated", "two"])
    assert stop.value.code == 2
    assert "--n-truncated: expected an integer or none, got 'two'" in capsys.readouterr().err


def test_every_parameter_has_an_option_with_help():
    options = estimator_options()
    for name, cls in ALGORITHMS.items():
        for param in cls._param_names():
            if param in options:
                assert options[param].help and ("Default:" in options[param].help or param == COUNT), param
    assert options[COUNT].help.endswith("Required (greedy-gmm: default 10).")  # fit refuses the others without it
    assert options["n_truncated"].flags == ("--n-truncated",) and options["n_clusters"].flags[1] == "--clusters"


def test_info_text_and_json(store, tmp_path, client, capsys):
    assert fit(store, "--clusters", "5", "--chunk-rows", "150", "--coreset", "200", "--refine-iter", "2",
               "--sample-weight", "w", "--output", tmp_path / "m.zarr", client=client) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path / "m.zarr"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    X, w = zarr.open_group(store, mode="r")["X"], zarr.open_group(store, mode="r")["w"]
    data = info["training_data"]
    content = data["fingerprint"].pop("content")
    assert len(content) == 64 and int(content, 16) >= 0  # SHA-256 of the chunks' digests
    assert data["fingerprint"] == as_chunked_data(X, w, chunk_rows=150).fingerprint()
    assert data["source"] == {"url": store, "array": "X"} and data["weights"] == {"url": store, "array": "w"}
    assert set(info["versions"]) >= {"python", *MODEL_PACKAGES}
    assert info["versions"]["numpy"] == np.__version__ and info["versions"]["daskclust"] == daskclust.__version__
    model = daskclust.load(tmp_path / "m.zarr")
    history = info["history"]
    assert [phase["data"] for phase in history["phases"]] == ["coreset", "full"]
    assert history["iterations"] == len(model.history_) == sum(p["iterations"] for p in history["phases"])
    assert history["n_distances"] == sum(row["n_distances"] for row in model.history_)
    full = history["phases"][1]
    assert full["last_free_energy"] == model.history_[-1]["free_energy"] == info["free_energy"]
    assert history["phases"][0]["first_quantization_error"] == model.history_[0]["quantization_error"]
    assert info["params"]["coreset"] == 200 and info["coreset"]["size"] == 200
    assert info["sizes"]["arrays"]["centres"] == {"shape": [5, 4], "dtype": "float64", "bytes": 160}
    assert main(["info", str(tmp_path / "m.zarr")]) == 0
    text = capsys.readouterr().out
    assert f"numpy: {np.__version__}" in text and "data: coreset" in text and "data: full" in text
    assert "bounds: [0, 150, 300, 450, 600]" in text and "not recorded" not in text


def test_info_of_a_store_written_before_the_records(store, tmp_path, client, capsys):
    """A model store without the training data and versions attributes loads; info says "not recorded"."""
    assert fit(store, "--clusters", "3", "--max-iter", "2", "--output", tmp_path / "m.zarr", client=client) == 0
    meta_path = tmp_path / "m.zarr" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    for name in ("daskclust_data", "daskclust_versions"):
        del meta["attributes"][name]
    meta_path.write_text(json.dumps(meta))
    assert daskclust.load(tmp_path / "m.zarr").training_data_ is None
    capsys.readouterr()
    assert main(["info", str(tmp_path / "m.zarr")]) == 0
    text = capsys.readouterr().out
    assert "training_data: not recorded" in text and "numpy: not recorded" in text
    assert f"daskclust: {daskclust.__version__}" in text


def test_resume_reopens_the_recorded_weights(store, tmp_path, client):
    """A weighted fit's checkpoint records where its weights are: --resume needs neither DATA nor --sample-weight,
    may change --max-iter, and ends where the uninterrupted fit did."""
    base = ["--clusters", "5", "--init", "random", "--n-init", "1", "--tol", "0", "--sample-weight", "w", "--chunk-rows", "100"]
    assert fit(store, *base, "--max-iter", "6", "--checkpoint", tmp_path / "run", "--checkpoint-every", "2",
               "--output", tmp_path / "a.zarr", client=client) == 0
    oldest = sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("ckpt-"))[0]
    assert fit("--resume", tmp_path / "run" / oldest, "--max-iter", "6", "--output", tmp_path / "b.zarr",
               client=client) == 0
    a, b = daskclust.load(tmp_path / "a.zarr"), daskclust.load(tmp_path / "b.zarr")
    np.testing.assert_allclose(a.centres_, b.centres_, rtol=1e-10, atol=1e-10)
    assert b.training_data_["weights"] == {"url": store, "array": "w"}


def test_sketch_output_is_replaced_only_with_overwrite(store, tmp_path, client, capsys):
    args = [store, "--algorithm", "sketched-gmm", "--clusters", "3", "--n-kept", "2", "--max-iter", "2",
            "--sketch-output", tmp_path / "s.zarr"]
    assert fit(*args, "--output", tmp_path / "a.zarr", client=client) == 0
    assert fit(tmp_path / "s.zarr", "--algorithm", "sketched-gmm", "--clusters", "3", "--max-iter", "2",
               "--output", tmp_path / "b.zarr", client=client) == 0
    np.testing.assert_allclose(daskclust.load(tmp_path / "a.zarr").means_, daskclust.load(tmp_path / "b.zarr").means_,
                               rtol=1e-10, atol=1e-10)  # the same sketch, the same seed
    capsys.readouterr()
    assert fit(*args, "--output", tmp_path / "c.zarr", client=client) == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err and not (tmp_path / "c.zarr").exists()
    assert fit(*args, "--output", tmp_path / "c.zarr", "--overwrite", client=client) == 0


# ------------------------------------------------------------------ outputs, settings and errors of the commands
def group_store(path) -> str:
    """A zarr group at ``path`` holding X (300 x 3 blobs) and nothing else."""
    group = zarr.open_group(str(path), mode="w")
    group.create_array("X", data=blobs(300, 3, 3, seed=2)[0], chunks=(100, 3))
    return str(path)


def members(path) -> list[str]:
    return sorted(p.name for p in pathlib.Path(path).iterdir())


def test_no_output_is_written_inside_the_data_group(tmp_path, client, capsys):
    """An output inside DATA's group is refused (the group is the input, not only its array X), also when
    --resume reads the data the checkpoint records, and for --checkpoint, --sketch-output and report."""
    data = group_store(tmp_path / "d.zarr")
    before = members(data)
    assert fit(data, "--clusters", "3", "--tol", "0", "--max-iter", "3", "--checkpoint", tmp_path / "run",
               "--checkpoint-every", "1", "--output", tmp_path / "m.zarr", client=client) == 0
    capsys.readouterr()
    refused = [
        ["fit", "--resume", tmp_path / "run", "--output", f"{data}/m.zarr"],
        ["fit", data, "--clusters", "3", "--checkpoint", f"{data}/run", "--output", tmp_path / "m2.zarr"],
        ["fit", data, "--algorithm", "sketched-gmm", "--clusters", "3", "--n-kept", "2", "--sketch-output",
         f"{data}/s.zarr", "--output", tmp_path / "m3.zarr"],
        ["predict", tmp_path / "m.zarr", data, "--output", f"{data}/labels.zarr"],
        ["report", tmp_path / "m.zarr", "--data", data, "--output", f"{data}/r.html"],
    ]
    for args in refused:
        assert main([*map(str, args), "--quiet"]) == 2, args
        err = capsys.readouterr().err
        assert "overlaps the input" in err or "lies inside the input" in err, (args, err)
    assert members(data) == before
    model = daskclust.load(tmp_path / "m.zarr")
    with client.as_current(), pytest.raises(daskclust.errors.OutputRefusedError, match="overlaps the input"):
        model.predict(zarr.open_group(data)["X"], output=f"{data}/labels.zarr")  # the Python API alike
    assert members(data) == before


def test_quiet_in_the_config_file_silences_the_messages_as_the_flag_does(store, tmp_path, client, capsys):
    config = write_toml(tmp_path / "q.toml", "n_clusters = 3\nmax_iter = 2\nquiet = true\n")
    assert main(["fit", store, "--config", config, "--output", str(tmp_path / "m.zarr"), "--scheduler",
                 client.scheduler.address]) == 0
    assert capsys.readouterr() == ("", "")


def test_a_flag_overrides_the_files_number_of_clusters_by_either_name(store, tmp_path, client):
    config = write_toml(tmp_path / "c.toml", "n_clusters = 5\nalgorithm = \"gmm\"\nmax_iter = 2\n")
    assert fit(store, "--config", config, "--n-components", "3", "--output", tmp_path / "a.zarr", client=client) == 0
    assert saved_params(tmp_path / "a.zarr")["n_components"] == 3
    config = write_toml(tmp_path / "d.toml", "n_components = 5\nalgorithm = \"gmm\"\nmax_iter = 2\n")
    assert fit(store, "--config", config, "--clusters", "4", "--output", tmp_path / "b.zarr", client=client) == 0
    assert saved_params(tmp_path / "b.zarr")["n_components"] == 4


def test_an_unreadable_config_file_is_a_clear_error(store, tmp_path, capsys):
    (tmp_path / "latin1.toml").write_bytes("n_clusters = 4 # caf\xe9\n".encode("latin-1"))
    assert fit(store, "--config", tmp_path / "latin1.toml", "--output", tmp_path / "m.zarr") == 2
    assert "latin1.toml is not valid TOML" in capsys.readouterr().err
    assert fit(store, "--config", tmp_path, "--output", tmp_path / "m.zarr") == 2
    assert f"cannot read the config file {str(tmp_path)!r}: Is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["fit", "{store}", "--clusters", "3", "--checkpoint-every", "2", "--output", "{tmp}/m.zarr"],
     "--checkpoint-every sets how often --checkpoint writes: it needs --checkpoint"),
    (["fit", "--resume", "{tmp}/run", "--array", "X", "--output", "{tmp}/m.zarr"],
     "--array names an array of DATA: without DATA, --resume reads the checkpoint's data and array"),
    (["report", "{tmp}/m.zarr", "--sample", "100", "--output", "{tmp}/r.html"],
     "--sample is about the rows of --data: give --data"),
    (["report", "{tmp}/m.zarr", "--array", "X", "--output", "{tmp}/r.html"],
     "--array is about the rows of --data: give --data"),
])
def test_an_option_that_would_be_ignored_is_refused(store, tmp_path, capsys, args, message):
    assert main([a.format(store=store, tmp=tmp_path) for a in args]) == 2
    assert message in capsys.readouterr().err
    assert members(tmp_path) == []


def test_replacing_an_output_names_the_flag(store, tmp_path, client, capsys):
    data = str(tmp_path / "b.zarr")
    assert main(["make-data", "birch", "--clusters", "4", "--output", data, "--quiet"]) == 0
    assert main(["make-data", "birch", "--clusters", "4", "--output", data, "--quiet"]) == 2
    assert "a daskclust data set exists at" in (err := capsys.readouterr().err) and "pass --overwrite to" in err
    assert fit(data, "--clusters", "4", "--max-iter", "2", "--output", tmp_path / "m.zarr", client=client) == 0
    predict = ["predict", str(tmp_path / "m.zarr"), data, "--output", str(tmp_path / "l.zarr"), "--quiet",
               "--scheduler", client.scheduler.address]
    assert main(predict) == 0
    capsys.readouterr()
    assert main(predict) == 2
    assert "a daskclust labels exists at" in (err := capsys.readouterr().err) and "pass --overwrite to" in err


def test_the_report_makes_its_directory_but_never_writes_under_a_file(store, tmp_path, client, capsys):
    assert fit(store, "--clusters", "3", "--max-iter", "2", "--output", tmp_path / "m.zarr", client=client) == 0
    assert main(["report", str(tmp_path / "m.zarr"), "--output", str(tmp_path / "new" / "dir" / "r.html"),
                 "--quiet"]) == 0
    assert "r.html" in members(tmp_path / "new" / "dir")
    (tmp_path / "file").write_text("not a directory")
    assert main(["report", str(tmp_path / "m.zarr"), "--output", str(tmp_path / "file" / "r.html")]) == 2
    assert f"{tmp_path / 'file'} is a file, not a directory" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "not a directory"


def test_stream_learns_from_the_chunks_of_data_as_partial_fit_does(store, tmp_path, capsys):
    """--stream EPOCHS: partial_fit on each 100-row chunk of X in turn, with the weights, twice."""
    assert main(["fit", store, "--algorithm", "gmm", "--n-components", "3", "--covariance-type", "diag",
                 "--sample-weight", "w", "--stream", "2", "--output", str(tmp_path / "m.zarr")]) == 0
    assert capsys.readouterr().out.count("steps, mean free energy of the chunks before their step") == 2
    model = daskclust.load(tmp_path / "m.zarr")
    group = zarr.open_group(store, mode="r")
    X, w = group["X"][:], group["w"][:]
    python = daskclust.GaussianMixture(3, covariance_type="diag", random_state=0)
    for _ in range(2):
        for start in range(0, 600, 100):
            python.partial_fit(X[start:start + 100], sample_weight=w[start:start + 100])
    assert [row["data"] for row in model.history_] == ["stream"] * 12
    np.testing.assert_allclose(model.means_, python.means_, rtol=1e-12)
    np.testing.assert_allclose(model.covariances_, python.covariances_, rtol=1e-12)


@pytest.mark.parametrize("args, message", [
    (["--algorithm", "cell-gmm"], "CellGaussianMixture does not go with"),
    (["--checkpoint", "c"], "--checkpoint does not go with"),
])
def test_stream_refuses_what_partial_fit_does_not_do(store, tmp_path, capsys, args, message):
    assert fit(store, "--clusters", "4", "--stream", "1", *args, "--output", tmp_path / "m.zarr") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.zarr").exists()
