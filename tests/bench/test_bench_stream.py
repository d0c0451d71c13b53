"""The stream suite at a tiny size (the suite itself runs with ``daskclust bench --suite stream``)."""

from __future__ import annotations

import numpy as np

from daskclust.bench import stream

from reference import mixture_data


def test_the_suite_compares_streams_with_batch_fits(client):
    X = mixture_data(seed=3, n=3000, D=3, C=4)
    table = stream.run(client, data=[("tiny", 4, X[:2500], X[2500:])], seeds=(0,), estimators=("kmeans", "diag"))
    assert [row[:5] for row in table.rows] == [["tiny", 2500, 3, 4, "kmeans"], ["tiny", 2500, 3, 4, "diag"]]
    for row in table.rows:
        batch, one, two, gap = row[5:9]
        assert np.isclose(gap, 100 * (two - batch) / abs(batch))
        assert row[9] == ("met" if gap >= -100 * stream.TARGET else "missed")
        assert (row[10] == "—") == (row[4] != "kmeans")  # the peer: MiniBatchKMeans for KMeans only
        assert row[11] > 0 and row[12] > 0
    assert table.prose[0].startswith(f"{sum(row[9] == 'met' for row in table.rows)} of 2 rows meet the target")
    assert "KMeans' stream against MiniBatchKMeans.partial_fit" in table.prose[0]
