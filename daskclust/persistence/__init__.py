"""Every store daskclust writes and reads back, each kind in one module: its layout, its format
version, its checks on read, and its writing through the rules of :mod:`daskclust.io` (kind marks,
atomic writes, nothing replaced that daskclust did not write, nothing deleted by pattern).

``model``         fitted models (an xarray Dataset in zarr)
``checkpoint``    checkpoint directories of a running fit
``chunk_states``  each chunk's per-row state under a store (checkpoints, tree stores), and the state
                  store of a fit keeping its per-row state on disk
``trees``         tree stores: each chunk's kd-tree, reused by later fits on the same data
``sketch``        sketch stores: the values and indices of SGMM sketches and their transform
``outputs``       per-row outputs: labels, distances, scores
``dataset``       the synthetic data sets of ``daskclust make-data``

No other module calls zarr for daskclust's own stores (``tests/test_layers.py``); users' inputs
are read by :mod:`daskclust.data.sources`.
"""

RUNTIME_PARAMS = ("scheduler_address", "security", "state_store", "tree_store", "memory_budget", "verbose", "callback")
"""Parameters saying where and how a fit runs, not what it fits: never saved with a model or a
checkpoint, never restored from one (a tampered store must not point a refit at another scheduler);
a checkpoint that records one was altered."""
