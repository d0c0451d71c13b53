"""Models saved by an earlier daskclust still load: ``saved/`` holds model files written at commit
bda5d54 (before the persistence package, issue 24) -- a KMeans, a tied GaussianMixture and a
SketchedGaussianMixture fitted on the rows below -- with the labels that version predicted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import daskclust

SAVED = Path(__file__).parent / "saved"
NAMES = ("kmeans", "gmm_tied", "sketched")


def rows():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((2000, 6)) + rng.integers(0, 4, (2000, 1)) * 3)[:500]


@pytest.mark.parametrize("name", NAMES)
def test_a_model_saved_before_the_persistence_package_predicts_as_it_did(name):
    model = daskclust.load(SAVED / f"{name}.dcm")
    expected = np.load(SAVED / "labels.npz")[name]
    np.testing.assert_array_equal(model.predict(rows()), expected)
