"""The mixtures suite's per-iteration rows at a tiny size: one row per family and C, a ratio note per
family, and the predict rows' model at ``PREDICT_C`` (the suite itself runs with
``daskclust bench --suite mixtures``)."""

from __future__ import annotations

from daskclust.bench import mixtures


def test_scaling_rows_cover_every_c_and_family(client, monkeypatch):
    monkeypatch.setattr(mixtures, "SCALING_C", (16, 64))
    monkeypatch.setattr(mixtures, "PREDICT_C", 64)
    monkeypatch.setattr(mixtures, "SCALING_ROWS", 1024)
    monkeypatch.setattr(mixtures, "SCALING_ITERATIONS", 2)
    monkeypatch.setattr(mixtures, "FAMILIES", ("kmeans", "spherical"))
    rows, notes, models = mixtures.scaling_rows(client, 0)
    assert [(row[1], row[2]) for row in rows] == [("kmeans", 16), ("spherical", 16), ("kmeans", 64),
                                                  ("spherical", 64)]
    assert all(row[0] == "BIRCH N=1,024" and row[3] > 0 for row in rows)
    assert len(notes) == 2 and all("at C = 16, 64; max / min" in note for note in notes)
    model, X = models["predict"]
    assert (model.n_components, model.covariance_type, len(X)) == (64, "spherical", 1024)
