"""Fits on a lightweight coreset (``coreset=m``), reported and optionally refined on the full data.

Phase 1 draws m weighted rows (:class:`~daskclust.transforms.LightweightCoreset`: three passes over
the data, seeded with the fit's seed) and fits the model on them as on any weighted numpy input:
seeding, EM and the ``n_init`` runs, each keeping K(n) of the coreset's rows. Phase 2 runs once on
the full data from the kept model: one pass assigns every row to its nearest mean (the seed labels
from which the truncated E-step builds K(n)), then at most ``refine_iter`` truncated EM iterations
from the coreset's parameters (no initial E-steps: ``n_init_esteps`` and ``max_iter`` belong to
phase 1), 0 being a single E-step, the full-data evaluation of the coreset model. The fitted
model, free energy, inertia, ``n_iter_`` and ``converged_`` are those of phase 2, whose last
E-step's parameters the fit returns, as every fit does.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from ..engine.engine import Engine
from ..errors import InvalidParameterError, WorkerLost
from .plan import FitPlan
from .progress import Progress
from .result import CoresetFigures, FitResult
from .run import SharedEngine, best_run, run_once
from .spec import FitSpec
from .steps import FitSteps


def check_coreset_fit(coreset: int | None, n_clusters: int, checkpoint, resume) -> None:
    """Refuse, before any work, a coreset smaller than the number of clusters and checkpointing."""
    if coreset is None:
        return
    if coreset < n_clusters:
        raise InvalidParameterError(f"coreset={coreset} rows cannot hold {n_clusters} clusters: "
                                    f"coreset must be at least the number of clusters ({n_clusters})")
    if checkpoint is not None or resume is not None:
        raise InvalidParameterError("checkpoint and resume are for fits on the full data; a coreset fit is short: "
                                    "run it again, or fit with coreset=None to checkpoint")


def fit_with_coreset(client, data, spec: FitSpec, plan: FitPlan, progress: Progress,
                     engines: SharedEngine | None = None) -> FitResult:
    """Phase 1 and phase 2 (module docstring) of the fit of ``spec`` on ``data`` (a
    :class:`~daskclust.data.ChunkedData`), in the fit's cluster connection; on ``engines`` (kept
    beyond the fit: placed data) for both phases' passes over ``data`` when given."""
    m = spec.coreset
    builder = (spec.steps or FitSteps()).coreset_builder(spec, plan.seed)
    with _full_data_engine(client, data, spec, engines) as engine:
        coreset = builder.transform_engine(engine)
        bytes_read = engine.bytes_read()
    progress.say(f"coreset: {m} rows of {data.n_samples} in {builder.seconds_:.2f} s, "
                 f"{builder.n_distances_} distances")

    small = coreset.chunked(min_samples=spec.n_clusters)
    on_coreset = replace(plan, record=replace(plan.record, fingerprint=dict(plan.record.fingerprint)), checkpointer=None, resumed=None, state_store=None,
                         shared_inputs=[], shared_outputs=[])
    progress.phase(small.nbytes, spec.max_iter + spec.n_init_esteps + 1)
    first = best_run(client, small, spec, on_coreset, progress, data_kind="coreset")

    refine = replace(spec, max_iter=spec.refine_iter, n_init_esteps=0, init=first.params.means)
    progress.phase(data.nbytes, spec.refine_iter + 1)
    progress.say(f"full data: {spec.refine_iter} refining iteration(s) at most")
    second = run_once(client, data, refine, replace(plan, seed=first.seed), progress, start_params=first.params,
                      engines=engines)
    figures = CoresetFigures(m, builder.seconds_, builder.n_distances_, float(coreset.weights.sum()),
                             second.seeding.n_distances)  # phase 2's first pass
    seeding = first.seeding.plus(second.seeding.seconds, second.seeding.n_distances)
    return replace(second, history=first.history + second.history, seeding=seeding, coreset=figures,
                   bytes_read=bytes_read + first.bytes_read + second.bytes_read)


@contextmanager
def _full_data_engine(client, data, spec: FitSpec, engines: SharedEngine | None):
    """The engine of the coreset's passes over ``data``: one for them alone, or the engine of
    ``engines`` as a new one starts (discarded if a worker is lost, for the next use to replace)."""
    if engines is None:
        with Engine(data, client, memory_budget=spec.memory_budget, progress=bool(spec.verbose)) as engine:
            yield engine
        return
    try:
        yield engines.get()
    except WorkerLost:
        engines.discard()
        raise
