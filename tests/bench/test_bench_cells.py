"""The `cells` bench suite's data generator and its table / plot code (the fits themselves run in `daskclust bench`)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskclust.bench import cells


@pytest.mark.parametrize("d, k", [(2, 10), (5, 10), (10, 10), (2, 50)])
def test_mixture_is_c_separated_with_covariances_in_range(d, k):
    weights, means, covariances = cells.separated_mixture(d, k)
    assert weights.shape == (k,) and np.isclose(weights.sum(), 1.0)
    assert means.shape == (k, d) and covariances.shape == (k, d, d)
    eig = np.linalg.eigvalsh(covariances)
    assert eig.min() >= cells.EIGENVALUES[0] - 1e-12 and eig.max() <= cells.EIGENVALUES[1] + 1e-12
    assert cells.separation_of(means, covariances) >= cells.SEPARATION
    # packed, not spread out: the closest pair is near the bound
    assert cells.separation_of(means, covariances) < 1.5 * cells.SEPARATION
    again = cells.separated_mixture(d, k)
    assert all(np.array_equal(a, b) for a, b in zip(again, (weights, means, covariances)))


def test_zarr_training_data_equals_the_in_memory_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("DASKCLUST_BENCH_DIR", str(tmp_path))
    monkeypatch.setattr(cells, "ZARR_FROM", 1000)
    mixture = cells.separated_mixture(2, 10)
    path = cells.training_data(mixture, 5000)
    assert isinstance(path, str) and path.startswith(str(tmp_path))
    stored = zarr.open_array(path, mode="r")
    assert stored.dtype == np.float64 and stored.shape == (5000, 2)
    assert np.array_equal(stored[:], cells.in_memory(mixture, 5000))
    assert cells.training_data(mixture, 5000) == path  # generated once, then reused
    small = cells.training_data(mixture, 500)
    assert isinstance(small, np.ndarray) and small.shape == (500, 2)


def test_true_log_likelihood_of_one_component():
    from scipy.stats import multivariate_normal

    mixture = cells.separated_mixture(2, 10)
    one = (np.ones(1), mixture[1][:1], mixture[2][:1])
    X = cells.draw(one, 200, np.random.default_rng(0))
    expected = multivariate_normal(mixture[1][0], mixture[2][0]).logpdf(X).mean()
    assert np.isclose(cells.true_log_likelihood(one, X), expected)


def _fit(seconds, iterations, em, ll, *, cells_=None, extrapolated=False):
    out = {"seconds": seconds, "em_seconds": seconds / 2, "iterations": iterations, "converged": True, "em_evaluations": em,
           "evaluations": em + 1000, "ll": ll, "bytes_read": 8 * 2 * 10_000 * (iterations + 2),
           "extrapolated": extrapolated, "rounds": None, "cells": None, "proposals": 0, "dropped": 0,
           "min_weight": 0.1}
    if cells_ is not None:
        out.update(rounds=3, cells=cells_, leaves=2 * cells_, proposals=3 * cells_ * 5)
    if extrapolated:
        out.update(probe_seconds=1.5, iteration_s=0.5)
    return out


def _case(n, gap=0.001, extrapolated=False, d=2, k=10):
    exact_ll = -4.4
    return {"n": n, "d": d, "k": k, "stream": n >= 100_000, "seeding": {"seconds": 0.1, "evaluations": 10},
            "true_ll": -4.41,
            "fits": {"exact EM": _fit(n / 1e4, 4, 40 * n, exact_ll, extrapolated=extrapolated),
                     "cells (defaults)": _fit(1.0, 30, 5000, exact_ll * (1 + gap), cells_=500),
                     "cells, exact E-step": _fit(1.2, 30, 9000, exact_ll * (1 + 3 * gap), cells_=500)}}


def test_table_prose_and_plot_come_from_the_values(tmp_path):
    series = [_case(10_000), _case(100_000), _case(1_000_000, extrapolated=True)]
    shapes = [_case(100_000, gap=0.01, d=5)]
    sk = {"n": 10**6, "d": 2, "k": 10, "seeding": {"seconds": 0.2}, "true_ll": -4.41,
          "ours": _fit(1.0, 30, 5000, -4.40, cells_=500),
          "sklearn": {"seconds": 25.0, "iterations": 9, "converged": True, "ll": -4.401, "kmeans_seconds": 1.25,
                      "dropped": 0, "min_weight": 0.1}}
    assert cells.speedups(series[1], "cells (defaults)")["time"] == pytest.approx(10.0)
    assert cells.speedups(series[2], "cells (defaults)")["gap"] is None  # no converged exact EM to compare with
    rows = [row for case in series for row in cells.case_rows("N series", case)]
    assert len(rows) == 9 and all(len(row) == 20 for row in rows)
    assert "(extrapolated)" in rows[6][4] and rows[7][-2] == "n/a"
    prose = " ".join(cells.verdicts(series, shapes, sk))
    assert "25.0x faster" in prose and "met" in prose and "1.25 s" in prose
    assert "missed at N = 100,000 d = 5" in prose  # 1 % and 3 % gaps miss the 0.5 % tolerance
    written = cells.plot(series, tmp_path / "speedup.png")
    assert written is not None and written.stat().st_size > 10_000
    notes = " ".join(cells.notes(series, shapes, written))
    assert "EXTRAPOLATED" in notes and "passes" in notes and f"plot: docs/{written.name}" in notes
