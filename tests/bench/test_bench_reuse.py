"""The reuse suite at a tiny size (the suite itself runs with ``daskclust bench --suite reuse``)."""

from __future__ import annotations

import pytest

from daskclust.bench import reuse

from conftest import birch


@pytest.mark.slow
def test_the_suite_times_both_arms_and_checks_their_models(client):
    X = birch(9, points=100, seed=1)[0]
    table = reuse.run(client, X, sweep=(("kmeans", 8), ("diag", 4)), repeats=1, max_iter=3)
    assert [row[:3] for row in table.rows] == [[data, cluster, arm] for data in ("in memory", "zarr store")
                                               for cluster in ("2 workers, given", "none: embedded")
                                               for arm in ("each fit", "persist, once")]
    for given, placed in zip(table.rows[::2], table.rows[1::2]):
        assert placed[7] == "yes"  # the placed fits' models are the given fits', bit for bit
        assert placed[6] == (given[3] - placed[3]) / 2
        assert 0 < placed[4] < placed[3] and given[5] > 0 and placed[5] > 0
    assert "KMeans C = 8; GaussianMixture diag C = 4; max_iter = 3" in table.notes[0]
