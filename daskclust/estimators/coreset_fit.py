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

from dataclasses import replace
from typing import NamedTuple

from ..data import as_chunked_data
from ..em.loop import EMResult
from ..engine.engine import Engine
from ..errors import InvalidParameterError


class CoresetFit(NamedTuple):
    """Both phases: the combined result (phase 2's model, both histories), the seeding figures (the
    coreset's seeding plus phase 2's assignment pass), the kept run's seed and ``coreset_``."""

    result: EMResult
    seeding: dict
    seed: int
    coreset: dict


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


def fit_with_coreset(estimator, client, data, init, plan, progress) -> CoresetFit:
    """Phase 1 and phase 2 (module docstring) of ``estimator``'s fit on ``data`` (a
    :class:`~daskclust.data.ChunkedData`), in the fit's cluster connection."""
    m = estimator.coreset
    builder = estimator._coreset_builder(plan.settings.seed)
    with Engine(data, client, memory_budget=estimator.memory_budget, progress=bool(estimator.verbose)) as engine:
        rows, weights = builder.transform_engine(engine)
        estimator.bytes_read_ += engine.bytes_read()
    coreset = {"size": m, "seconds": builder.seconds_, "n_distances": builder.n_distances_,
               "total_weight": float(weights.sum())}
    progress.say(f"coreset: {m} rows of {data.n_samples} in {builder.seconds_:.2f} s, "
                 f"{builder.n_distances_} distances")

    small = as_chunked_data(rows, weights, min_samples=estimator._n_clusters())
    on_coreset = replace(plan, settings=replace(plan.settings, data="coreset"), meta=dict(plan.meta),
                         checkpointer=None, resumed=None, state_store=None, shared_inputs=[], shared_outputs=[])
    progress.phase(small.nbytes, plan.settings.max_iter + plan.settings.n_init_esteps + 1)
    first, seeding, seed_value = estimator._best_run(client, small, init, on_coreset, progress)

    refine = replace(plan.settings, seed=seed_value, max_iter=estimator.refine_iter, n_init_esteps=0)
    progress.phase(data.nbytes, estimator.refine_iter + 1)
    progress.say(f"full data: {estimator.refine_iter} refining iteration(s) at most")
    second, assignment = estimator._run(client, data, first.params.means, replace(plan, settings=refine), progress,
                                        start_params=first.params)
    coreset["assignment_distances"] = assignment["n_distances"]  # phase 2's first pass
    seeding = {"seconds": seeding["seconds"] + assignment["seconds"],
               "n_distances": seeding["n_distances"] + assignment["n_distances"], "method": seeding["method"]}
    return CoresetFit(replace(second, history=first.history + second.history), seeding, seed_value, coreset)
