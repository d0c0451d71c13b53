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


DEMO_DTYPE = "float64"
"""The dtype of the demo's data, whose kernels :func:`daskclust.fit.warmup.compiling_ahead` starts
compiling before the estimators are imported and the data made."""


def run_demo(n_clusters: int, plot_path: str | None, seed: int) -> int:
    """Generate the data, fit them, print the figures of the fit and, unless ``plot_path`` is empty, write
    its picture there (the convergence plot, a .png) and its report beside it (``<stem>.html`` and the
    other figures as ``<stem>-<figure>.png``, :func:`daskclust.report.write_report`). On a machine's
    first run the kernels start compiling on a second core before the estimators are imported."""
    from ..errors import InvalidParameterError
    from ..fit.warmup import compiling_ahead
    from ..report import report_paths
    from ..report.write import check_targets

    if plot_path:  # checked before any work
        if Path(plot_path).suffix.lower() != ".png":
            raise InvalidParameterError(f"--plot names the demo's picture, a .png file; got {plot_path!r}")
        pngs = {"convergence": plot_path}
        page = Path(plot_path).with_suffix(".html")
        check_targets(report_paths(page, pngs), overwrite=True, inputs=[])
    t0 = time.perf_counter()
    with compiling_ahead(DEMO_DTYPE):
        from .. import KMeans
        from ..datasets import make_birch
        from ..report import write_report

        with tempfile.TemporaryDirectory(prefix="daskclust-demo-") as tmp:
            store = Path(tmp) / "birch.zarr"
            group = make_birch(store, n_clusters, seed=seed, dtype=DEMO_DTYPE)
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
            em_seconds = sum(row["seconds"] for row in model.history_)
            print(f"  seeding / EM / fit     {model.seeding_time_:.2f} s / {em_seconds:.2f} s / {model.fit_time_:.2f} s "
                  "(the fit's time includes compiling the kernels on a machine's first run)")
            print(f"  total (incl. cluster start, data generation) {time.perf_counter() - t0:.2f} s")
            if plot_path:
                written = write_report(model, page, data=group["X"], overwrite=True, png_paths=pngs)
                print(f"  convergence plot       {written['convergence']}")
                print(f"  report                 {written['html']} (and its figures beside it)")
        return 0
