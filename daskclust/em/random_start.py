"""scikit-learn's "random" start of a mixture: the family's M-step from random responsibilities.

Every row n gives every component c the responsibility q_c(n) = u_nc / sum_c' u_nc' with u_nc ~ U(0, 1)
(scikit-learn's ``GaussianMixture(init_params="random")``); one pass accumulates the family's statistics
of these responsibilities (:func:`~daskclust.kernels.estep.random_responsibility_stats`) and the M-step
makes the first parameters: every component near the data's mean with about the data's covariance and
weight 1 / C. The draws are keyed by the seed and the chunk, so the start does not depend on the workers.
The pass evaluates N C responsibilities whatever the search: a start for scikit-learn's semantics, not for
large C. Each row keeps the seeding's label, from which the first E-step builds K(n).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.ops import Chunk
from ..kernels.estep import random_responsibility_stats
from ..kernels.rng import stream_key
from ..models import Family, Params, SuffStats
from ..names import STREAM_RANDOM_START


@dataclass
class RandomResponsibilitiesOp:
    """The family's statistics of random responsibilities, centred on the means of ``kernel``."""

    family: Family
    kernel: tuple
    seed: int

    def new_acc(self) -> SuffStats:
        C, D = self.kernel.means.shape
        return self.family.new_stats(C, D)

    def run(self, chunk: Chunk, acc: SuffStats) -> None:
        key = stream_key(self.seed, STREAM_RANDOM_START, chunk.index)
        random_responsibility_stats(chunk.X, chunk.w, self.kernel, key, acc.arrays(), acc.scal)

    @staticmethod
    def merge(a: SuffStats, b: SuffStats) -> SuffStats:
        return a.merge(b)


def random_start(engine, params: Params, family: Family, reg: float, seed: int) -> tuple[Params, SuffStats]:
    """The M-step of random responsibilities (module docstring) on ``engine``; ``params`` only centre the
    statistics. Returns the new parameters and the statistics (their distance count is the pass's work)."""
    stats = engine.map_reduce(RandomResponsibilitiesOp(family, family.kernel_params(params), seed))
    return family.m_step(stats, params, reg), stats
