"""The fit function, between the estimators and the engine: from chunked data, a frozen
:class:`FitSpec` and a :class:`FitPlan` to a typed :class:`FitResult`.

:func:`fit` connects to the cluster (:func:`daskclust.engine.cluster.connect`), checks that the
workers see the stores the driver does, and runs the fit's ``n_init`` runs
(:mod:`daskclust.fit.run`: seeding, recovery from lost workers, the EM loop), or with
``coreset=m`` a coreset fit refined on the full data (:mod:`daskclust.fit.coreset`), on data
placed once for many fits when given a :class:`PlacedData` (:mod:`daskclust.fit.placed`). The
estimators validate their parameters into a spec and set their attributes from the result; the
kernels' warm-up (:mod:`daskclust.fit.warmup`) runs a tiny spec's pieces.
"""

from __future__ import annotations

import time

from ..engine.cluster import connect, set_kernel_preparation
from ..errors import InvalidDataError
from ..io import check_workers_see, remove_store
from .coreset import check_coreset_fit, fit_with_coreset
from .placed import PlacedData, persist
from .plan import FitPlan, plan_fit
from .progress import Progress
from .result import CoresetFigures, FitResult, HistoryRow, SeedingFigures
from .run import best_run, derive_seeds
from .spec import FitSpec
from .steps import FitSteps, MixtureSteps
from .warmup import prepare_kernels

set_kernel_preparation(prepare_kernels)  # what an embedded cluster compiles first: a fit's kernels


def fit(data, spec: FitSpec, plan: FitPlan, progress: Progress, *, client=None, scheduler_address=None,
        security=None, placed: PlacedData | None = None) -> FitResult:
    """Fit ``spec`` on ``data`` (:class:`~daskclust.data.ChunkedData`) as ``plan`` says, on the
    cluster :func:`~daskclust.engine.cluster.connect` chooses, or on the engine of ``placed`` (whose
    data ``data`` are: its cluster, the data's placement and checks done once, :func:`persist`); the
    state store of the plan is removed at the end (scratch space of this fit only)."""
    t0 = time.perf_counter()
    try:
        if placed is not None:
            with placed.in_use(progress=bool(spec.verbose)) as engines:
                check_workers_see(engines.client, plan.shared_outputs)
                result = _runs(engines.client, data, spec, plan, progress, engines)
        else:
            with connect(client, scheduler_address, security=security, announce=progress.say, dtype=data.dtype) as cl:
                check_workers_see(cl, plan.shared_inputs, error=InvalidDataError)
                check_workers_see(cl, plan.shared_outputs)
                result = _runs(cl, data, spec, plan, progress)
    finally:
        if plan.state_store is not None:
            remove_store(plan.state_store)
    result.seconds = time.perf_counter() - t0
    result.data = plan.record.training_data()
    return result


def _runs(client, data, spec: FitSpec, plan: FitPlan, progress: Progress, engines=None) -> FitResult:
    """The ``n_init`` runs, or the coreset fit, on ``client`` (on ``engines`` when the data are placed)."""
    if spec.coreset is None:
        return best_run(client, data, spec, plan, progress, engines=engines)
    return fit_with_coreset(client, data, spec, plan, progress, engines=engines)


__all__ = ["CoresetFigures", "FitPlan", "FitResult", "FitSpec", "FitSteps", "HistoryRow", "MixtureSteps", "PlacedData",
           "Progress", "SeedingFigures", "check_coreset_fit", "derive_seeds", "fit", "persist", "plan_fit"]
