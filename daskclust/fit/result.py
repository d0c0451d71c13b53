"""What a fit returns: :class:`FitResult`, with its seeding's and coreset's figures typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from ..models import Params


class HistoryRow(TypedDict, total=False):
    """One iteration of a fit (``history_``; the columns of :data:`daskclust.em.loop.HISTORY_FIELDS`)."""

    iteration: int
    data: str
    free_energy: float
    quantization_error: float
    sigma2: float
    n_distances: int
    n_distances_points: int
    n_distances_centres: int
    distance_speedup: float
    n_changed: int
    seconds: float


@dataclass(frozen=True)
class SeedingFigures:
    """What the seeding of the kept run cost (with the mixtures' k-means start, and a coreset
    fit's assignment pass on the full data), and which method it was."""

    seconds: float
    n_distances: int
    method: str

    def plus(self, seconds: float, n_distances: int, method: str | None = None) -> SeedingFigures:
        return SeedingFigures(self.seconds + seconds, self.n_distances + n_distances, method or self.method)

    def as_meta(self) -> dict:
        """As a checkpoint's metadata record it."""
        return {"seconds": self.seconds, "n_distances": self.n_distances, "method": self.method}

    @classmethod
    def from_meta(cls, meta: dict) -> SeedingFigures:
        return cls(float(meta["seconds"]), int(meta["n_distances"]), str(meta["method"]))


@dataclass
class FitRecord:
    """What a fit records of itself in its checkpoints, and of its data in its model: the estimator's
    kind and parameters (runtime settings left out), the data's fingerprint
    (:meth:`~daskclust.data.ChunkedData.fingerprint`, the content's added once the data are read),
    where the data and the weights are stored (``{"url", "array"}``, None in memory), the seed and
    the seeding's figures (None before the seeding)."""

    kind: str
    params: dict
    fingerprint: dict
    seed: int
    source: dict | None
    weights: dict | None
    seeding: SeedingFigures | None = None

    def as_json(self) -> dict:
        """As checkpoints store it (:func:`daskclust.persistence.checkpoint.check_meta` reads it back)."""
        return {"kind": self.kind, "params": self.params, "data": self.fingerprint, "seed": self.seed,
                "source": self.source, "weights": self.weights,
                "seeding": None if self.seeding is None else self.seeding.as_meta()}

    @classmethod
    def from_json(cls, meta: dict) -> FitRecord:
        """From a checkpoint's metadata, already checked field by field."""
        seeding = meta.get("seeding")
        return cls(meta["kind"], meta["params"], meta["data"], meta["seed"], meta.get("source"), meta.get("weights"),
                   None if seeding is None else SeedingFigures.from_meta(seeding))

    def training_data(self) -> dict:
        """The model's record of its training data (``training_data_``): location, weights, fingerprint."""
        return {"source": self.source, "weights": self.weights, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class CoresetFigures:
    """A coreset fit's coreset (``coreset_``): its size, the seconds and distances of its passes, its
    total weight, and the distances of the full data's assignment pass."""

    size: int
    seconds: float
    n_distances: int
    total_weight: float
    assignment_distances: int = 0

    def as_dict(self) -> dict:
        return {"size": self.size, "seconds": self.seconds, "n_distances": self.n_distances,
                "total_weight": self.total_weight, "assignment_distances": self.assignment_distances}


@dataclass
class FitResult:
    """A finished fit: the kept run's parameters, M-steps, convergence, inertia, history and
    cluster sizes, with its seed, seeding figures, the bytes read, the coreset's figures and
    what a variant records beside (``extras``: cells' refinement rounds, greedy's components)."""

    params: Params
    n_iter: int
    converged: bool
    inertia: float
    history: list[HistoryRow]
    sizes: np.ndarray | None
    seed: int
    seeding: SeedingFigures
    bytes_read: int = 0
    seconds: float = 0.0
    data: dict = field(default_factory=dict)
    """The data's fingerprint, its location and its weights' (as models and checkpoints record them)."""
    coreset: CoresetFigures | None = None
    extras: dict = field(default_factory=dict)
