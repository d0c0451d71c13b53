"""Nothing is deleted by pattern: a URL output whose name holds glob characters is refused before
anything is written or removed, and what daskclust removes at a URL is listed file by file.

fsspec's ``rm`` (and zarr's overwrite of a store, which calls it) expands ``*``, ``?`` and ``[...]``:
saving to ``memory://x[1].zarr`` cleared ``memory://x1.zarr``. Each output kind is tried on a
memory:// URL and on a local file:// URL, beside a victim store the pattern matches.
"""

from __future__ import annotations

import uuid

import fsspec
import numpy as np
import pytest

import daskclust
from daskclust.errors import OutputRefusedError
from daskclust.io import Location, delete_tree, remove_store
from daskclust.transforms import Sketch

PROTOCOLS = ("memory", "file")


@pytest.fixture(scope="module")
def fitted(client_threads):
    X = np.random.default_rng(0).standard_normal((400, 3))
    return X, daskclust.KMeans(4, random_state=0).fit(X, client=client_threads)


@pytest.fixture(params=PROTOCOLS)
def base(request, tmp_path):
    """A fresh directory at a URL of each protocol."""
    if request.param == "memory":
        url = f"memory://daskclust-patterns-{uuid.uuid4().hex}"
        yield url
        fs, root = fsspec.core.url_to_fs(url)
        if fs.exists(root):
            fs.rm(root, recursive=True)  # this test's own directory, no pattern in it
    else:
        yield f"file://{tmp_path}"


def files_under(url: str) -> dict[str, bytes]:
    fs, root = fsspec.core.url_to_fs(url)
    return {path: fs.cat_file(path) for path in fs.find(root)}


def victim(base: str, model) -> str:
    """A daskclust model at ``<base>/x1.zarr``: the same kind as the outputs tried, so only the name protects it."""
    url = f"{base}/x1.zarr"
    model.save(url)
    return url


OUTPUTS = {
    "save": lambda model, X, client, url: model.save(url),
    "predict": lambda model, X, client, url: model.predict(X, output=url),
    "transform": lambda model, X, client, url: model.transform(X, output=url),
    "sketch": lambda model, X, client, url: Sketch(2, random_state=0).fit_transform(
        X, client=client, output=url),
}


@pytest.mark.parametrize("output", sorted(OUTPUTS))
@pytest.mark.parametrize("name", ["x[1].zarr", "x?.zarr", "x*.zarr"])
def test_a_url_output_with_glob_characters_is_refused_and_nothing_else_is_touched(
        fitted, client_threads, base, output, name):
    X, model = fitted
    saved = victim(base, model)
    before = files_under(saved)
    with pytest.raises(OutputRefusedError, match="glob characters"):
        OUTPUTS[output](model, X, client_threads, f"{base}/{name}")
    assert files_under(saved) == before
    np.testing.assert_array_equal(daskclust.load(saved).cluster_centers_, model.cluster_centers_)


def test_a_local_path_with_brackets_is_an_ordinary_name(fitted, tmp_path):
    """Local paths are written and replaced with os functions, which expand nothing."""
    _, model = fitted
    model.save(tmp_path / "x1.zarr")
    model.save(tmp_path / "x[1].zarr")
    model.save(tmp_path / "x[1].zarr", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x1.zarr", "x[1].zarr"]


def test_removing_a_url_store_lists_its_files_and_leaves_siblings(fitted, base):
    _, model = fitted
    saved = victim(base, model)
    sibling = f"{base}/x1.zarr.old"
    model.save(sibling)
    before = files_under(sibling)
    remove_store(Location.parse(saved))
    fs, root = fsspec.core.url_to_fs(saved)
    assert not fs.exists(root)
    assert files_under(sibling) == before


def test_delete_tree_refuses_a_pattern():
    with pytest.raises(OutputRefusedError, match="glob characters"):
        delete_tree(Location.parse("memory://daskclust-patterns/x[1].zarr"))
