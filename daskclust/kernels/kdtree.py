"""Per-chunk kd-trees with principal-component splits and cached cell statistics (Verbeek et al. 2006 Secs. 3-4).

The accelerated EM of Verbeek et al. 2006 shares one responsibility q_A(s) among the points
of a cell A and needs, per cell, only the averaged sufficient statistics
(Eqs. 9-13)

    n_A = sum_{i in A} w_i,   <x>_A = sum w_i x_i / n_A,   <x x^T>_A = sum w_i x_i x_i^T / n_A

(the diagonal variant, Sec. 3.2, needs only the diagonal <x^2>_A). Cells are the
nodes of a kd-tree (Sec. 4) whose nodes are split at the bisector of their
first principal component: the hyperplane through the node's mean <x>_A
orthogonal to the leading eigenvector v of its covariance. A partition of the
chunk is a *fringe* of nodes (:func:`frontier_at_depth`); refining it replaces a
node by its two children (:func:`expand`).

Array layout (:class:`KDTree`, m nodes, numbered breadth first: the root is 0,
a node's children are ``right = left + 1`` and come after it, so the nodes of
one depth are contiguous and every parent precedes its children):

    left, right, parent, depth, start, stop : (m,) int64   (left = right = -1 for a leaf, parent[0] = -1)
    order     : (n,) int64 permutation of the chunk's rows; node i holds rows order[start[i]:stop[i]]
                (ascending within every leaf: the partition is stable)
    count     : (m,) float64, n_A = sum of the node's weights
    mean      : (m, D) float64, <x>_A
    second    : (m, D, D) (full) or (m, D) (diag) float64, the *within-cell covariance*
                <(x - <x>_A)(x - <x>_A)^T>_A (the second central moment, normalised by n_A),
                or its diagonal. It is computed from rows centred on the node mean, so it
                does not suffer the cancellation of <x x^T>_A - <x>_A <x>_A^T when the cell
                is small against its distance from the origin; the paper's raw moment is
                <x x^T>_A = second + <x>_A <x>_A^T (a sum of positive terms, no
                cancellation), given with the covariance by :func:`second_moments`.
    direction : (m, D) float64, the unit split axis v of an internal node (zeros for a leaf);
                row x goes to the left child iff sum_j (x_j - mean_j) v_j <= 0 (float64,
                in the order j = 0..D-1), to the right one otherwise.

Splitting. v is found by power iteration on the node's weighted covariance,
starting from the coordinate axis of largest variance (the first on ties), and
stops when ||v_{k+1} - v_k||_2 <= ``POWER_TOL`` (1e-8) or after
``POWER_MAX_ITER`` (32) products (the covariance is positive semi-definite, so
v never flips sign between steps). With lambda_2 / lambda_1 <= 1/2 it stops
within ~1e-8 of the leading eigenvector; when the top eigenvalues are close it
may stop at the cap, with a direction of nearly the largest variance (which is
all a split needs; a node of clustered 16-D data averages ~20-30 products).
When the node has at least D rows and D <= ``EXPLICIT_MAX_D`` the covariance
is formed (D(D+1)/2 multiply-adds a row, less than the ~20-32 products over
the rows it replaces) and each product costs D^2; otherwise each product is a
pass over the node's rows (2 D multiply-adds a row), never forming a D x D
matrix. A node stays a leaf when it has at most
``leaf_size`` rows, when its rows of positive weight are all identical
(zero covariance: the shared responsibilities of Eq. 9 are then exact, and no
split could change F), when its weights sum to 0, or when rounding leaves one
side of the bisector empty; every split makes both children strictly smaller,
so the build terminates.

Weights. Counts, means and covariances are weighted sums (``w`` empty = unit
weights; zero weights allowed). A node whose weights sum to 0 has count 0 and,
so that nothing is NaN, the *unweighted* mean and covariance of its rows; it is
a leaf, and anything that multiplies its statistics by its count ignores them.

Cost. Each level of the tree costs O(n D) (two passes over the rows for the
moments, one over the weights, one for the partition) plus the power
iterations (at most 32 passes of O(n D), or, for D <= 64, one O(n D^2) pass
forming the covariances); the full covariances cost O(D^2) per internal node
(merged from the children's, Chan et al.'s pairwise update, again a sum of
positive terms) plus O(n D^2) for the leaves. With splits balanced to within a
constant fraction the depth is O(log n); splits through the mean are not
balanced in general and the depth is only bounded by n - 1 (100,000 Pareto(0.5)
rows: depth 26 against 20 for Gaussian blobs; the 1,000 rows 2^i: depth 131).
The build is iterative (a breadth-first queue, no recursion) and deterministic:
the same input gives the same tree bit for bit. Measured (2 cores, 100,000
float32 rows of 20 Gaussian blobs, leaf_size 16, diag / full): D = 2
0.04 / 0.06 s, D = 16 0.32 / 0.39 s; leaf_size 1: D = 2 0.15 / 0.14 s, D = 16
0.83 / 1.0 s (the full tree then holds 2n - 1 covariances of D^2 floats).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .validation import first_invalid_weight, first_nonfinite_row

# Compiled into the kernels: changing them at run time has no effect.
POWER_MAX_ITER = 32
"""Most power-iteration products per split."""
POWER_TOL = 1e-8
"""The power iteration stops when successive unit vectors differ by at most this (2-norm)."""
EXPLICIT_MAX_D = 64
"""Up to this many features (and for nodes of at least D rows) the split forms the covariance."""


class KDTree(NamedTuple):
    """A chunk's kd-tree as flat arrays (the layout is in the module docstring)."""

    left: np.ndarray
    right: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    order: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    second: np.ndarray
    direction: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.left.shape[0])

    @property
    def full(self) -> bool:
        """True when ``second`` holds full (D, D) covariances."""
        return self.second.ndim == 3


# ----------------------------------------------------------------------------- kernels


@njit
def _moments(X, w, order, s, e, mean, var, c, S, form):
    """Statistics of the rows ``order[s:e]``: mean (OUT, D), diagonal variance (OUT, D).

    With ``form`` also the weighted covariance S (OUT, D x D, both triangles).
    Returns (n_A, identical): the weight sum, and whether every row of positive
    weight (every row when n_A = 0) equals the first one exactly. Rows are
    centred on that first row for the mean and on the mean for the variances,
    so neither suffers cancellation. When n_A = 0 the unit-weight statistics
    are written.
    """
    D = X.shape[1]
    has_w = w.shape[0] > 0
    mass = 0.0
    ref = -1
    for k in range(s, e):
        r = order[k]
        wt = w[r] if has_w else 1.0
        if wt > 0.0:
            mass += wt
            if ref < 0:
                ref = r
    unit = mass == 0.0  # no weight at all: unweighted statistics
    if unit:
        ref = order[s]
    for j in range(D):
        c[j] = 0.0
    identical = True
    for k in range(s, e):
        r = order[k]
        wt = 1.0 if unit or not has_w else w[r]
        if wt == 0.0:
            continue
        for j in range(D):
            t = float(X[r, j]) - float(X[ref, j])
            if t != 0.0:
                identical = False
            c[j] += wt * t
    n_eff = float(e - s) if unit else mass
    for j in range(D):
        mean[j] = float(X[ref, j]) + c[j] / n_eff
        var[j] = 0.0
    if form:
        for a in range(D):
            for b in range(D):
                S[a, b] = 0.0
    for k in range(s, e):
        r = order[k]
        wt = 1.0 if unit or not has_w else w[r]
        if wt == 0.0:
            continue
        for j in range(D):
            c[j] = float(X[r, j]) - mean[j]
        if form:
            for a in range(D):
                wc = wt * c[a]
                for b in range(a, D):
                    S[a, b] += wc * c[b]
        else:
            for j in range(D):
                var[j] += wt * c[j] * c[j]
    if form:
        for a in range(D):
            for b in range(a, D):
                S[a, b] /= n_eff
                S[b, a] = S[a, b]
            var[a] = S[a, a]
    else:
        for j in range(D):
            var[j] /= n_eff
    return mass, identical


@njit
def _normalise(u):
    """u /= ||u||_2 (IN/OUT), scaled by max|u_j| first so that u_j^2 cannot overflow (covariances
    reach max|x|^2). False when u is zero or not finite."""
    amax = 0.0
    for j in range(u.shape[0]):
        amax = max(amax, abs(u[j]))
    if not (amax > 0.0 and np.isfinite(amax)):
        return False
    nrm = 0.0
    for j in range(u.shape[0]):
        u[j] /= amax
        nrm += u[j] * u[j]
    nrm = np.sqrt(nrm)
    for j in range(u.shape[0]):
        u[j] /= nrm
    return True


@njit
def _step(u, v):
    """||u - v||_2, then v = u (OUT)."""
    diff = 0.0
    for j in range(u.shape[0]):
        diff += (u[j] - v[j]) * (u[j] - v[j])
        v[j] = u[j]
    return np.sqrt(diff)


@njit
def _power_explicit(S, v, u, j0):
    """Leading eigenvector of the D x D covariance S into v (OUT), from axis j0.

    Returns the number of products, or -1 when S v vanishes (no direction).
    """
    D = S.shape[0]
    for j in range(D):
        v[j] = 0.0
    v[j0] = 1.0
    for it in range(POWER_MAX_ITER):
        for a in range(D):
            t = 0.0
            for b in range(D):
                t += S[a, b] * v[b]
            u[a] = t
        if not _normalise(u):
            return -1
        if _step(u, v) <= POWER_TOL:
            return it + 1
    return POWER_MAX_ITER


@njit
def _power_implicit(X, w, order, s, e, mean, v, u, c, j0):
    """As :func:`_power_explicit`, each product sum_i w_i c_i (c_i . v) a pass over the rows
    (c_i = x_i - mean), never forming the covariance. Only for nodes of positive weight."""
    D = X.shape[1]
    has_w = w.shape[0] > 0
    for j in range(D):
        v[j] = 0.0
    v[j0] = 1.0
    for it in range(POWER_MAX_ITER):
        for j in range(D):
            u[j] = 0.0
        for k in range(s, e):
            r = order[k]
            wt = w[r] if has_w else 1.0
            if wt == 0.0:
                continue
            p = 0.0
            for j in range(D):
                c[j] = float(X[r, j]) - mean[j]
                p += c[j] * v[j]
            p *= wt
            for j in range(D):
                u[j] += p * c[j]
        if not _normalise(u):
            return -1
        if _step(u, v) <= POWER_TOL:
            return it + 1
    return POWER_MAX_ITER


@njit
def _partition(X, order, scratch, s, e, mean, v):
    """Stable partition of ``order[s:e]`` (IN/OUT) by the side of the bisector; returns the
    first position of the right child (rows with (x - mean) . v > 0)."""
    D = X.shape[1]
    nl = s
    nr = 0
    for k in range(s, e):
        r = order[k]
        p = 0.0
        for j in range(D):
            p += (float(X[r, j]) - mean[j]) * v[j]
        if p <= 0.0:
            order[nl] = r
            nl += 1
        else:
            scratch[nr] = r
            nr += 1
    for k in range(nr):
        order[nl + k] = scratch[k]
    return nl


@njit
def _grow_int(a, cap):
    out = np.full(cap, -1, dtype=np.int64)
    out[: a.shape[0]] = a
    return out


@njit
def _grow_float(a, cap):
    out = np.zeros((cap,) + a.shape[1:])
    out[: a.shape[0]] = a
    return out


@njit(nogil=True, cache=True)
def build_topology(X, w, leaf_size, explicit_max_d):
    """The tree of one chunk: nodes, their counts, means, diagonal variances and split axes.

    Parameters
    ----------
    X : (n, D) float32 or float64
        The chunk (finite).
    w : (n,) float64 or (0,) float64
        Weights (finite, >= 0); an empty array means weight 1 for every row.
    leaf_size : int >= 1
        Nodes of at most this many rows are not split.
    explicit_max_d : int
        Splits form the covariance when D <= explicit_max_d and the node has >= D rows
        (``EXPLICIT_MAX_D``; the result is the same eigenvector either way, up to rounding).

    Returns
    -------
    (left, right, parent, depth, start, stop, order, count, mean, var, direction, n_products)
    with the layout of the module docstring (``var``: the diagonal of ``second``) and
    the total number of power-iteration products.
    """
    n, D = X.shape
    cap = max(1, min(2 * n - 1, 4 * (n // leaf_size) + 3))
    left = np.full(cap, -1, dtype=np.int64)
    right = np.full(cap, -1, dtype=np.int64)
    parent = np.full(cap, -1, dtype=np.int64)
    depth = np.zeros(cap, dtype=np.int64)
    start = np.zeros(cap, dtype=np.int64)
    stop = np.zeros(cap, dtype=np.int64)
    count = np.zeros(cap)
    mean = np.zeros((cap, D))
    var = np.zeros((cap, D))
    direction = np.zeros((cap, D))
    order = np.arange(n)
    scratch = np.empty(n, dtype=np.int64)
    c = np.empty(D)
    u = np.empty(D)
    S = np.empty((D, D)) if D <= explicit_max_d else np.empty((0, 0))
    n_products = 0
    if n == 0:
        return (left[:0].copy(), right[:0].copy(), parent[:0].copy(), depth[:0].copy(), start[:0].copy(),
                stop[:0].copy(), order, count[:0].copy(), mean[:0].copy(), var[:0].copy(), direction[:0].copy(),
                n_products)
    stop[0] = n
    m = 1
    i = 0
    while i < m:  # breadth first: node i's children are appended at m, m + 1
        s, e = start[i], stop[i]
        form = D <= explicit_max_d and e - s >= D and e - s > leaf_size
        mass, identical = _moments(X, w, order, s, e, mean[i], var[i], c, S, form)
        count[i] = mass
        if e - s > leaf_size and mass > 0.0 and not identical:
            j0 = 0
            for j in range(1, D):
                if var[i, j] > var[i, j0]:
                    j0 = j
            v = direction[i]
            if form:
                it = _power_explicit(S, v, u, j0)
            else:
                it = _power_implicit(X, w, order, s, e, mean[i], v, u, c, j0)
            mid = s
            if it > 0:
                n_products += it
                mid = _partition(X, order, scratch, s, e, mean[i], v)
            if s < mid < e:
                if m + 2 > cap:
                    cap = min(2 * n - 1, 2 * cap)
                    left, right, parent = _grow_int(left, cap), _grow_int(right, cap), _grow_int(parent, cap)
                    depth, start, stop = _grow_int(depth, cap), _grow_int(start, cap), _grow_int(stop, cap)
                    count, mean, var = _grow_float(count, cap), _grow_float(mean, cap), _grow_float(var, cap)
                    direction = _grow_float(direction, cap)
                for k in range(2):
                    child = m + k
                    parent[child] = i
                    depth[child] = depth[i] + 1
                    left[child] = -1
                    right[child] = -1
                start[m], stop[m] = s, mid
                start[m + 1], stop[m + 1] = mid, e
                left[i], right[i] = m, m + 1
                m += 2
            else:  # no direction, or rounding put every row on one side
                for j in range(D):
                    direction[i, j] = 0.0
        i += 1
    return (left[:m].copy(), right[:m].copy(), parent[:m].copy(), depth[:m].copy(), start[:m].copy(),
            stop[:m].copy(), order, count[:m].copy(), mean[:m].copy(), var[:m].copy(), direction[:m].copy(),
            n_products)


@njit(nogil=True, cache=True)
def full_covariances(X, w, left, right, start, stop, order, count, mean, out):
    """Within-cell covariances (OUT: ``out``, (m, D, D)) of every node of a tree.

    Leaves from their rows centred on the node mean (unit weights when the node's
    weights sum to 0, as for its mean); an internal node A with children L, R
    from theirs (Chan et al.'s pairwise update, n = n_L + n_R):

        C_A = (n_L C_L + n_R C_R) / n + (n_L n_R / n^2) (<x>_L - <x>_R)(<x>_L - <x>_R)^T

    so the whole tree costs O(D^2) per internal node plus O(n D^2) for the leaves.
    Children are numbered after their parent, so one descending sweep suffices.
    """
    m = left.shape[0]
    D = X.shape[1]
    has_w = w.shape[0] > 0
    c = np.empty(D)
    d = np.empty(D)
    for i in range(m - 1, -1, -1):
        C = out[i]
        for a in range(D):
            for b in range(D):
                C[a, b] = 0.0
        if left[i] < 0:
            unit = count[i] == 0.0
            n_eff = float(stop[i] - start[i]) if unit else count[i]
            for k in range(start[i], stop[i]):
                r = order[k]
                wt = 1.0 if unit or not has_w else w[r]
                if wt == 0.0:
                    continue
                for j in range(D):
                    c[j] = float(X[r, j]) - mean[i, j]
                for a in range(D):
                    wc = wt * c[a]
                    for b in range(a, D):
                        C[a, b] += wc * c[b]
            for a in range(D):
                for b in range(a, D):
                    C[a, b] /= n_eff
                    C[b, a] = C[a, b]
        else:
            lo, hi = left[i], right[i]
            nl, nr = count[lo], count[hi]
            nt = nl + nr  # > 0: only nodes of positive weight are split
            fl, fr, fx = nl / nt, nr / nt, nl * nr / (nt * nt)
            for j in range(D):
                d[j] = mean[lo, j] - mean[hi, j]
            for a in range(D):
                for b in range(a, D):
                    C[a, b] = fl * out[lo, a, b] + fr * out[hi, a, b] + fx * d[a] * d[b]
                    C[b, a] = C[a, b]


# ----------------------------------------------------------------------------- Python API


def build_tree(X: np.ndarray, w: np.ndarray, leaf_size: int, full: bool) -> KDTree:
    """kd-tree of one chunk with principal-component splits and cached cell statistics.

    X : (n, D) float32 / float64 rows (other dtypes are converted to float64);
    w : (n,) weights >= 0, or a (0,) array for unit weights; leaf_size >= 1: nodes of at
    most this many rows stay leaves; full: ``second`` holds the (D, D) within-cell
    covariance of each node, else its diagonal. See the module docstring for the layout.
    """
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    X = np.ascontiguousarray(X)
    w = np.ascontiguousarray(np.asarray(w, dtype=np.float64).reshape(-1))
    if w.shape[0] not in (0, X.shape[0]):
        raise ValueError(f"w must have {X.shape[0]} entries or none, got {w.shape[0]}")
    if int(leaf_size) != leaf_size or leaf_size < 1:
        raise ValueError(f"leaf_size must be an integer >= 1, got {leaf_size!r}")
    if first_nonfinite_row(X) >= 0:
        raise ValueError("X holds NaN or infinite values")
    if first_invalid_weight(w) >= 0:
        raise ValueError("w must be 0 or in [WEIGHT_MIN, WEIGHT_MAX] (kernels.validation)")
    (left, right, parent, depth, start, stop, order, count, mean, var, direction,
     _) = build_topology(X, w, int(leaf_size), EXPLICIT_MAX_D)
    if full:
        second = np.empty((left.shape[0], X.shape[1], X.shape[1]))
        full_covariances(X, w, left, right, start, stop, order, count, mean, second)
    else:
        second = var
    return KDTree(left, right, parent, depth, start, stop, order, count, mean, second, direction)


def second_moments(tree: KDTree, nodes=None) -> tuple[np.ndarray, np.ndarray]:
    """(within-cell covariance, raw average second moment <x x^T>_A) of ``nodes`` (all by default).

    Full trees give (k, D, D) arrays, diagonal ones (k, D) (<x^2>_A, Verbeek et al. 2006 Sec. 3.2).
    The raw moment is covariance + <x>_A <x>_A^T, a sum of positive terms.
    """
    nodes = slice(None) if nodes is None else np.asarray(nodes, dtype=np.int64)
    central = tree.second[nodes]
    mu = tree.mean[nodes]
    if tree.full:
        raw = central + mu[..., :, None] * mu[..., None, :]
    else:
        raw = central + mu * mu
    return central, raw


def is_leaf(tree: KDTree, nodes) -> np.ndarray:
    """Whether each of ``nodes`` is a leaf (bool array, or bool for a single node)."""
    return tree.left[nodes] < 0


def children(tree: KDTree, nodes) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) children of ``nodes``; -1 for leaves."""
    return tree.left[nodes], tree.right[nodes]


def node_rows(tree: KDTree, node: int) -> np.ndarray:
    """Row indices (into the chunk) of one node (ascending for a leaf)."""
    return tree.order[tree.start[node]:tree.stop[node]]


def _by_start(tree: KDTree, nodes: np.ndarray) -> np.ndarray:
    nodes = np.asarray(nodes, dtype=np.int64)
    return nodes[np.argsort(tree.start[nodes], kind="stable")]


def frontier_at_depth(tree: KDTree, depth: int) -> np.ndarray:
    """The partition made of every node at ``depth`` and every leaf above it.

    Returned as node indices ordered by their first row position (``start``), so
    their row ranges tile ``order`` from 0 to n: every row is in exactly one cell.
    Depth 0 is the root alone; a depth below the deepest leaf gives the leaves.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    mask = (tree.depth == depth) | ((tree.left < 0) & (tree.depth < depth))
    return _by_start(tree, np.flatnonzero(mask))


def leaves(tree: KDTree) -> np.ndarray:
    """The finest partition: every leaf, ordered by ``start``."""
    return _by_start(tree, np.flatnonzero(tree.left < 0))


def expand(tree: KDTree, frontier, nodes) -> np.ndarray:
    """The partition ``frontier`` with each internal node of ``nodes`` replaced by its two children.

    Leaves in ``nodes`` stay; nodes not in the frontier are ignored. Ordered by ``start``.
    """
    frontier = np.asarray(frontier, dtype=np.int64)
    pick = np.isin(frontier, np.asarray(nodes, dtype=np.int64)) & (tree.left[frontier] >= 0)
    split = frontier[pick]
    return _by_start(tree, np.concatenate([frontier[~pick], tree.left[split], tree.right[split]]))
