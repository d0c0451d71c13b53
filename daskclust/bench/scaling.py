"""C-scaling: time per iteration of var-k-means-S at fixed N = 409,600 for growing C.

BIRCH grids with N / C points per cluster. With G + 1 = 6 candidates per point
the work per iteration does not depend on C; the target is a time per
iteration flat within 1.5x from C = 256 to 16384.

The default fit stops after 2-9 iterations, among them the first (which builds K(n) from the
seeds) and the last (with the exact-inertia pass), so the median of its iterations is not the cost
of an iteration. A second fit per C runs ``STEADY_ITERATIONS`` M-steps (tol=0) and the steady column
is the median of its iterations without the first and the last.
"""

from __future__ import annotations

import numpy as np

from .. import KMeans
from .data import birch_array
from .measure import daskclust_fit, warm_up
from .runner import Table

COMMAND = "daskclust bench --suite scaling"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
N = 409_600
STEADY_ITERATIONS = 10


def run(client, sizes=(256, 1024, 4096, 16384)) -> Table:
    table = Table(
        f"C-scaling of var-k-means-S (KMeans defaults) at N = {N:,}, BIRCH grid",
        ["C", "points / cluster", "time / iteration (ms)", "iterations", "seeding s", "fit s", "seeding / fit",
         "QE", "distance speedup (whole fit)", "steady iteration (ms)", "steady vs C=256"],
    )
    warm_up(birch_array(64)[0], client)
    base = None
    for C in sizes:
        X, _ = birch_array(C, points=N // C)
        fit = daskclust_fit(KMeans(C, random_state=0), X, client)
        steady = steady_iteration_ms(KMeans(C, random_state=0, tol=0, max_iter=STEADY_ITERATIONS), X, client)
        base = base or steady
        table.rows.append([C, N // C, fit["iter_ms"], fit["n_iter"], fit["seeding_s"], fit["seconds"],
                           f"{fit['seeding_s'] / fit['seconds']:.0%}", f"{fit['qe']:.6g}", f"{fit['speedup']:.0f}x",
                           steady, f"{steady / base:.2f}x"])
    for column, label in ((2, "median iteration of each default fit"),
                          (9, f"median iteration of a tol=0 fit of {STEADY_ITERATIONS} M-steps, its first and last "
                              "left out")):
        ratio = max(r[column] for r in table.rows) / min(r[column] for r in table.rows)
        table.notes.append(f"max/min time per iteration across C: {ratio:.2f}x (target: within 1.5x); {label}")
    share = max(r[4] / r[5] for r in table.rows)
    whole = table.rows[-1][5] / table.rows[0][5]
    table.notes.append(f"seeding at most {share:.0%} of the whole fit (target: at most 25 %); whole fit "
                       f"C={table.rows[-1][0]} / C={table.rows[0][0]}: {whole:.2f}x (target: within 2x); fit s is the "
                       "estimator's fit_time_ (data placement, seeding, iterations); QE the exact quantization error")
    return table


def steady_iteration_ms(estimator, X, client) -> float:
    """Median seconds (in ms) of the iterations of a fit without its first and last (see the module)."""
    rows = estimator.fit(X, client=client).history_
    inner = rows[1:-1] or rows
    return 1e3 * float(np.median([r["seconds"] for r in inner]))
