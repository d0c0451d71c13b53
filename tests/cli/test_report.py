"""daskclust report: figures and page from a saved model (and data), its errors, the PCA view, the
cluster sizes saved with a model."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
import zarr

import daskclust
from daskclust.cli import main
from daskclust.data import as_chunked_data
from daskclust.persistence.model import load_model, save_model
from daskclust.report import FIGURES, pca_2d, report_paths, sample_rows

from conftest import birch, blobs

PNG = b"\x89PNG\r\n\x1a\n"


def write_zarr(path, X, rows):
    z = zarr.create_array(str(path), shape=X.shape, chunks=(rows, X.shape[1]), dtype=X.dtype)
    z[:] = X
    return str(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory, client):
    """Data stores of D = 2 and D = 5, and a KMeans and a GaussianMixture model saved for each."""
    root = tmp_path_factory.mktemp("report")
    out = {}
    for D, X in ((2, birch(9, points=60, seed=2)[0]), (5, blobs(600, 5, 6, seed=3)[0])):
        data = write_zarr(root / f"d{D}.zarr", X, 100)
        for kind, model in (("kmeans", daskclust.KMeans(6, random_state=0)),
                            ("gmm", daskclust.GaussianMixture(6, random_state=0))):
            model.fit(data, client=client)
            model.save(root / f"{kind}{D}.zarr")
            out[kind, D] = (str(root / f"{kind}{D}.zarr"), data)
    return out


def written(paths) -> list:
    return [p for p in paths.values() if p.exists()]


@pytest.mark.parametrize("with_data", [True, False])
@pytest.mark.parametrize("D", [2, 5])
@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
def test_the_report_command_writes_the_page_and_every_figure(stores, tmp_path, capsys, kind, D, with_data):
    model, data = stores[kind, D]
    output = tmp_path / "report.html"
    args = ["report", model, "--output", str(output)] + (["--data", data, "--sample", "250"] if with_data else [])
    assert main(args) == 0
    paths = report_paths(output)
    page = output.read_text()
    for name in FIGURES:
        assert paths[name].read_bytes()[:8] == PNG, name
        assert f'href="{paths[name].name}"' in page  # linked beside the page ...
    assert page.count('src="data:image/png;base64,') == len(FIGURES)  # ... and embedded: self-contained
    assert "final free energy per point" in page and "distance evaluations (EM)" in page
    assert ("250 rows sampled from" in page) == with_data
    assert str(output) in capsys.readouterr().out


def test_a_model_without_history_is_refused_and_nothing_is_written(stores, tmp_path, capsys):
    model, data = stores["kmeans", 2]
    stored = load_model(model)
    save_model(tmp_path / "bare.zarr", stored.__class__(stored.kind, stored.params, stored.arrays, stored.scalars, []))
    output = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "bare.zarr"), "--data", data, "--output", str(output)]) == 2
    assert "error: the KMeans model has no history (history_ is empty)" in capsys.readouterr().err
    assert written(report_paths(output)) == []


def test_data_of_another_width_are_refused_before_any_row_is_read(stores, tmp_path, capsys, monkeypatch):
    from daskclust.data.sources import BlockSource

    def no_reading(*args):
        raise AssertionError("rows were read")

    monkeypatch.setattr(BlockSource, "read", no_reading)
    model, _ = stores["gmm", 2]
    output = tmp_path / "r.html"
    assert main(["report", model, "--data", stores["gmm", 5][1], "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert "error: the data have 5 features, but the GaussianMixture model was fitted on 2 features" in err
    assert written(report_paths(output)) == []


def test_files_no_report_wrote_are_never_replaced_and_its_own_only_with_overwrite(stores, tmp_path, capsys):
    model, _ = stores["kmeans", 2]
    output = tmp_path / "r.html"
    assert main(["report", model, "--output", str(output)]) == 0
    before = output.read_bytes()
    assert main(["report", model, "--output", str(output)]) == 2
    assert "pass overwrite=True (--overwrite)" in capsys.readouterr().err
    assert main(["report", model, "--output", str(output), "--overwrite"]) == 0
    mine = report_paths(output)["centres"]
    mine.write_bytes(b"my picture")
    assert main(["report", model, "--output", str(output), "--overwrite"]) == 2
    assert "something exists there that no daskclust report wrote" in capsys.readouterr().err
    assert mine.read_bytes() == b"my picture" and output.read_bytes()[:100] == before[:100]
    assert main(["report", model, "--output", model + "/r.html"]) == 2  # never inside the model
    assert "lies inside the input" in capsys.readouterr().err


USER_FILES = {
    "mentions the generator": b'<!DOCTYPE html>\n<meta name="generator" content="daskclust report">\nmy notes',
    "quotes a mark in its body": b"<!DOCTYPE html>\n<html><body>\n"
                                 b'<meta name="daskclust-report" content="format=1 kind=page id=' + b"0" * 32 + b'">',
    "plain notes": b"notes on the daskclust report I ran yesterday\n" * 20,
}


@pytest.mark.parametrize("content", sorted(USER_FILES))
def test_a_users_page_that_mentions_daskclust_is_never_replaced(stores, tmp_path, capsys, content):
    """Ownership is the report's mark on the page's third line, not a substring anywhere."""
    model, _ = stores["kmeans", 2]
    output = tmp_path / "notes.html"
    output.write_bytes(USER_FILES[content])
    assert main(["report", model, "--output", str(output), "--overwrite"]) == 2
    assert "something exists there that no daskclust report wrote" in capsys.readouterr().err
    assert output.read_bytes() == USER_FILES[content]
    assert written(report_paths(output)) == [output]


def test_a_page_and_a_figure_only_replace_their_own_kind(stores, tmp_path, capsys):
    from daskclust.report.mark import marked_kind

    model, _ = stores["kmeans", 2]
    first, second = tmp_path / "a.html", tmp_path / "b.html"
    assert main(["report", model, "--output", str(first)]) == 0
    paths = report_paths(first)
    assert marked_kind(paths["html"]) == "page"
    assert {marked_kind(paths[name]) for name in paths if name != "html"} == {"figure"}
    figure = report_paths(second)["centres"]
    figure.write_bytes(paths["html"].read_bytes())  # a page where a figure goes
    assert main(["report", model, "--output", str(second), "--overwrite"]) == 2
    assert "no daskclust report wrote" in capsys.readouterr().err
    png = bytearray(paths["centres"].read_bytes())
    at = png.index(b"daskclust-report")
    png[at + 20] ^= 1  # the mark's text with a wrong CRC: not a mark
    figure.write_bytes(bytes(png))
    assert marked_kind(figure) is None
    assert main(["report", model, "--output", str(second), "--overwrite"]) == 2
    capsys.readouterr()


def test_a_model_saved_without_cluster_sizes_loads_and_reports_without_them(stores, tmp_path):
    model, data = stores["kmeans", 5]
    stored = load_model(model)
    arrays = {k: v for k, v in stored.arrays.items() if k != "cluster_sizes"}
    save_model(tmp_path / "old.zarr", stored.__class__(stored.kind, stored.params, arrays, stored.scalars,
                                                       stored.history))
    old = daskclust.load(tmp_path / "old.zarr")
    assert old.cluster_sizes_ is None
    old.save(tmp_path / "again.zarr")  # saving it again keeps it loadable
    output = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "again.zarr"), "--data", data, "--output", str(output)]) == 0
    paths = report_paths(output)
    assert not paths["sizes"].exists() and paths["centres"].exists()
    assert "Cluster sizes: not stored with this model" in output.read_text()


def test_cluster_sizes_are_the_rows_of_each_cluster_and_are_saved(client, tmp_path):
    X, _ = birch(9, points=40, seed=5)
    km = daskclust.KMeans(9, search="full", random_state=0).fit(X, client=client)
    np.testing.assert_array_equal(km.cluster_sizes_, np.bincount(km.labels_, minlength=9))
    km.save(tmp_path / "m.zarr")
    np.testing.assert_array_equal(daskclust.load(tmp_path / "m.zarr").cluster_sizes_, km.cluster_sizes_)
    gmm = daskclust.GaussianMixture(9, random_state=0).fit(X, sample_weight=np.full(len(X), 0.5), client=client)
    assert gmm.cluster_sizes_.shape == (9,) and np.isclose(gmm.cluster_sizes_.sum(), 0.5 * len(X))


def test_damaged_cluster_sizes_are_refused(stores, tmp_path):
    stored = load_model(stores["kmeans", 2][0])
    arrays = {**stored.arrays, "cluster_sizes": np.array([1.0, -2.0, 3.0, 4.0, 5.0, 6.0])}
    save_model(tmp_path / "bad.zarr", stored.__class__(stored.kind, stored.params, arrays, stored.scalars,
                                                       stored.history))
    with pytest.raises(daskclust.errors.ModelStoreError, match="cluster_sizes are not 6 finite non-negative"):
        daskclust.load(tmp_path / "bad.zarr")


def test_the_pca_view_is_numpys_svd_of_the_sample():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((500, 6)) @ rng.standard_normal((6, 6)) + 3.0
    view = pca_2d(X)
    centred = X - X.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    for k in range(2):  # the same axes up to sign, in order of variance
        np.testing.assert_allclose(abs(view.axes[:, k] @ vt[k]), 1.0, rtol=1e-10)
    np.testing.assert_allclose(np.abs(view(X)), np.abs(centred @ vt[:2].T), rtol=1e-8, atol=1e-10)
    share = s[:2] ** 2 / (s ** 2).sum()
    assert view.labels == tuple(f"PC{k + 1} ({100 * share[k]:.1f}% of the variance)" for k in range(2))
    assert view.axes[np.abs(view.axes).argmax(axis=0), [0, 1]].min() > 0  # a fixed orientation


def test_the_sample_is_drawn_chunk_by_chunk_without_repetition(tmp_path, monkeypatch):
    from daskclust.data.sources import BlockSource

    X = np.arange(2000 * 3, dtype=np.float64).reshape(2000, 3)
    data = as_chunked_data(write_zarr(tmp_path / "x.zarr", X, 128), chunk_rows=128)
    spans = []
    read = BlockSource.read
    monkeypatch.setattr(BlockSource, "read", lambda self, a, b: spans.append(b - a) or read(self, a, b))
    rows = sample_rows(data, 300, seed=1)
    assert rows.shape == (300, 3) and len(np.unique(rows[:, 0])) == 300
    np.testing.assert_array_equal(rows, X[(rows[:, 0] // 3).astype(int)])  # real rows, in source order
    assert max(spans) <= 128 and np.all(np.diff(rows[:, 0]) > 0)
    np.testing.assert_array_equal(sample_rows(data, 10**6)[:, 0], X[:, 0])  # at most every row, once
    with pytest.raises(daskclust.errors.InvalidParameterError, match="positive integer"):
        sample_rows(data, 0)


def test_the_html_lists_the_summary(stores, tmp_path):
    from daskclust.report import write_report

    model = daskclust.load(stores["gmm", 5][0])
    paths = write_report(model, tmp_path / "g.html")
    page = paths["html"].read_text()
    rows = {k: html.unescape(v) for k, v in re.findall(r"<tr><th>([^<]+)</th><td>([^<]+)</td></tr>", page)}
    assert rows["model"] == "GaussianMixture: 6 clusters, 5 features"
    assert float(rows["final free energy per point"]) == pytest.approx(model.history_[-1]["free_energy"], rel=1e-5)
    assert rows["covariance_type"] == '"full"' and rows["n_components"] == "6"
    assert "none (the centres alone" in rows["data shown"]


def test_a_coreset_fit_is_reported_phase_by_phase(client, tmp_path):
    from daskclust.report import write_report

    X = blobs(800, 3, 4, seed=4)[0]
    model = daskclust.KMeans(4, coreset=200, refine_iter=2, random_state=0).fit(X, client=client)
    assert {row["data"] for row in model.history_} == {"coreset", "full"}
    paths = write_report(model, tmp_path / "c.html", data=X, sample=300)
    page = paths["html"].read_text()
    assert "<th>coreset</th><td>200 rows built in" in page and "300 rows sampled from the ndarray given" in page
    assert all(paths[name].read_bytes()[:8] == PNG for name in FIGURES)


def test_a_streamed_model_is_reported_with_its_distances_left_blank(tmp_path):
    """partial_fit's steps do not count distances (-1): the distances figure draws nothing for them
    and says so; the convergence figure draws every step."""
    from daskclust.report.figures import convergence_figure, distances_figure

    X, _ = blobs(3000, 2, 4, seed=3)
    model = daskclust.GaussianMixture(4, covariance_type="diag", random_state=0)
    for start in range(0, 3000, 500):
        model.partial_fit(X[start:start + 500])
    figure = distances_figure(model.history_)
    drawn = [line.get_ydata() for axes in figure.axes for line in axes.get_lines()]
    assert drawn and all(np.isnan(np.asarray(y, dtype=float)).all() for y in drawn)
    assert "not counted" in figure.texts[0].get_text()
    steps = convergence_figure(model.history_).axes[0].get_lines()[0].get_ydata()
    np.testing.assert_array_equal(steps, [row["free_energy"] for row in model.history_])
    model.save(tmp_path / "m.zarr")
    assert main(["report", str(tmp_path / "m.zarr"), "--output", str(tmp_path / "r.html")]) == 0


@pytest.mark.parametrize("qe, scale", [([8.0e4, 7.9e4, 7.85e4], "linear"), ([4.0e6, 2.0e5, 3.5e5], "log"),
                                       ([5.0, 0.0, 0.0], "linear")])
def test_a_log_axis_only_for_a_wide_positive_series_and_labelled_in_plain_text(qe, scale):
    """The quantization error goes on a log axis when it is positive and spans more than LOG_SPAN, and
    its labels are plain text: matplotlib's mathtext labels cost the first report 0.3-0.4 s."""
    from daskclust.report.figures import LOG_SPAN, convergence_figure

    history = [{"free_energy": -1.0 - i, "quantization_error": q, "n_distances": 10, "distance_speedup": 2.0,
                "seconds": 0.1} for i, q in enumerate(qe)]
    assert (max(qe) > LOG_SPAN * min(qe) > 0) == (scale == "log")
    figure = convergence_figure(history)
    axes = figure.axes[1]
    assert axes.get_yscale() == scale
    figure.canvas.draw()
    labels = [label.get_text() for label in axes.get_yticklabels() if label.get_text()]
    assert labels and not any("$" in label for label in labels)
