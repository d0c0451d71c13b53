"""The steps of fits on kd-tree cells (Verbeek et al. 2006): EM on cached cell statistics with a
refined partition (:class:`CellSteps`), and accelerated greedy mixture learning on the same cells
(:class:`GreedySteps`, Verbeek et al. 2006 Sec. 5). Both seed as the plain fit does, the trees built in the
seeding's first pass over the rows; given centres need no assignment pass (:func:`given_centres`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..data.ranges import check_not_too_small
from ..em.cell_loop import CountCellsOp, LeafErrorOp, RefineSettings, build_cells, build_op, run_cells
from ..em.greedy import GatherCellsOp, add_component
from ..em.loop import LoopState
from ..errors import InvalidDataError
from ..io import Location
from ..kernels.rng import stream_key
from ..models import Family
from ..models.inference import MixtureIndex
from ..names import FINGERPRINT_CONTENT, STREAM_GREEDY
from ..persistence.trees import tree_record
from ..seeding import SeedResult, check_init
from ..seeding.methods import first_draw_rows, round_sample_rate
from ..seeding.passes import DrawOp, FirstPassOp, NearestIndex, pruning_test
from .steps import MixtureSteps


def say_rounds(progress, rounds: list[dict]) -> None:
    for row in rounds:
        progress.say(f"cells: round {row['round']}, {row['cells']} cells of {row['leaves']} leaves, free energy "
                     f"{row['free_energy']:.6g}, {row['expanded']} expanded")


@dataclass(frozen=True, eq=False, kw_only=True)
class CellSteps(MixtureSteps):
    """EM on the cells of a kd-tree per chunk, the partition refined between rounds (``refine``);
    ``full``: the cells keep full second moments; ``tree_store``: where trees are kept between fits
    (read back when they were built on the same data with the same settings). Seeded as the
    mixtures are, without the k-means start (the seeds start EM on the cells)."""

    refine: RefineSettings
    full: bool
    tree_store: str | None = None

    def seed(self, engine, spec, seed_value: int):
        """The mixtures' seeding, whose first pass over the rows also builds the trees (unless ``tree_store``
        holds them); given centres with :func:`given_centres` then, one pass in all."""
        store = Location.parse(self.tree_store) if self.tree_store is not None else None
        if store is not None and tree_record(store)[0]:
            return super().seed(engine, spec, seed_value)
        engine.ride_along(build_op(self.refine, self.full, spec.n_clusters, engine.data.n_chunks))
        if isinstance(spec.init, str):
            return super().seed(engine, spec, seed_value)
        seeding = given_centres(engine, spec, seed_value, spread=self.covariances is None)
        return seeding, self.initial_params(spec, seeding)

    def trees(self, engine, n_clusters: int, resumed: bool = False):
        """The trees and the initial partition: built (during the seeding, or now), or read from
        ``tree_store``; a resumed fit's partition as its checkpoint restored it."""
        if resumed:
            return engine.map_reduce(CountCellsOp())
        built = engine.ridden()
        engine.ride_along(None)  # not taken by the seeding: built below instead
        store = Location.parse(self.tree_store) if self.tree_store is not None else None
        fingerprint = {**engine.data.fingerprint(), FINGERPRINT_CONTENT: engine.content_fingerprint()}
        return build_cells(engine, self.refine, self.full, store, fingerprint, n_clusters, built)

    def iterate(self, engine, spec, start, settings, search, progress, checkpointer):
        built = self.trees(engine, spec.n_clusters, resumed=start.iteration > 0)
        result, rounds = run_cells(engine, start, settings, search, self.refine, progress.row, self.full, built,
                                   checkpointer)
        say_rounds(progress, rounds)
        return result, {"refinement": rounds}


@dataclass(frozen=True, eq=False, kw_only=True)
class GreedySteps(CellSteps):
    """Greedy learning: from one component, add the best of ``n_candidates`` new components (each
    tried with ``partial_iter`` partial EM steps) and refit, while the score -- the held-out
    log-likelihood of ``X_val``, or minus the BIC -- improves by more than ``min_improvement``
    (relatively) within ``patience`` additions, up to ``n_components``. ``dense_family`` scores
    the held-out rows; ``n_truncated`` bounds C' as C grows."""

    n_components: int = 10
    n_truncated: int | None = None
    n_candidates: int = 5
    partial_iter: int = 30
    patience: int = 1
    min_improvement: float = 0.0
    X_val: np.ndarray | None = None
    dense_family: Family | None = None

    def iterate(self, engine, spec, start, settings, search, progress, checkpointer):
        """Greedy learning from ``start`` (one component), on one set of trees; the best model met, with
        the components and refinement rounds as extras."""
        built = self.trees(engine, spec.n_clusters)
        W = float(built[2])
        rng = np.random.default_rng(stream_key(settings.seed, STREAM_GREEDY))
        family = spec.family
        params, added, best, since = start.params, {"gain": 0.0, "evaluations": 0}, None, 0
        components, refinement = [], []
        for k in range(1, self.n_components + 1):
            n_truncated = k if self.n_truncated is None else min(self.n_truncated, k)
            now = spec.with_clusters(k, n_truncated)
            result, rounds = run_cells(engine, LoopState(0, params), now.settings(settings.seed), now.make_search(),
                                       self.refine, progress.row, self.full, built)
            say_rounds(progress, rounds)
            refinement.extend(rounds)
            F = result.history[-1]["free_energy"]
            row = {"k": k, "free_energy": F,
                   "bic": -2 * F * W + family.n_parameters(k, len(params.means[0])) * np.log(W),
                   "held_out": self.held_out(result.params), "gain": added["gain"],
                   "evaluations": added["evaluations"], "iterations": len(result.history), "cells": int(built[0])}
            components.append(row)
            progress.say(f"greedy: k = {k}, free energy {F:.6g}, BIC {row['bic']:.6g}"
                         + (f", held-out {row['held_out']:.6g}" if row["held_out"] is not None else ""))
            score = -row["bic"] if row["held_out"] is None else row["held_out"]
            if best is None or score > best[0] + self.min_improvement * abs(best[0]):
                best, since = (score, result), 0
            else:
                since += 1
            if since >= self.patience or k == self.n_components:
                break
            cells = engine.map_reduce(GatherCellsOp(family.kernel_params(result.params)))
            params, added = add_component(cells, result.params, self.full, self.n_candidates, self.partial_iter,
                                          spec.reg, rng)
            if len(params.means) == k:  # no candidate: nothing more to add
                break
        return best[1], {"components": components, "refinement": refinement}

    def held_out(self, params) -> float | None:
        """Mean exact log-likelihood of ``X_val`` under ``params`` (None without held-out rows)."""
        if self.X_val is None:
            return None
        return float(MixtureIndex(self.dense_family, params, exact=True).top(self.X_val, 1)[2].mean())


def given_centres(engine, spec, seed_value: int, spread: bool = True) -> SeedResult:
    """The seeding of given centres (``init`` an array) on cells: the seeding's first pass (validation, the data's
    moments; the trees ride along it) and no pass giving every row its nearest centre: the cell E-step starts
    each cell from the centre nearest to its mean. sigma^2 only starts the covariances not given: with
    ``spread``, the leaves' quantization error (:class:`LeafErrorOp`, each leaf's rows at the centre nearest to
    their mean: a bound from above of the rows' own, within the leaves' spread); without, the data's variance
    per feature stands in (no pass)."""
    t0 = time.perf_counter()
    data = engine.data
    C, D, init = spec.n_clusters, data.n_features, spec.init
    centres = check_init(init, C, D)
    draw = DrawOp(seed_value, 0, first_draw_rows(init, C, D, data.n_samples), D)
    rate = round_sample_rate(init, C, D, data.n_samples, spec.oversampling_factor, spec.init_rounds)
    first = engine.map_reduce(FirstPassOp(data.n_chunks, draw, rate))
    if first["W"].sum() <= 0:
        raise InvalidDataError("sample_weight sums to zero: no row has positive weight")
    check_not_too_small(first["max_abs"][0], data.dtype, D)
    W_all, _, ss = first["moments"]
    variance = float(ss.mean() / W_all)
    sigma2, n_distances = variance, 0
    if spread:
        dense, n_test = pruning_test(centres, seed_value)
        index = NearestIndex(centres, dense=dense)
        qe, W, n_leaf = engine.map_reduce(LeafErrorOp(index))
        sigma2, n_distances = float(qe) / (D * float(W)), int(n_test + index.n_build + n_leaf)
    return SeedResult(np.ascontiguousarray(centres), sigma2, time.perf_counter() - t0, n_distances, "array", variance)
