"""Search strategies of the truncated E-step: which clusters each point evaluates.

Registry (``search=``; unknown names list the valid ones):

``"full"``        every cluster (exact; with C' < C, k-means-C' of Lücke & Forster 2019)
``"exhaustive"``  Forster & Lücke 2018 Alg. 1: G_c = c and its G - 1 nearest centres, recomputed from
                  the centres every iteration (on the driver, through a ball tree from C = 1024)
``"estimated"``   Forster & Lücke 2018 Alg. 2: G_c estimated from the distances the E-step computes
                  anyway (Eq. 8)
``"sampled"``     D-GMM, Exarchakis et al. 2022 Alg. 1: R candidates drawn from the similarity row of
                  each point's best cluster (Eqs. 9, 12)

Each strategy lives on the driver: it prepares what the E-step needs (a payload
of :mod:`daskclust.search.payloads`, broadcast with the centres, which runs the
E-step kernel on the workers and owns the strategy's extra accumulator) and
digests that accumulator when the E-step returns.
"""

from __future__ import annotations

from ..errors import InvalidParameterError
from .strategies import (
    EstimatedSearch,
    ExhaustiveSearch,
    FullSearch,
    SampledSearch,
    Search,
    SearchConfig,
)

SEARCHES = {
    "full": FullSearch,
    "exhaustive": ExhaustiveSearch,
    "estimated": EstimatedSearch,
    "sampled": SampledSearch,
}


def make_search(name: str, config: SearchConfig) -> Search:
    try:
        cls = SEARCHES[name]
    except KeyError:
        valid = ", ".join(repr(k) for k in SEARCHES)
        raise InvalidParameterError(f"unknown search {name!r}; valid: {valid}") from None
    return cls(config)


__all__ = ["SEARCHES", "make_search", "Search", "SearchConfig"]
