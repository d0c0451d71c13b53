"""How a fit seeds, starts and iterates: :class:`FitSteps` and the mixtures' :class:`MixtureSteps`.

The plain steps are the engine's seeding (:func:`daskclust.seeding.seed`), the family's initial
parameters and the EM loop (:func:`daskclust.em.loop.run_em`). A variant overrides one step: the
mixtures start from k-means' clusters (or random responsibilities) and put in the given weights and precisions; sketches
(:mod:`daskclust.fit.sketch`) seed on sketches; cells and greedy learning
(:mod:`daskclust.fit.cell_steps`) iterate on kd-tree cells. Steps hold their own settings and no
state between fits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from ..em.kmeans_start import kmeans_start
from ..em.loop import EMResult, EMSettings, LoopState, run_em
from ..em.random_start import random_start
from ..kernels.estep import NDIST_POINTS
from ..models import Params
from ..search import Search
from ..seeding import SeedResult, seed
from ..seeding.passes import data_variance


class FitSteps:
    """The plain steps (k-means and the isotropic mixture)."""

    def seed(self, engine, spec, seed_value: int) -> tuple[SeedResult, Params]:
        """Choose the initial centres on ``engine`` (leaving each row's seed label): the seeding and
        the parameters of the first E-step."""
        seeding = seed(engine, spec.init, spec.n_clusters, seed=seed_value, oversampling_factor=spec.oversampling_factor,
                       init_rounds=spec.init_rounds, chain_length=spec.chain_length)
        return seeding, self.initial_params(spec, seeding)

    def initial_params(self, spec, seeding: SeedResult) -> Params:
        return spec.family.initial_params(seeding.centres, seeding.sigma2, spec.reg)

    def start(self, engine, spec, seeding: SeedResult, params: Params, seed_value: int) -> tuple[SeedResult, Params]:
        """The parameters of the first E-step from the seeding's (with what the start cost added)."""
        return seeding, params

    def loop_settings(self, engine, spec, settings: EMSettings, seeding: SeedResult | None) -> EMSettings:
        """The loop's stopping rule. A hard family's (k-means) ``tol`` is scikit-learn KMeans': stop when the
        M-step moves the centres by sum_c ||mu_c^new - mu_c||^2 <= tol sum_j Var(x_j) / D (the variance
        from the seeding's first pass, or from one pass when resumed); the others' bound the free energy."""
        if not spec.family.hard:
            return settings
        variance = seeding.data_variance if seeding is not None and seeding.data_variance is not None \
            else data_variance(engine)
        return replace(settings, tol=0.0, shift_tol=spec.tol * variance, exact_inertia=True)

    def iterate(self, engine, spec, start: LoopState, settings: EMSettings, search: Search, progress,
                checkpointer) -> tuple[EMResult, dict]:
        """The EM iterations after the seeding (or from a checkpoint), each reported to ``progress``
        (:class:`~daskclust.fit.progress.Progress`); the result and what the variant records beside
        it (:attr:`~daskclust.fit.result.FitResult.extras`)."""
        return run_em(engine, start, settings, search, progress.row, checkpointer), {}

    def coreset_builder(self, spec, seed_value: int):
        """The :class:`~daskclust.transforms.LightweightCoreset` of a ``coreset=m`` fit."""
        from ..transforms import LightweightCoreset

        return LightweightCoreset(spec.coreset, random_state=seed_value)


@dataclass(frozen=True, eq=False)
class MixtureSteps(FitSteps):
    """The mixtures with learned weights: ``weights`` and ``covariances`` given by the user replace
    the initial ones; ``start_from`` is where the first E-step's parameters come from: "seeds" (the
    seeding's), "kmeans" (k-means' clusters: :mod:`daskclust.em.kmeans_start`) or "random" (random
    responsibilities: :mod:`daskclust.em.random_start`)."""

    weights: np.ndarray | None = None
    covariances: np.ndarray | None = None
    start_from: str = "seeds"
    seed_variance: bool = True
    """Whether the initial covariances are the seeding's variance sigma^2 I + reg (else reg I alone:
    scikit-learn's M-step on one row per component, its "k-means++" and "random_from_data" starts)."""

    def initial_params(self, spec, seeding: SeedResult) -> Params:
        sigma2 = seeding.sigma2 if self.seed_variance else 0.0
        return self.with_given(spec.family.initial_params(seeding.centres, sigma2, spec.reg))

    def start(self, engine, spec, seeding, params, seed_value):
        t0 = time.perf_counter()
        if self.start_from == "kmeans":
            start = kmeans_start(engine, seeding.centres, seeding.sigma2, spec.family, spec.reg, seed_value,
                                 seeding.data_variance)
            params, iterations, n_distances = start.params, start.iterations, start.n_distances
            method = f"{seeding.method}, then k-means ({iterations} iterations)"
        elif self.start_from == "random":
            params, stats = random_start(engine, params, spec.family, spec.reg, seed_value)
            n_distances, method = int(stats.scal[NDIST_POINTS]), f"{seeding.method}, then random responsibilities"
        else:
            return seeding, params
        seeding = replace(seeding, seconds=seeding.seconds + time.perf_counter() - t0,
                          n_distances=seeding.n_distances + n_distances, method=method)
        return seeding, self.with_given(params)

    def with_given(self, params: Params) -> Params:
        """``params`` with the given weights and covariances put in."""
        if self.weights is not None:
            params = params.replace(weights=self.weights)
        if self.covariances is not None:
            params = params.replace(covariances=self.covariances)
        return params
