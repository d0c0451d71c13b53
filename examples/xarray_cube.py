"""xarray in and out: a land-cover map from a synthetic (time, y, x, band) image cube.

The cube holds monthly images of a scene whose pixels belong to four land-cover classes (water,
forest, cropland, built-up), each with its own reflectance spectrum over six bands (vegetation
greens up in summer), plus noise. Stacking (time, y, x) into one sample dimension gives the
(sample, band) DataArray the estimators take; ``predict`` returns the labels as a DataArray with
the samples' MultiIndex, lazy since the cube is dask-backed, and ``unstack`` gives back a
(time, y, x) map with the cube's dates and coordinates in metres, which xarray writes to zarr.

Run: python examples/xarray_cube.py [workdir]     (DASKCLUST_EXAMPLE_SMALL=1: a small size, for CI)
"""

import os
import sys
import tempfile
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr
from dask import delayed
from scipy.optimize import linear_sum_assignment

import daskclust

SMALL = os.environ.get("DASKCLUST_EXAMPLE_SMALL") == "1"
MONTHS, SIDE = (4, 40) if SMALL else (12, 300)
PIXEL = 10.0  # metres
BANDS = ["blue", "green", "red", "nir", "swir1", "swir2"]
CLASSES = ["water", "forest", "cropland", "built-up"]
SPECTRA = np.array([  # reflectance per band (in winter for the vegetated classes)
    [0.08, 0.06, 0.04, 0.02, 0.01, 0.01],
    [0.03, 0.06, 0.04, 0.30, 0.15, 0.07],
    [0.06, 0.09, 0.10, 0.25, 0.25, 0.18],
    [0.15, 0.16, 0.18, 0.22, 0.28, 0.26],
])
GREENING = np.array([0.0, 0.08, 0.15, 0.0])  # extra nir at the height of summer


def land_cover(side: int, rng: np.random.Generator) -> np.ndarray:
    """A (side, side) map of class indices: patches around 30 random seeds (nearest seed's class)."""
    seeds = rng.uniform(0, side, (30, 2))
    classes = rng.integers(len(CLASSES), size=len(seeds))
    yy, xx = np.mgrid[:side, :side]
    nearest = ((yy[..., None] - seeds[:, 0]) ** 2 + (xx[..., None] - seeds[:, 1]) ** 2).argmin(-1)
    return classes[nearest]


def month_image(truth: np.ndarray, month: int, seed: int) -> np.ndarray:
    """One (1, y, x, band) image: each pixel's class spectrum (vegetation greener in summer) plus noise."""
    summer = np.sin(np.pi * (month - 1) / 11)  # 0 in January, 1 in mid-year
    values = SPECTRA[truth].copy()
    values[..., BANDS.index("nir")] += summer * GREENING[truth]
    values += 0.03 * np.random.default_rng([seed, month]).standard_normal(values.shape)
    return values[None].astype(np.float32)


def make_cube(seed: int = 0) -> tuple[xr.DataArray, xr.DataArray]:
    """The (time, y, x, band) reflectance cube, generated lazily a month per dask chunk (as reading a
    file per month would be), and the true classes (y, x)."""
    truth = land_cover(SIDE, np.random.default_rng(seed))
    dates = pd.date_range("2024-01-01", periods=MONTHS, freq="MS")
    shape = (1, SIDE, SIDE, len(BANDS))
    months = [da.from_delayed(delayed(month_image)(truth, date.month, seed), shape, np.float32) for date in dates]
    coords = {"time": dates, "y": 5_000_000.0 - PIXEL * np.arange(SIDE), "x": 400_000.0 + PIXEL * np.arange(SIDE),
              "band": BANDS}
    cube = xr.DataArray(da.concatenate(months), dims=("time", "y", "x", "band"), coords=coords, name="reflectance")
    return cube, xr.DataArray(truth, dims=("y", "x"), coords={"y": coords["y"], "x": coords["x"]})


def agreement(found: np.ndarray, truth: np.ndarray) -> tuple[float, np.ndarray]:
    """Share of samples whose cluster is matched to their class, under the best one-to-one matching
    of clusters to classes, and that matching (class of each cluster)."""
    counts = np.zeros((len(CLASSES), len(CLASSES)), dtype=np.int64)
    np.add.at(counts, (found.ravel(), truth.ravel()), 1)
    clusters, classes = linear_sum_assignment(counts, maximize=True)
    return counts[clusters, classes].sum() / found.size, classes[np.argsort(clusters)]


def main(workdir: Path) -> None:
    cube, truth = make_cube()
    print(f"cube: {dict(cube.sizes)}, {cube.nbytes / 1e6:.1f} MB, dask-backed in {cube.data.npartitions} chunks; "
          f"{cube.time.size} monthly dates from {cube.time.dt.strftime('%Y-%m-%d').values[0]}")
    samples = cube.stack(sample=("time", "y", "x")).transpose("sample", "band")
    print(f"samples: {dict(samples.sizes)}")

    model = daskclust.KMeans(n_clusters=len(CLASSES), random_state=0).fit(samples)
    labels = model.predict(samples)  # a lazy DataArray with the samples' MultiIndex
    print(f"labels: {type(labels).__name__} {labels.name!r} {dict(labels.sizes)}, backed by "
          f"{type(labels.data).__module__.split('.')[0]}")

    grid = labels.unstack("sample")
    xr.testing.assert_identical(grid.coords.to_dataset(), cube.coords.to_dataset().drop_vars("band"))
    print(f"unstacked: {grid.dims} with the cube's coordinates (dates, y and x in metres)")
    store = workdir / "landcover.zarr"
    grid.to_dataset().to_zarr(store, mode="w", consolidated=False)
    reopened = xr.open_zarr(store, consolidated=False)["labels"].load()
    xr.testing.assert_identical(reopened, grid.compute())
    print(f"written to {store} and read back: {dict(reopened.sizes)}, time {reopened.time.dtype}, "
          f"y {reopened.y.values[0]:.0f}-{reopened.y.values[-1]:.0f} m, identical to the computed labels")

    score, classes = agreement(reopened.values, truth.broadcast_like(reopened).transpose(*reopened.dims).values)
    print("clusters as classes: " + ", ".join(f"{k} -> {CLASSES[c]}" for k, c in enumerate(classes)))
    print(f"agreement with the true land cover: {score:.1%} of {reopened.size:,} samples")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(sys.argv[1] if len(sys.argv) > 1 else tmp))
