"""The EM loop: E-step pass, M-step on the driver, history, convergence.

Iteration t runs the E-step with the parameters Theta_t, records one history
row, and stops when converged or after ``max_iter`` M-steps; otherwise the
M-step gives Theta_{t+1} (none during the first ``n_init_esteps`` iterations)
and the search strategy digests the E-step's pair statistics. k-means stopped
by the centres' shift returns the M-step's centres, as scikit-learn's KMeans does,
otherwise those of its last E-step (the same at a fixed point); its ``n_iter_``
counts the iteration that stopped it, as scikit-learn's. A mixture that converged returns the M-step that
followed its last E-step, as scikit-learn's GaussianMixture does (its
``lower_bound_`` is that E-step's; EM never lowers the likelihood, and where a
component collapses onto repeated values that last M-step is worth much); one
stopped by ``max_iter`` has had its ``max_iter`` M-steps already.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..kernels.estep import CHANGED, NDIST_CENTRES, NDIST_POINTS, QE, W
from ..models import Family, Params, SuffStats, variance_floor
from ..names import STATE_K
from ..search import Search
from .estep_op import EStepOp
from .exact_cost import exact_inertia
from .relocation import relocate_empty

HISTORY_FIELDS = (
    "iteration",
    "data",
    "free_energy",
    "quantization_error",
    "sigma2",
    "n_distances",
    "n_distances_points",
    "n_distances_centres",
    "distance_speedup",
    "n_changed",
    "seconds",
)
"""Columns of ``history_``: the iteration (counted from 0 in each phase of a fit), the data its
E-step saw (``"full"``, or ``"coreset"`` for the iterations of a ``coreset=`` fit on the coreset;
see docs/algorithms/truncated-em.md; ``"stream"`` for a ``partial_fit`` step, whose figures are its
chunk's and whose distance counts and changed rows are not tracked, -1), free energy per point (Lücke & Forster 2019 Eq. 7, or Eq. 15 for k-means), quantization
error sum_n w_n min_c ||y_n - mu_c||^2 over the clusters
evaluated (for the weighted families: to the most responsible component's mean), variance
(sigma^2, or sum_c pi_c tr(Sigma_c) / D), distances evaluated (all of them, then point-to-centre and
centre-to-centre: in the E-step kernels, the neighbourhoods computed on the
driver -- for iteration 0 also those of the seeds -- and the M-step's shift of
each centre), N C / all distances, rows whose best cluster changed (-1 when not
tracked), wall-clock seconds of the iteration."""


@dataclass
class LoopState:
    """Where the EM loop stands before its next E-step (saved in checkpoints)."""

    iteration: int
    params: Params
    prev_f: float | None = None
    history: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class EMSettings:
    """What the loop needs to know about the model and the stopping rule.

    family : the model family (:mod:`daskclust.models`); n_init_esteps E-steps
    run before the first M-step (Forster & Lücke 2018, "neighborhood initialization");
    ``max_iter`` counts M-steps.
    """

    n_clusters: int
    n_truncated: int
    family: Family
    max_iter: int
    tol: float
    reg: float = 0.0
    n_init_esteps: int = 0
    seed: int = 0
    data: str = "full"
    """What the E-steps see ("full" or "coreset"), recorded in every history row."""
    absolute_tol: bool = False
    """``tol`` bounds the change of the free energy per point itself (scikit-learn's GaussianMixture:
    the mean lower bound), not relative to its magnitude."""
    shift_tol: float | None = None
    """Also stop when an M-step moves the means by at most this in all, sum_c ||mu_c^new - mu_c||^2
    (scikit-learn's KMeans rule, there tol times the data's mean variance)."""
    exact_inertia: bool = False
    """Make the inertia the exact k-means cost of the returned means (scikit-learn's ``inertia_``): one more
    pass, counted in the last history row, unless the last E-step already evaluated it (a fixed point,
    no row moved, of a search that evaluates every cluster). A truncated search's E-step sums over each
    row's K(n), which bounds the cost from above, and a stop on the centres' shift moves them after it."""

    @property
    def keep_state(self) -> bool:
        """K(n) is kept unless every cluster is kept for every point (exact EM)."""
        return self.n_truncated < self.n_clusters or self.family.hard


@dataclass
class EMResult:
    """A finished EM run: the last E-step's parameters, M-steps run, whether it converged, the
    inertia, the history and ``sizes``, each cluster's weight of rows (the responsibility mass
    S0 of the last E-step: rows per cluster for k-means, weighted)."""

    params: Params
    n_iter: int
    converged: bool
    inertia: float
    history: list[dict] = field(default_factory=list)
    sizes: np.ndarray | None = None
    stop: str | None = None
    """Why the run stopped before ``max_iter``, in scikit-learn's words where it has them (None if not)."""


def converged(prev: float | None, current: float, tol: float, absolute: bool = False) -> bool:
    """Change of the free energy per point at most ``tol``: |F_t - F_t-1| <= tol when ``absolute``
    (scikit-learn's GaussianMixture), else relative to max(|F_t|, |F_t-1|)."""
    if prev is None:
        return False
    if absolute:
        return abs(current - prev) <= tol
    return abs(current - prev) <= tol * max(abs(current), abs(prev), np.finfo(float).tiny)


def run_em(engine, start: LoopState, settings: EMSettings, search: Search,
           report: Callable[[dict], None] | None = None, checkpointer=None, op_class=EStepOp) -> EMResult:
    """Iterate E-step passes and M-steps from ``start`` until convergence.

    A fresh fit starts at iteration 0 (the search strategy is started from the
    seeds); a resumed one at the checkpoint's iteration, with the search
    strategy restored by the caller. With a ``checkpointer``, the loop state is
    saved before every E-step whose index is a multiple of its period.

    The family computes the M-step and the free energy from the merged statistics
    (:meth:`~daskclust.models.Family.free_energy`). ``op_class`` is the E-step pass
    (:class:`EStepOp` over rows; :class:`~daskclust.em.cell_loop.CellEStepOp` over cells).
    """
    params, prev_f = start.params, start.prev_f
    C = params.means.shape[0]
    n_samples = engine.data.n_samples
    history: list[dict] = list(start.history)
    first_m = settings.n_init_esteps
    family = settings.family
    if start.iteration == 0:
        search.start(params.means, family.mean_variance(params))
    done = False
    driver_distances = search.n_distances  # the seeds' exact neighbours belong to the first iteration
    for t in range(start.iteration, first_m + settings.max_iter + 1):
        t0 = time.perf_counter()
        kernel = family.kernel_params(params)
        op = op_class(family, kernel, settings.n_truncated, settings.keep_state, search.payload(), settings.seed, t)
        acc = engine.map_reduce(op)
        stats = acc.stats
        if t == 0 and settings.keep_state and engine.persisted and op.reorders_rows:
            engine.reorder(STATE_K)  # rows of a cluster together: the kernels then walk memory in order
        n_moved = relocation_distances = 0
        if t >= first_m:
            moved_stats = stats
            if family.hard:  # scikit-learn's KMeans moves empty clusters to the farthest rows
                moved_stats, n_moved, relocation_distances = relocate_empty(engine, stats, params.means)
            new = family.m_step(moved_stats, params, settings.reg)
            driver_distances += C  # the M-step's ||mu_new - mu_old||^2 per cluster
            free_energy, row_sigma2 = family.free_energy(stats, params, kernel, new)
        else:
            new = params
            free_energy, row_sigma2 = family.free_energy(stats, params, kernel, None)
        scal = stats.scal
        n_changed = int(scal[CHANGED]) if settings.keep_state else -1
        fixed_point = family.hard and n_changed == 0 and n_moved == 0  # the M-step repeats itself
        shift = float(np.sum((new.means - params.means) ** 2)) if t >= first_m else np.inf
        settled = settings.shift_tol is not None and shift <= settings.shift_tol
        changed_little = t > first_m and converged(prev_f, free_energy, settings.tol, settings.absolute_tol)
        done = (t > first_m and fixed_point) or settled or changed_little
        last = done or t == first_m + settings.max_iter
        if not last:
            before = search.n_distances
            search.update(acc.search, new.means, family.mean_variance(new))
            driver_distances += search.n_distances - before
        n_points = int(scal[NDIST_POINTS]) + relocation_distances
        n_centres = int(scal[NDIST_CENTRES]) + driver_distances
        row = {
            "iteration": t,
            "data": settings.data,
            "free_energy": free_energy,
            "quantization_error": float(scal[QE]),
            "sigma2": float(row_sigma2),
            "n_distances": n_points + n_centres,
            "n_distances_points": n_points,
            "n_distances_centres": n_centres,
            "distance_speedup": distance_speedup(n_samples * C, n_points + n_centres),
            "n_changed": n_changed,
        }
        driver_distances = 0
        if last:
            break  # the last row is recorded with the final parameters' inertia pass
        record(row, t0, history, report)
        params, prev_f = new, free_energy
        if checkpointer is not None and checkpointer.due(t + 1):
            checkpointer.save(engine, LoopState(t + 1, params, prev_f, history), search.state())
    n_iter = max(0, t - first_m)
    stop = None
    if done:
        stop = (f"Converged at iteration {t}: strict convergence." if t > first_m and fixed_point else
                f"Converged at iteration {t}: center shift {shift:.6e} within tolerance {settings.shift_tol:.6e}."
                if settled else f"Converged at iteration {t}: free energy change within tolerance {settings.tol}.")
    if done and family.hard:
        # scikit-learn's KMeans counts the iteration that stopped it and keeps its M-step's centres (at a
        # fixed point the same as the E-step's)
        n_iter = min(n_iter + 1, settings.max_iter)
        params = family.final_params(stats, new if settled else params, kernel)
    elif done and n_iter < settings.max_iter:
        # the M-step after the converged E-step (scikit-learn's GaussianMixture); a covariance that defines
        # no density fails here as it would in the next E-step
        kernel = family.kernel_params(new)
        params, n_iter = family.final_params(stats, new, kernel), n_iter + 1
    else:
        params = family.final_params(stats, params, kernel)
    warn_if_degenerate(params.means, stats)
    inertia = float(scal[QE])
    if settings.exact_inertia and not (done and t > first_m and fixed_point and search.exact):
        inertia, n_distances = exact_inertia(engine, params.means)
        row["n_distances"] += n_distances
        row["n_distances_points"] += n_distances
        row["distance_speedup"] = distance_speedup(n_samples * C, row["n_distances"])
    record(row, t0, history, report)
    return EMResult(params, n_iter, bool(done), inertia, history, stats.S0.copy(), stop)


def distance_speedup(exact: int, evaluated: int) -> float:
    """N C (exact EM's distances per iteration) over the distances an iteration evaluated."""
    return float(exact / max(evaluated, 1))


def record(row: dict, t0: float, history: list[dict], report: Callable[[dict], None] | None) -> None:
    """Append the iteration's ``row`` to ``history`` with its seconds since ``t0`` (E-step pass, M-step,
    neighbourhood update and, in the last row, the exact-inertia pass) and show it to ``report``."""
    row["seconds"] = time.perf_counter() - t0
    history.append(row)
    if report is not None:
        report(row)


def warn_if_degenerate(centres: np.ndarray, stats: SuffStats) -> None:
    """A :class:`ConvergenceWarning` when fewer than C clusters are distinct and have mass in
    the E-step statistics ``stats`` of ``centres`` (scikit-learn warns when it finds fewer
    distinct clusters than ``n_clusters``). When every row also sits on its centre
    (sigma^2 at the variance floor) the data have no more distinct points than that."""
    C, D = centres.shape
    k = len(np.unique(centres[stats.S0 > 0], axis=0))
    if k == C:
        return
    scal = stats.scal
    if scal[QE] / (D * scal[W]) <= float(variance_floor(0.0, centres)):
        reason = "Possibly due to duplicate points in X: the data have fewer distinct points than clusters."
    else:
        reason = ("The other clusters are duplicates or have no points (duplicate points in X, or a poor "
                  "init?).")
    from ..errors import ConvergenceWarning  # scikit-learn's subclass: imports scikit-learn, so only here

    warnings.warn(f"Number of distinct clusters ({k}) found smaller than n_clusters ({C}). {reason}",
                  ConvergenceWarning,
                  stacklevel=5)  # the caller of fit (fit -> _run -> run_em -> here)
