"""What a fit decides before any work: :class:`FitPlan` (:func:`plan_fit`).

The settings of its runs, the checkpointing, the checkpoint it resumes from (checked against the
estimator, its parameters, the data's fingerprint and the family's parameter rules), the state
store, and the stores the workers must see as the driver does. Every output is checked against
every input here, so that nothing is written when a check fails.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CheckpointError
from ..io import Location, check_target, input_store, input_stores, source_location
from ..persistence.chunk_states import reset_state_store
from .checkpoints import Checkpoint, Checkpointer, check_resumable
from .checkpoints import load as load_checkpoint
from .result import FitRecord
from .spec import FitSpec


@dataclass
class FitPlan:
    """What a fit decided before any work: the fit's seed, what its checkpoints and model record of it
    (:class:`~daskclust.fit.result.FitRecord`), checkpointing, where to resume, the state store, and the
    stores the workers must see as the driver does."""

    seed: int
    record: FitRecord
    checkpointer: Checkpointer | None
    resumed: Checkpoint | None
    state_store: Location | None
    shared_inputs: list[Location]
    shared_outputs: list[Location]


def plan_fit(spec: FitSpec, data, X, sample_weight, *, params: dict, seed: int, n_features: int,
             sources: tuple[dict | None, dict | None], checkpoint=None, checkpoint_every: int = 10, resume=None,
             overwrite: bool = False, state: str = "memory", state_store=None,
             check_apart: Callable[[list], None] | None = None) -> FitPlan:
    """The plan of a fit of ``spec`` on ``data`` (from ``X`` and ``sample_weight`` as the user gave
    them), checked before any work. ``params`` are the estimator's parameters as checkpoints record
    them, ``seed`` the fit's seed (a resumed fit takes its checkpoint's), ``n_features`` the model's
    dimension, ``sources`` where the data and weights are stored; ``check_apart`` refuses a store
    of the estimator's own that overlaps the inputs (a tree store)."""
    fingerprint = data.fingerprint()
    resumed = load_checkpoint(resume) if resume is not None else None
    if resumed is not None:
        check_resumable(resumed, spec.kind, params, fingerprint)
        problem = spec.family.params_problem(resumed.state.params, spec.n_clusters, n_features)
        if problem:
            raise CheckpointError(f"checkpoint {resumed.url!r} is damaged: {problem}")
        seed = resumed.record.seed
    source, weights = sources
    record = FitRecord(spec.kind, params, fingerprint, seed, source, weights,
                       resumed.record.seeding if resumed else None)
    read = stored_arrays(data)
    stored = [source_location(array) for array in read]  # the zarr arrays every worker reads
    inputs = [*map(input_store, read), *input_stores(X), *input_stores(sample_weight)]  # no output may touch them
    if check_apart is not None:
        check_apart(inputs)
    shared = []
    checkpointer = None
    if checkpoint is not None:
        checkpointer = Checkpointer(checkpoint, checkpoint_every, record)
        resuming = Location.parse(resumed.url) if resumed is not None else None
        checkpointer.prepare(overwrite=overwrite, resuming=resuming, inputs=inputs)
        shared.append(checkpointer.location)
    location = None
    if state == "zarr":
        if state_store is not None:
            location = Location.parse(state_store)
        elif checkpointer is not None:
            location = checkpointer.location.child("live-state")
        else:
            location = Location.parse(os.path.join(tempfile.gettempdir(), f"daskclust-state-{uuid.uuid4().hex}"))
        check_target(location, "state", overwrite=overwrite or checkpointer is not None, inputs=inputs)
        reset_state_store(location)
        shared.append(location)
    return FitPlan(seed, record, checkpointer, resumed, location, stored, shared)


def stored_arrays(data) -> list:
    """The zarr arrays the workers read the rows and weights of ``data`` from (none in memory)."""
    return [array for block in (data.source, data.weight_source) if block is not None for array in block.zarr_arrays()]
