"""The reuse suite at a tiny size (the suite itself runs with ``daskclust bench --suite reuse``)."""

from __future__ import annotations

import pytest

from daskclust.bench import reuse


@pytest.mark.slow
def test_the_suite_times_both_arms_and_checks_their_models(client):
    table = reuse.run(client, grid=(9, 100), sweeps=[("tiny", (("kmeans", 8), ("diag", 4)), 3, 1, True)])
    assert [row[:4] for row in table.rows] == [["tiny", data, cluster, arm] for data in ("in memory", "zarr store")
                                               for cluster in ("2 workers, given", "none: embedded")
                                               for arm in ("each fit", "persist, once")]
    for given, placed in zip(table.rows[::2], table.rows[1::2]):
        assert placed[10] == "yes"  # the placed fits' models are the given fits', bit for bit
        assert placed[8] == (given[4] - placed[4]) / 2 and placed[9] == (given[5] - placed[5]) / 2
        assert 0 < placed[6] < placed[4] and given[7] > 0 and placed[7] > 0
        assert given[5] > 0 and placed[5] > 0
    assert "tiny sweep: KMeans C = 8, GaussianMixture diag C = 4; max_iter = 3" in table.notes[0]


def test_a_sweep_is_described_with_its_repeats():
    assert reuse.described((("kmeans", 2),) * 3 + (("diag", 4),)) == "3 x KMeans C = 2, GaussianMixture diag C = 4"
