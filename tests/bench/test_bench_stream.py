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
        assert row[9] == "—"  # one seed: no standard error
        assert row[10] == ("met" if gap >= -100 * stream.TARGET else "missed")
        assert (row[11] == "—") == (row[4] != "kmeans")  # the peer: MiniBatchKMeans for KMeans only
        assert row[12] > 0 and row[13] > 0
    assert table.prose[0].startswith(f"{sum(row[10] == 'met' for row in table.rows)} of 2 rows meet the target")
    assert "KMeans' stream against MiniBatchKMeans.partial_fit" in table.prose[0]


def test_the_gap_error_is_the_standard_error_of_the_paired_gaps():
    stream_figures, batch_figures = np.array([-9.0, -11.0, -10.5]), np.array([-10.0, -10.0, -11.0])
    gaps = stream_figures - batch_figures  # 1, -1, 0.5: sample std 1.0408
    expected = 100 * np.sqrt(((gaps - gaps.mean()) ** 2).sum() / 2) / np.sqrt(3) / (31 / 3)
    assert np.isclose(stream.paired_error(stream_figures, batch_figures), expected)
    assert stream.paired_error(stream_figures[:1], batch_figures[:1]) == "—"
