"""The realdata-mixtures suite at a tiny size: its table, the column of the k-means++ seeding, the
diagnosis of a miss, and its journal (the suite itself runs with ``daskclust bench --suite realdata-mixtures``)."""

from __future__ import annotations

import numpy as np
import pytest

from daskclust.bench import realmixtures
from daskclust.bench.journal import Journal

from conftest import blobs


def tiny_set(root):
    X, centres = blobs(400, 3, 4, seed=2)
    labels = ((X[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)  # the blob of each row: 4 classes
    (root / "uci_tiny").mkdir()
    np.save(root / "uci_tiny" / "X.npy", X.astype(np.float32))
    np.save(root / "uci_tiny" / "labels.npy", labels.astype(np.int32))


def test_the_suite_writes_its_table_and_diagnoses_misses(client, tmp_path, monkeypatch):
    tiny_set(tmp_path)
    monkeypatch.setattr(realmixtures, "TARGET", -1.0)  # every row "misses": the diagnosis runs
    table = realmixtures.run(client, root=tmp_path, seeds=(0, 1), families=("spherical",), verbose=False,
                             journal=None)
    assert [(row[0], row[4], row[-1]) for row in table.rows] == [("uci_tiny", 4, "MISS"), ("uci_tiny", 20, "MISS")]
    for row in table.rows:  # C = the classes, then min(10 x classes, N // 20)
        set_name, n_train, n_test, D, C, family, sk, ours, gap, gap_other = row[:10]
        assert (n_train, n_test, D, family) == (320, 80, 3, "spherical")
        assert np.isfinite([sk, ours, gap, gap_other]).all()
    prose = " ".join(table.prose)
    assert "Seeded by k-means++ instead of the default k-means||" in prose
    assert "uci_tiny C = 4 spherical" in prose and "from scikit-learn's initial parameters" in prose


def test_a_second_run_of_the_same_code_takes_its_rows_from_the_journal(client, tmp_path, monkeypatch):
    tiny_set(tmp_path)
    journal = tmp_path / "journal" / "realdata-mixtures.jsonl"
    first = realmixtures.run(client, root=tmp_path, seeds=(0,), families=("diag",), verbose=False, journal=journal)
    assert len(journal.read_text().splitlines()) == len(first.rows) == 2

    def no_fit(*args, **kwargs):
        raise AssertionError("a journalled row was measured again")

    monkeypatch.setattr(realmixtures, "measure", no_fit)
    again = realmixtures.run(client, root=tmp_path, seeds=(0,), families=("diag",), verbose=False, journal=journal)
    assert again.rows == first.rows and "2 of 2 rows were measured by an earlier" in again.notes[-1]
    with pytest.raises(AssertionError, match="measured again"):  # other settings: nothing reused
        realmixtures.run(client, root=tmp_path, seeds=(1,), families=("diag",), verbose=False, journal=journal)


def test_the_journal_refuses_rows_of_other_code(tmp_path):
    path = tmp_path / "j.jsonl"
    Journal(path, {"seeds": [0]}, fingerprint="a").add(("set", 4, "diag"), {"x": 1})
    with open(path, "a") as fh:
        fh.write('{"fingerprint": "a", "settings"')  # a line cut short by an interruption
    journal = Journal(path, {"seeds": [0]}, fingerprint="a")
    assert journal.get(("set", 4, "diag")) == {"x": 1}
    journal.add(("set", 40, "diag"), {"x": 2})
    assert Journal(path, {"seeds": [0]}, fingerprint="a").rows == {("set", 4, "diag"): {"x": 1},
                                                                   ("set", 40, "diag"): {"x": 2}}
    assert Journal(path, {"seeds": [0]}, fingerprint="b").get(("set", 4, "diag")) is None
    assert Journal(path, {"seeds": [1]}, fingerprint="a").get(("set", 4, "diag")) is None
