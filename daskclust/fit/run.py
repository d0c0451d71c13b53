"""The runs of a fit: ``n_init`` of them, seeded with :func:`derive_seeds` of the fit's seed, the
one with the highest final free energy kept (:func:`best_run`). The runs share one engine (the data
placed on the workers once, :class:`SharedEngine`; on placed data, the engine their handle keeps for
many fits, :mod:`daskclust.fit.placed`); each run seeds (or restores a checkpoint) and
iterates (:func:`run_once`); if a worker holding
chunks dies, the run starts again on the remaining workers from its last checkpoint, or from the
seeding without one -- every step being a deterministic function of the data, the seed and the
iteration, the model is the one the undisturbed run would give.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

import numpy as np

from ..em.loop import EMResult, LoopState
from ..em.stored_state import restore_states
from ..engine.engine import Engine
from ..errors import CheckpointError, ClusterError, WorkerLost
from ..models import Params
from ..names import FINGERPRINT_CONTENT
from ..persistence.checkpoint import list_checkpoints
from ..persistence.chunk_states import reset_state_store
from .checkpoints import Checkpoint, check_content
from .checkpoints import load as load_checkpoint
from .plan import FitPlan
from .progress import Progress
from .result import CoresetFigures, FitResult, SeedingFigures
from .spec import FitSpec
from .steps import FitSteps

MAX_RECOVERIES = 3
"""Times a run starts again after losing workers before giving up."""


def derive_seeds(seed: int, n_init: int) -> list[int]:
    """The seeds of the ``n_init`` runs of a fit: ``seed`` itself first (``n_init=1`` is the
    plain fit), then seeds in [0, 2**63) drawn from ``np.random.SeedSequence(seed)``."""
    extra = np.random.SeedSequence(seed).generate_state(n_init - 1, dtype=np.uint64) >> np.uint64(1)
    return [seed, *(int(s) for s in extra)]


def best_run(client, data, spec: FitSpec, plan: FitPlan, progress: Progress, data_kind: str = "full",
             engines: SharedEngine | None = None) -> FitResult:
    """Run the fit once per seed of :func:`derive_seeds`; the run with the highest final free
    energy (the first of equals). ``engines``: an engine kept beyond the fit (placed data's), else
    one for this fit."""
    seeds = derive_seeds(plan.seed, spec.n_init)
    best = None
    with nullcontext(engines) if engines is not None else SharedEngine.of_fit(client, data, spec, plan) as shared:
        for i, seed_value in enumerate(seeds):
            if len(seeds) > 1:
                progress.say(f"init {i + 1}/{len(seeds)}: seed {seed_value}")
            result = run_once(client, data, spec, replace(plan, seed=seed_value), progress, data_kind=data_kind,
                              engines=shared)
            if best is None or result.history[-1]["free_energy"] > best.history[-1]["free_energy"]:
                best = result
    return best


class SharedEngine:
    """The engine the runs of one fit share: started on first use (data placed, shards loaded),
    returned to a new engine's state before each later run (:meth:`Engine.forget`), replaced after
    a lost worker, closed with the fit. ``n_init`` runs then place the data once.

    ``progress`` may change between uses (:meth:`get` applies it to a reused engine)."""

    def __init__(self, client, data, *, memory_budget: int | None = None, progress: bool = False,
                 state_store: str | None = None):
        self.client = client
        self.data = data
        self.memory_budget = memory_budget
        self.progress = progress
        self.state_store = state_store
        self._engine: Engine | None = None

    @classmethod
    def of_fit(cls, client, data, spec: FitSpec, plan: FitPlan) -> SharedEngine:
        """The engine of a fit of ``spec`` on ``data`` as ``plan`` says (its state store)."""
        return cls(client, data, memory_budget=spec.memory_budget, progress=bool(spec.verbose),
                   state_store=plan.state_store.url if plan.state_store is not None else None)

    def __enter__(self) -> SharedEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    @property
    def started(self) -> Engine | None:
        """The engine if one is open (None before the first :meth:`get` and after :meth:`discard`)."""
        return self._engine

    def get(self) -> Engine:
        """The engine for the next run, as a new one would start it."""
        if self._engine is None:
            self._engine = self._start()
        else:  # a run had it
            self._engine.forget()
            self._engine.show_progress(self.progress)
        return self._engine

    def _start(self) -> Engine:
        """A new engine over the data, started (its :meth:`Engine.__enter__`: the client current and the
        driver's BLAS on one thread until :meth:`discard`)."""
        return Engine(self.data, self.client, memory_budget=self.memory_budget, progress=self.progress,
                      state_store=self.state_store).__enter__()

    def _close(self, engine: Engine) -> None:
        engine.__exit__(None, None, None)

    def discard(self) -> None:
        """Close the engine (a worker left, or the fit is done); the next :meth:`get` starts another."""
        engine, self._engine = self._engine, None
        if engine is not None:
            self._close(engine)


def restore_chunk_states(engine: Engine, url: str, n_clusters: int) -> None:
    """Have the workers read and check their chunks' states from the checkpoint at ``url``
    (:func:`daskclust.em.stored_state.restore_states`); damage is a :class:`CheckpointError`."""
    restore_states(engine, url, n_clusters, lambda why: CheckpointError(f"checkpoint {url!r} is damaged: {why}"))


def recoveries_exhausted(lost: WorkerLost) -> str:
    """Why a fit stopped retrying after a last lost worker, and what to change."""
    if lost.memory:
        advice = ("a worker is restarted when its memory passes the nanny's terminate fraction of its limit "
                  "(distributed.worker.memory.terminate, 95 %): give the workers more memory (dask worker "
                  "--memory-limit, LocalCluster(memory_limit=...)), add workers, or cut what each holds with "
                  "smaller chunks (chunk_rows or the store's chunking) and nothing else running on them")
    else:
        advice = "workers keep leaving the cluster: see the workers' and nannies' logs"
    return f"{lost}; the fit recovered {MAX_RECOVERIES} times and gives up: {advice}"


def _recovery_point(plan: FitPlan) -> Checkpoint | None:
    """The newest complete checkpoint of this fit, or the checkpoint it resumed from, or None."""
    if plan.checkpointer is not None and list_checkpoints(plan.checkpointer.path):
        try:
            return load_checkpoint(plan.checkpointer.path)
        except CheckpointError:
            pass
    return plan.resumed


def run_once(client, data, spec: FitSpec, plan: FitPlan, progress: Progress, *, start_params: Params | None = None,
             data_kind: str = "full", engines: SharedEngine | None = None) -> FitResult:
    """Seed (or restore) and iterate once with ``plan.seed``; on a lost worker, start again from
    the last checkpoint. ``start_params``: the parameters of the first E-step instead of those of
    the seeding (which then only leaves the seed labels: a coreset fit's full-data phase).
    ``engines``: the engine shared with the fit's other runs (else one for this run alone)."""
    if engines is None:
        with SharedEngine.of_fit(client, data, spec, plan) as own:
            return run_once(client, data, spec, plan, progress, start_params=start_params, data_kind=data_kind,
                            engines=own)
    steps: FitSteps = spec.steps or FitSteps()
    settings = spec.settings(plan.seed, data=data_kind)
    resumed = plan.resumed
    bytes_read = 0
    for attempt in range(MAX_RECOVERIES + 1):
        search = spec.make_search(data.n_samples)
        try:
            if resumed is None and plan.state_store is not None:
                reset_state_store(plan.state_store)
            engine = engines.get()
            progress.say(f"{spec.kind}: {data.n_samples} x {data.n_features} in {data.n_chunks} chunks on "
                         f"{len(engine.shards)} worker(s), {engine.residence()}")
            if resumed is None:
                with engine.phase("seeding"):
                    seeding, params = steps.seed(engine, spec, plan.seed)
                    if start_params is None:
                        seeding, params = steps.start(engine, spec, seeding, params, plan.seed)
                progress.say(f"seeding ({seeding.method}): {seeding.seconds:.2f} s. Initialization complete")
                figures = SeedingFigures(seeding.seconds, seeding.n_distances, seeding.method)
                plan.record.seeding = figures
                start = LoopState(0, params if start_params is None else start_params)
            else:
                source = plan.record.source
                check_content(resumed, engine, source["url"] if source else "the data given")
                restore_chunk_states(engine, resumed.url, spec.n_clusters)
                try:
                    search.restore(resumed.search)
                except ValueError as exc:
                    raise CheckpointError(f"checkpoint {resumed.url!r} is damaged: {exc}") from exc
                start = resumed.state
                progress.say(f"resumed from {resumed.url} at iteration {start.iteration}")
            settings = steps.loop_settings(engine, spec, settings, seeding if resumed is None else None)
            result, extras = steps.iterate(engine, spec, start, settings, search, progress, plan.checkpointer)
            if result.stop:
                progress.say(result.stop)
            plan.record.fingerprint[FINGERPRINT_CONTENT] = engine.content_fingerprint()  # every chunk read: no pass
            bytes_read += engine.bytes_read()
            return _result(result, plan.seed, plan.record.seeding, bytes_read, extras)
        except WorkerLost as lost:
            engines.discard()
            if attempt == MAX_RECOVERIES:
                raise ClusterError(recoveries_exhausted(lost)) from lost
            resumed = _recovery_point(plan)
            where = f"from {resumed.url}" if resumed is not None else "from the seeding"
            progress.say(f"{lost}; starting again {where} on the remaining workers")
    raise AssertionError("unreachable")


def _result(result: EMResult, seed: int, seeding: SeedingFigures, bytes_read: int, extras: dict,
            coreset: CoresetFigures | None = None) -> FitResult:
    return FitResult(result.params, result.n_iter, result.converged, result.inertia, result.history, result.sizes,
                     seed, seeding, bytes_read, coreset=coreset, extras=extras)
