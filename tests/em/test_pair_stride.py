"""Which rows record the estimated search's pairs outside G_c: fewer of them where clusters have many."""

import numpy as np
import pytest

from daskclust.search import SearchConfig, make_search
from daskclust.search.strategies import EstimatedSearch

C = 40
ROWS = EstimatedSearch.PAIR_ROWS * C  # N at which each cluster has PAIR_ROWS rows


@pytest.mark.parametrize(("n_rows", "stride"), [(0, 1), (2 * ROWS - 1, 1), (2 * ROWS, 2), (5 * ROWS + 3, 5),
                                                (16 * ROWS, 16), (10**9, 16)])
def test_euclidean_families_record_from_every_kth_row_by_rows_per_cluster(n_rows, stride):
    search = make_search("estimated", SearchConfig(C, 1, 5, 1, metric=True, n_rows=n_rows))
    search.start(np.random.default_rng(0).normal(size=(C, 2)), 1.0)
    assert search.pair_stride() == stride
    for updates in range(3):
        search.updates[:] = updates
        payload = search.payload()
        assert (payload.pair_stride, payload.pair_phase) == (stride, updates % stride)


@pytest.mark.parametrize("n_rows", [0, 10**9])
def test_other_families_record_from_every_sixteenth_row(n_rows):
    search = make_search("estimated", SearchConfig(C, 3, 5, 1, metric=False, n_rows=n_rows))
    search.start(np.random.default_rng(0).normal(size=(C, 2)), 1.0)
    assert search.payload().pair_stride == EstimatedSearch.PAIR_STRIDE == 16


@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
def test_fits_give_the_search_their_rows(client, monkeypatch, kind):
    """A fit's estimated searches (a mixture's k-means start's too) stride by the data's rows per cluster."""
    from daskclust import GaussianMixture, KMeans

    strides = []
    payload = EstimatedSearch.payload

    def spy(self):
        strides.append((self.config.metric, self.pair_stride()))
        return payload(self)

    monkeypatch.setattr(EstimatedSearch, "payload", spy)
    n_clusters = 4
    X = np.random.default_rng(0).normal(size=(16 * EstimatedSearch.PAIR_ROWS * n_clusters, 2))
    X[:, 0] += 10 * (np.arange(len(X)) % n_clusters)
    if kind == "kmeans":
        KMeans(n_clusters, random_state=0, max_iter=3).fit(X, client=client)
    else:
        GaussianMixture(n_clusters, random_state=0, max_iter=3, n_truncated=2).fit(X, client=client)
    assert (True, 16) in strides  # KMeans, or the mixture's k-means start
    assert set(strides) <= {(True, 16), (False, 16)}
