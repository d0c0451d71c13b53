"""C-scaling: time per iteration of var-k-means-S at fixed N = 409,600 for growing C.

BIRCH grids with N / C points per cluster. With G + 1 = 6 candidates per point
the work per iteration does not depend on C; the target is a time per
iteration flat within 1.5x from C = 256 to 16384.
"""

from __future__ import annotations

from .. import KMeans
from .data import birch_array
from .measure import daskclust_fit, warm_up
from .runner import Table

COMMAND = "daskclust bench --suite scaling"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
N = 409_600


def run(client, sizes=(256, 1024, 4096, 16384)) -> Table:
    table = Table(
        f"C-scaling of var-k-means-S (KMeans defaults) at N = {N:,}, BIRCH grid",
        ["C", "points / cluster", "time / iteration (ms)", "iterations", "seeding s", "fit s",
         "distance speedup (whole fit)", "vs C=256"],
    )
    warm_up(birch_array(64)[0], client)
    base = None
    for C in sizes:
        X, _ = birch_array(C, points=N // C)
        fit = daskclust_fit(KMeans(C, random_state=0), X, client)
        base = base or fit["iter_ms"]
        table.rows.append([C, N // C, fit["iter_ms"], fit["n_iter"], fit["seeding_s"], fit["seconds"],
                           f"{fit['speedup']:.0f}x", f"{fit['iter_ms'] / base:.2f}x"])
    ratio = max(r[2] for r in table.rows) / min(r[2] for r in table.rows)
    table.notes.append(f"max/min time per iteration across C: {ratio:.2f}x (target: within 1.5x); median "
                       "iteration of each fit")
    return table
