"""``file://`` URLs, the local stand-in for object storage, go through fsspec like any URL: stores are
written into directories that do not exist yet, as on an object store, which has none."""

from __future__ import annotations

import numpy as np
import pytest

import daskclust
from daskclust.datasets import make_blobs


def test_data_labels_and_model_at_file_urls_in_new_directories(client, tmp_path):
    base = f"file://{tmp_path}/bucket"
    make_blobs(f"{base}/data/blobs.zarr", 2000, 3, 4, seed=1)
    model = daskclust.KMeans(4, random_state=0).fit(f"{base}/data/blobs.zarr", client=client)
    labels = model.predict(f"{base}/data/blobs.zarr", output=f"{base}/out/labels.zarr")
    np.testing.assert_array_equal(labels[:], model.predict(f"{base}/data/blobs.zarr").compute())
    model.save(f"{base}/models/kmeans.zarr")
    again = daskclust.load(f"{base}/models/kmeans.zarr")
    np.testing.assert_array_equal(again.cluster_centers_, model.cluster_centers_)
    assert sorted(p.name for p in (tmp_path / "bucket").iterdir()) == ["data", "models", "out"]


def test_a_checkpoint_at_a_url_is_refused_before_any_work(client, tmp_path, monkeypatch):
    import daskclust.fit as base  # where the fit connects to the cluster
    from daskclust.errors import CheckpointError

    base_url = f"file://{tmp_path}/bucket"
    make_blobs(f"{base_url}/blobs.zarr", 500, 2, 3, seed=1)
    monkeypatch.setattr(base, "connect", lambda *a, **k: pytest.fail("no cluster work may start"))
    with pytest.raises(CheckpointError, match="is a URL: checkpoints go to a directory"):
        daskclust.KMeans(3, random_state=0).fit(f"{base_url}/blobs.zarr", checkpoint=f"{base_url}/run")
    assert sorted(p.name for p in (tmp_path / "bucket").iterdir()) == ["blobs.zarr"]
