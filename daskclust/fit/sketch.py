"""The steps of a fit on sketches (Kightley & Becker 2019): seeded by k-means++ on the sketches and
the hard bootstrap (:mod:`daskclust.seeding.sketch`), or from given means; a coreset of sketched
rows measures distances from the kept entries."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..seeding.sketch import seed_sketches
from .steps import MixtureSteps


@dataclass(frozen=True, eq=False, kw_only=True)
class SketchSteps(MixtureSteps):
    """``transform``: the sketch's (:class:`~daskclust.transforms.sketch.SketchTransform`);
    ``means``: given initial means in the raw space (preconditioned here), or None."""

    transform: object
    means: np.ndarray | None = None

    def seed(self, engine, spec, seed_value):
        """``spec.init`` as centres (already preconditioned: a coreset fit's second phase), else the
        given means, else the seeding on sketches."""
        centres = None
        if isinstance(spec.init, np.ndarray):
            centres = spec.init
        elif self.means is not None:
            centres = self.transform.precondition_rows(np.asarray(self.means, dtype=np.float64))
        seeding, params = seed_sketches(engine, spec.family, spec.n_clusters, self.transform.n_features,
                                        seed=seed_value, reg=spec.reg, centres=centres)
        return seeding, self.with_given(params)

    def coreset_builder(self, spec, seed_value):
        from ..transforms import LightweightCoreset, SketchGeometry

        return LightweightCoreset(spec.coreset, random_state=seed_value,
                                  geometry=SketchGeometry(self.transform.n_features, self.transform.n_kept))
