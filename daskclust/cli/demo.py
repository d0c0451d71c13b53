"""``daskclust demo``: BIRCH grid data in a temporary zarr store, fitted on an embedded LocalCluster."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np


def recovered_fraction(true_centres: np.ndarray, fitted: np.ndarray, radius: float = 1.0) -> tuple[float, float]:
    """Fraction of true centres with a fitted centre within ``radius``, and the median such distance."""
    nearest = np.empty(len(true_centres))
    for start in range(0, len(true_centres), 1024):
        block = true_centres[start:start + 1024]
        d2 = ((block[:, None, :] - fitted[None, :, :]) ** 2).sum(-1)
        nearest[start:start + 1024] = np.sqrt(d2.min(axis=1))
    return float((nearest <= radius).mean()), float(np.median(nearest))


def run_demo(n_clusters: int, plot_path: str | None, seed: int) -> int:
    from .. import KMeans
    from ..datasets import make_birch

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="daskclust-demo-") as tmp:
        store = Path(tmp) / "birch.zarr"
        group = make_birch(store, n_clusters, seed=seed)
        true_centres = np.asarray(group["centers"][:])
        print(f"BIRCH grid: {group['X'].shape[0]} points, {n_clusters} clusters, written to {store}")
        model = KMeans(n_clusters, random_state=seed, verbose=1).fit(str(store))
    frac, median = recovered_fraction(true_centres, model.cluster_centers_)
    last = model.history_[-1]
    print()
    print("daskclust demo report")
    print(f"  iterations             {model.n_iter_} (converged: {model.converged_})")
    print(f"  free energy / point    {last['free_energy']:.6f}")
    print(f"  quantization error     {model.inertia_:.6g}")
    print(f"  sigma^2                {model.sigma2_:.4f} (true 1.0)")
    print(f"  true centres recovered {100 * frac:.1f}% within distance 1.0 (median distance {median:.3f})")
    print(f"  seeding / fit time     {model.seeding_time_:.2f} s / {model.fit_time_:.2f} s")
    print(f"  total (incl. cluster start, data generation) {time.perf_counter() - t0:.2f} s")
    if plot_path:
        written = plot_history(model.history_, plot_path)
        print(f"  convergence plot       {written or 'skipped: matplotlib (a dependency of daskclust) is not installed'}")
    return 0


def plot_history(history: list[dict], path: str) -> str | None:
    """Free energy and quantization error against the iteration, as a PNG; None without matplotlib
    (installed with daskclust, unless installed without its dependencies)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    it = [row["iteration"] for row in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.plot(it, [row["free_energy"] for row in history], marker=".")
    ax1.set(xlabel="iteration", ylabel="free energy per point")
    ax2.plot(it, [row["quantization_error"] for row in history], marker=".", color="tab:red")
    ax2.set(xlabel="iteration", ylabel="quantization error", yscale="log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
