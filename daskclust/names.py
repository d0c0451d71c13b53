"""Names declared once: the per-chunk state kept on the workers, and the random streams.

Per-chunk state (``Chunk.state``, kept beside the chunk between passes, saved in
checkpoints and in a state store when streaming) is keyed by these strings.
Random numbers come from counter-based streams, ``stream_key(seed, STREAM, ...)``
(:mod:`daskclust.kernels.rng`) or ``np.random.default_rng([seed, STREAM, ...])``: a
draw depends on the seed, the stream and its counters only, never on the number
of workers or the order in which chunks run. Two uses must never share a stream id.
"""

from __future__ import annotations

# -- per-chunk state -----------------------------------------------------------------------
STATE_K = "K"
"""K(n): each row's truncated cluster set, best first, (n, C') ids of
:func:`~daskclust.kernels.estep.cluster_id_dtype` (the E-step)."""
STATE_SEED_LABEL = "seed_label"
"""Each row's seed centre, left by the seeding until the first E-step builds K(n) from it."""
STATE_MIND2 = "mind2"
"""Seeding: each row's squared distance to its nearest candidate so far."""
STATE_AFKMC2_D2 = "afk_d2"
"""AFK-MC2: each row's squared distance to the first centre (its proposal mass)."""

STATE_CELL_PREFIX = "tree_"
"""Cell EM (Verbeek et al. 2006): the chunk's kd-tree, one state array per field of ``kernels.kdtree.KDTree``."""
STATE_CELL_FRONTIER = "cell_frontier"
"""Cell EM: the chunk's part of the partition, node indices of its tree."""
STATE_CELL_K = "cell_K"
"""Cell EM: each frontier cell's truncated set K(A), (cells, C') int32."""

# -- the data's fingerprint -----------------------------------------------------------------
FINGERPRINT_CONTENT = "content"
"""Key of the data's content fingerprint (:meth:`daskclust.engine.Engine.content_fingerprint`) in its
fingerprint (:meth:`daskclust.data.ChunkedData.fingerprint`): added once a fit has read the data, before
anything derived from them (checkpoint, tree store, model) is saved."""

# -- random streams ------------------------------------------------------------------------
STREAM_DRAW = 11
"""Seeding: rows drawn in proportion to a mass (exponential keys), per step and chunk."""
STREAM_BERNOULLI = 12
"""k-means||: the oversampling draws of each round, per round, keyed by the row's place in the source."""
STREAM_PROPOSAL = 13
"""AFK-MC2: the proposal draws inside each chunk."""
STREAM_SAMPLE = 14
"""k-means||: the uniform row sample of each chunk on which the driver runs the rounds."""
STREAM_REDUCTION = 21
"""k-means||: the greedy k-means++ runs of the reduction on the driver, per run."""
STREAM_KMEANSPP = 22
"""k-means++: the greedy steps' draws over the first pass's sample, on the driver."""
STREAM_AFKMC2_SPLIT = 31
"""AFK-MC2: the multinomial split of the proposal draws over the chunks (driver)."""
STREAM_AFKMC2_CHAINS = 32
"""AFK-MC2: the Markov chains' acceptance draws (driver)."""
STREAM_CORESET_SPLIT = 51
"""Lightweight coreset: the multinomial split of the m draws over the chunks (driver)."""
STREAM_CORESET_ROWS = 52
"""Lightweight coreset: the rows drawn inside each chunk."""
STREAM_SKETCH_SIGNS = 61
"""Sketch: the random sign flips D of the preconditioning (driver)."""
STREAM_SKETCH_SHARED = 62
"""Sketch: the Q_S features every row keeps (driver)."""
STREAM_SKETCH_ROWS = 63
"""Sketch: each row's Q - Q_S kept features, counter r * (Q - Q_S) + j for source row r."""
STREAM_SKETCH_SEEDING = 64
"""Seeding on sketches: the k-means++ draws over the gathered sample (driver)."""
STREAM_GREEDY = 65
"""Greedy mixture learning: the random halves of the cells candidates are made from (driver)."""
STREAM_ESTEP = 41
"""E-step: exploratory and sampled candidates, per iteration and chunk."""
STREAM_RANDOM_START = 42
"""A mixture's random start: each row's random responsibilities, per chunk."""
STREAM_PARTIAL_FIT_START = 43
"""A stream's start (partial_fit): the rows of its first chunk that its k-means sees."""
STREAM_PARTIAL_FIT_SWAP = 44
"""A k-means stream's swaps (partial_fit): the candidate rows drawn from each chunk, per step."""
STREAM_BALL_INDEX = 71
"""Ball index: the group centres' initial draw."""
STREAM_PRUNING_PROBE = 73
"""The probe that decides whether a ball tree prunes (and its row sample)."""
