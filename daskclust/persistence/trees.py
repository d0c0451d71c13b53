"""Tree stores (``CellGaussianMixture(tree_store=...)``): each chunk's kd-tree of Verbeek et al. 2006's
cells, written once and read by later fits on the same data instead of a pass over the rows.

Layout: a zarr group marked as a daskclust ``"trees"`` store, its root attribute
``daskclust_trees`` recording what the trees were built from -- the data's fingerprint (content
included), the leaf size and the covariance layout (``full``) --, and each chunk's tree and row
order as chunk states (:mod:`.chunk_states`). A store of other data or settings is refused, never
replaced; the trees read back are checked before any kernel walks them
(:mod:`daskclust.em.stored_state`).
"""

from __future__ import annotations

from collections.abc import Callable

import zarr

from ..io import Location, check_target, is_complete, mark, read_root_attrs, writing

RECORD_ATTR = "daskclust_trees"


def tree_record(location: Location) -> tuple[bool, object]:
    """Whether a complete tree store is at ``location``, and what it records it was built from (as
    stored: a damaged record is whatever was found, None when missing, and differs from every fit's)."""
    if not is_complete(location):
        return False, None
    return True, (read_root_attrs(location) or {}).get(RECORD_ATTR)


def write_tree_store(location: Location, record: dict, write_chunk_states: Callable[[str], object]) -> None:
    """A new tree store at ``location`` (nothing there but an incomplete one may be replaced) whose chunk
    states ``write_chunk_states(url)`` writes (the workers), recording ``record``; complete last."""
    check_target(location, "trees")
    with writing(location, "trees", checked=True) as target:
        zarr.open_group(target.url, mode="w", **target.zarr_kwargs)
        write_chunk_states(target.url)
        mark(target, "trees", complete=False, extra={RECORD_ATTR: record})
