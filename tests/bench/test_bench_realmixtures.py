"""The realdata-mixtures suite at a tiny size: its table, the column of the k-means|| seeding, and the
diagnosis of a miss (the suite itself runs with ``daskclust bench --suite realdata-mixtures``)."""

from __future__ import annotations

import numpy as np

from daskclust.bench import realmixtures

from conftest import blobs


def test_the_suite_writes_its_table_and_diagnoses_misses(client, tmp_path, monkeypatch):
    X, centres = blobs(400, 3, 4, seed=2)
    labels = ((X[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)  # the blob of each row: 4 classes
    (tmp_path / "uci_tiny").mkdir()
    np.save(tmp_path / "uci_tiny" / "X.npy", X.astype(np.float32))
    np.save(tmp_path / "uci_tiny" / "labels.npy", labels.astype(np.int32))
    monkeypatch.setattr(realmixtures, "TARGET", -1.0)  # every row "misses": the diagnosis runs
    table = realmixtures.run(client, root=tmp_path, seeds=(0, 1), families=("spherical",), verbose=False)
    assert [(row[0], row[4], row[-1]) for row in table.rows] == [("uci_tiny", 4, "MISS"), ("uci_tiny", 20, "MISS")]
    for row in table.rows:  # C = the classes, then min(10 x classes, N // 20)
        set_name, n_train, n_test, D, C, family, sk, ours, gap, gap_previous = row[:10]
        assert (n_train, n_test, D, family) == (320, 80, 3, "spherical")
        assert np.isfinite([sk, ours, gap, gap_previous]).all()
    prose = " ".join(table.prose)
    assert "Seeded by k-means|| (KMeans's default) instead of k-means++" in prose
    assert "uci_tiny C = 4 spherical" in prose and "from scikit-learn's initial parameters" in prose
