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

Splitting. For D = 2, v is the leading eigenvector of the node's 2 x 2 weighted
covariance in closed form (signed so that v points along the positive axis of
largest variance, where power iteration from that axis converges; that axis when
both eigenvalues are equal). Otherwise v is found by power iteration on the
covariance, starting from the coordinate axis of largest variance (the first on
ties), and stops when ||v_{k+1} - v_k||_2 <= ``POWER_TOL`` (1e-8) or after
``POWER_MAX_ITER`` (32) products (the covariance is positive semi-definite, so
v never flips sign between steps). With lambda_2 / lambda_1 <= 1/2 it stops
within ~1e-8 of the leading eigenvector; when the top eigenvalues are close it
may stop at the cap, with a direction of nearly the largest variance (which is
all a split needs; a node of clustered 16-D data averages ~20-30 products).
When D <= ``EXPLICIT_MAX_D`` the covariance is formed (from the sums of the split
that made the node, below) and each product costs D^2; otherwise each product is
a pass over the node's rows (2 D multiply-adds a row), never forming a D x D
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

Building. The rows are copied once (float64) and split depth first, each split a
stable partition of the node's rows in place (through a scratch copy: two
float64 copies of the chunk while it builds), so a node's rows are contiguous
(and a small subtree's stay in cache) and every leaf's rows stay ascending. The
split also sums, about the node's mean, the weights, c and c c^T (c = x - mean)
over the rows of its smaller child; the larger child's sums are the node's totals
(n_A times its covariance, and 0 for c) minus those. They give each child's mean
(the node's mean plus the shift: no cancellation against the origin) and the
covariance its own split needs. A leaf's statistics are then computed from its
rows, centred on its first row of positive weight for the mean (identical rows
give their value exactly) and on its mean for the covariance; an internal node's
count is its children's summed and its covariance is merged from theirs (Chan et
al.'s pairwise update, a sum of positive terms):

    C_A = (n_L C_L + n_R C_R) / n_A + (n_L n_R / n_A^2) (<x>_L - <x>_R)(<x>_L - <x>_R)^T.

The nodes are numbered breadth first at the end.

Cost. Each level costs O(n D) for the partition plus at most O(n D^2) for the
sums (D(D+1)/2 + D passes over the smaller children's rows); each leaf O(D^2) a
row, each internal node O(D^2). With splits balanced to within a constant
fraction the depth is O(log n); splits through the mean are not balanced in
general and the depth is only bounded by n - 1 (100,000 Pareto(0.5) rows: depth
26 against 20 for Gaussian blobs; the 1,000 rows 2^i: depth 131). The build is
iterative (a stack, no recursion) and deterministic: the same input gives the
same tree bit for bit. Measured (CPU seconds on the shared 2-core machine,
100,000 float32 rows of 20 Gaussian blobs, diag / full; in brackets the
breadth-first build over an index of the rows that this one replaced):
leaf_size 16, D = 2: 0.035 / 0.040 s (0.079 / 0.086 s), D = 16: 0.34 / 0.40 s
(0.51 / 0.58 s); leaf_size 1, D = 2: 0.20 / 0.21 s (0.28 / 0.29 s), D = 16:
1.05 / 1.70 s (1.17 / 1.60 s; the full tree then holds 2n - 1 covariances of
D^2 floats); 625,000 rows of a 2-D mixture (a chunk of the cells benchmark at
N = 10^7), leaf_size 16, full: 0.27 s (0.96 s).
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
"""Up to this many features the split forms the covariance."""


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
def _moments(X, w, s, e, mean, var, c, S, form):
    """Statistics of the rows ``X[s:e]`` (float64, contiguous; ``w`` their weights or empty):
    mean (OUT, D), diagonal variance (OUT, D).

    With ``form`` also the weighted covariance S (OUT, D x D, both triangles).
    Returns the weight sum n_A. Rows are centred on the first row of positive weight
    for the mean (so that identical rows give their value exactly) and on the mean for
    the variances, so neither suffers cancellation. When n_A = 0 the unit-weight
    statistics are written.
    """
    D = X.shape[1]
    has_w = w.shape[0] > 0
    mass = 0.0
    ref = -1
    for k in range(s, e):
        wt = w[k] if has_w else 1.0
        if wt > 0.0:
            mass += wt
            if ref < 0:
                ref = k
    unit = mass == 0.0  # no weight at all: unweighted statistics
    if unit:
        ref = s
    for j in range(D):
        c[j] = 0.0
    for k in range(s, e):
        wt = 1.0 if unit or not has_w else w[k]
        if wt == 0.0:
            continue
        for j in range(D):
            c[j] += wt * (X[k, j] - X[ref, j])
    n_eff = float(e - s) if unit else mass
    for j in range(D):
        mean[j] = X[ref, j] + c[j] / n_eff
        var[j] = 0.0
    if form:
        for a in range(D):
            for b in range(D):
                S[a, b] = 0.0
    for k in range(s, e):
        wt = 1.0 if unit or not has_w else w[k]
        if wt == 0.0:
            continue
        for j in range(D):
            c[j] = X[k, j] - mean[j]
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
    return mass


@njit
def _identical(X, w, s, e):
    """Whether every row of ``X[s:e]`` of positive weight equals the first one (stops at the first that differs)."""
    has_w = w.shape[0] > 0
    ref = -1
    for k in range(s, e):
        if has_w and w[k] == 0.0:
            continue
        if ref < 0:
            ref = k
            continue
        for j in range(X.shape[1]):
            if X[k, j] != X[ref, j]:
                return False
    return True


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
def _eigen_2x2(S, v, j0):
    """The leading eigenvector of the 2 x 2 covariance S into v (OUT) in closed form, the sign of axis j0
    (where power iteration from j0 converges); the axis j0 when both eigenvalues are equal (S = s I).
    Returns 1 (a product's worth), or -1 when S is zero or not finite."""
    a, b, c = S[0, 0], S[0, 1], S[1, 1]
    half = 0.5 * (a - c)
    if b == 0.0:
        if not (np.isfinite(a) and np.isfinite(c)) or (a == 0.0 and c == 0.0):
            return -1
        k = j0 if a == c else (0 if a > c else 1)
        v[0], v[1] = (1.0, 0.0) if k == 0 else (0.0, 1.0)
        return 1
    r = np.hypot(half, b)  # lambda_1 = (a + c) / 2 + r; (b, lambda_1 - a) and (lambda_1 - c, b) are eigenvectors
    if half >= 0.0:
        v[0], v[1] = half + r, b
    else:
        v[0], v[1] = b, r - half
    if not _normalise(v):
        return -1
    if v[j0] < 0.0:
        v[0], v[1] = -v[0], -v[1]
    return 1


@njit
def _power_explicit(S, v, u, j0):
    """Leading eigenvector of the D x D covariance S into v (OUT), from axis j0.

    Returns the number of products, or -1 when S v vanishes (no direction).
    """
    D = S.shape[0]
    if D == 2:
        return _eigen_2x2(S, v, j0)
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
def _power_implicit(X, w, s, e, mean, v, u, c, j0):
    """As :func:`_power_explicit`, each product sum_i w_i c_i (c_i . v) a pass over the rows ``X[s:e]``
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
            wt = w[k] if has_w else 1.0
            if wt == 0.0:
                continue
            p = 0.0
            for j in range(D):
                c[j] = X[k, j] - mean[j]
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
def _partition(X, w, order, Xs, ws, rs, s, e, mean, v):
    """Stable partition of the rows ``X[s:e]`` (with ``w`` and ``order``; IN/OUT) by the side of the
    bisector: rows with (x - mean) . v <= 0 first (the left child), the others after them through the
    scratch rows ``Xs``, ``ws``, ``rs``. Branch-free: each row is written to both sides. Returns the
    first position of the right child."""
    D = X.shape[1]
    has_w = w.shape[0] > 0
    nl = s
    nr = 0
    for k in range(s, e):
        p = 0.0
        for j in range(D):
            p += (X[k, j] - mean[j]) * v[j]
        g = 1 if p > 0.0 else 0
        for j in range(D):
            x = X[k, j]
            Xs[nr, j] = x
            X[nl, j] = x  # nl <= k: row k is read before it can be overwritten
        r = order[k]
        rs[nr] = r
        order[nl] = r
        if has_w:
            wt = w[k]
            ws[nr] = wt
            w[nl] = wt
        nl += 1 - g
        nr += g
    for k in range(nr):
        for j in range(D):
            X[nl + k, j] = Xs[k, j]
        order[nl + k] = rs[k]
        if has_w:
            w[nl + k] = ws[k]
    return nl


@njit
def _shifted_sums(X, w, s, e, centre, s1, s2, sd):
    """Sums over the rows ``X[s:e]`` about ``centre`` (c = x - centre), one feature (pair) at a time:
    returns sum w, and s1 = sum w c (OUT, D), sd = sum w c_j^2 (OUT, D), s2 = sum w c c^T (OUT, upper
    triangle) when ``s2`` is D x D (else it is not touched)."""
    D = X.shape[1]
    has_w = w.shape[0] > 0
    form = s2.shape[0] == D
    mass = 0.0
    if has_w:
        for k in range(s, e):
            mass += w[k]
    else:
        mass = float(e - s)
    for a in range(D):
        ca = centre[a]
        t = 0.0
        if has_w:
            for k in range(s, e):
                t += w[k] * (X[k, a] - ca)
        else:
            for k in range(s, e):
                t += X[k, a] - ca
        s1[a] = t
        for b in range(a, D if form else a + 1):
            cb = centre[b]
            t = 0.0
            if has_w:
                for k in range(s, e):
                    t += w[k] * (X[k, a] - ca) * (X[k, b] - cb)
            else:
                for k in range(s, e):
                    t += (X[k, a] - ca) * (X[k, b] - cb)
            if form:
                s2[a, b] = t
            if b == a:
                sd[a] = t
    return mass


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


@njit
def _bfs_numbering(left, right, m):
    """The breadth-first numbering of a tree of ``m`` nodes rooted at 0: (old id of each new id, new id of each old id)."""
    old_of = np.empty(m, dtype=np.int64)
    new_of = np.empty(m, dtype=np.int64)
    old_of[0] = 0
    new_of[0] = 0
    nxt = 1
    for q in range(m):
        o = old_of[q]
        if left[o] >= 0:
            old_of[nxt], old_of[nxt + 1] = left[o], right[o]
            new_of[left[o]], new_of[right[o]] = nxt, nxt + 1
            nxt += 2
    return old_of, new_of


@njit(nogil=True, cache=True)
def build_topology(X, w, leaf_size, explicit_max_d, full):
    """The tree of one chunk: nodes, their counts, means, within-cell covariances and split axes.

    Parameters
    ----------
    X : (n, D) float32 or float64
        The chunk (finite).
    w : (n,) float64 or (0,) float64
        Weights (finite, >= 0); an empty array means weight 1 for every row.
    leaf_size : int >= 1
        Nodes of at most this many rows are not split.
    explicit_max_d : int
        Splits form the covariance when D <= explicit_max_d (``EXPLICIT_MAX_D``; the result is the same
        eigenvector either way, up to rounding).
    full : bool
        Also return the (m, D, D) covariances (else a (0, D, D) array).

    Returns
    -------
    (left, right, parent, depth, start, stop, order, count, mean, var, cov, direction, n_products)
    with the layout of the module docstring (``var``: the diagonal of ``second``, ``cov``: ``second``
    when ``full``) and the total number of eigenvector products (power iterations; 1 per 2 x 2 split).
    Built depth first as the module docstring's "Building" says.
    """
    n, D = X.shape
    has_w = w.shape[0] > 0
    form = D <= explicit_max_d
    Df = D if form else 0
    cap = max(1, min(2 * n - 1, 4 * (n // leaf_size) + 3))
    left = np.full(cap, -1, dtype=np.int64)
    right = np.full(cap, -1, dtype=np.int64)
    parent = np.full(cap, -1, dtype=np.int64)
    start = np.zeros(cap, dtype=np.int64)
    stop = np.zeros(cap, dtype=np.int64)
    count = np.zeros(cap)
    mean = np.zeros((cap, D))
    var = np.zeros((cap, D))
    cov = np.zeros((cap if full else 0, D, D))
    direction = np.zeros((cap, D))
    order = np.arange(n)
    n_products = 0
    if n == 0:
        return (left[:0].copy(), right[:0].copy(), parent[:0].copy(), start[:0].copy(), start[:0].copy(),
                stop[:0].copy(), order, count[:0].copy(), mean[:0].copy(), var[:0].copy(), cov[:0].copy(),
                direction[:0].copy(), n_products)
    Xc = np.empty((n, D))
    for i in range(n):
        for j in range(D):
            Xc[i, j] = float(X[i, j])
    wc = w.copy()
    Xs = np.empty((n, D))
    ws = np.empty(n if has_w else 0)
    rs = np.empty(n, dtype=np.int64)
    c = np.empty(D)
    u = np.empty(D)
    S = np.empty((D, D))
    s1 = np.empty((2, D))  # the sums of a split's two children about its mean: the smaller one's, the larger one's
    s2 = np.empty((2, Df, Df))
    sd = np.empty((2, D))
    # depth-first stack of the nodes to process, with the covariance (or its diagonal) their split needs
    scap = 64
    stack = np.empty(scap, dtype=np.int64)
    stack_S = np.empty((scap, Df, Df))
    stack_var = np.empty((scap, D))
    stop[0] = n
    count[0] = _moments(Xc, wc, 0, n, mean[0], stack_var[0], c, S, form)
    if form:
        stack_S[0] = S
    stack[0] = 0
    sp = 1
    m = 1
    while sp > 0:
        sp -= 1
        i = stack[sp]
        s, e = start[i], stop[i]
        mid = s
        if e - s > leaf_size and count[i] > 0.0 and not _identical(Xc, wc, s, e):
            j0 = 0
            for j in range(1, D):
                if stack_var[sp, j] > stack_var[sp, j0]:
                    j0 = j
            v = direction[i]
            if form:
                it = _power_explicit(stack_S[sp], v, u, j0)
            else:
                it = _power_implicit(Xc, wc, s, e, mean[i], v, u, c, j0)
            if it > 0:
                n_products += it
                mid = _partition(Xc, wc, order, Xs, ws, rs, s, e, mean[i], v)
        if s < mid < e:
            if m + 2 > cap:
                cap = min(2 * n - 1, 2 * cap)
                left, right, parent = _grow_int(left, cap), _grow_int(right, cap), _grow_int(parent, cap)
                start, stop = _grow_int(start, cap), _grow_int(stop, cap)
                count, mean, var = _grow_float(count, cap), _grow_float(mean, cap), _grow_float(var, cap)
                direction = _grow_float(direction, cap)
                if full:
                    cov = _grow_float(cov, cap)
            if sp + 2 > scap:
                scap *= 2
                stack = _grow_int(stack, scap)
                stack_S, stack_var = _grow_float(stack_S, scap), _grow_float(stack_var, scap)
            left[i], right[i] = m, m + 1
            start[m], stop[m] = s, mid
            start[m + 1], stop[m + 1] = mid, e
            small = m if mid - s <= e - mid else m + 1
            if max(mid - s, e - mid) > leaf_size:  # a child to split: the sums of the smaller one over its rows,
                nc = _shifted_sums(Xc, wc, start[small], stop[small], mean[i], s1[0], s2[0], sd[0])
                count[small] = nc  # the larger one's by difference, n_A S_A being their total about the mean
                count[2 * m + 1 - small] = count[i] - nc
                for a in range(D):
                    s1[1, a] = -s1[0, a]
                    sd[1, a] = count[i] * stack_var[sp, a] - sd[0, a]
                    for b in range(a, Df):
                        s2[1, a, b] = count[i] * stack_S[sp, a, b] - s2[0, a, b]
            for child in (m + 1, m):  # the right child below the left one on the stack: the left is done first
                parent[child] = i
                stack[sp] = child
                sp += 1
                if stop[child] - start[child] <= leaf_size:  # a leaf: its statistics come from its rows
                    continue
                k = 0 if child == small else 1
                nc = count[child]
                inv = 1.0 / nc if nc > 0.0 else 0.0
                top = sp - 1
                for a in range(D):  # mean and covariance about the parent's mean, shifted to the child's
                    d = s1[k, a] * inv
                    mean[child, a] = mean[i, a] + d
                    stack_var[top, a] = max(sd[k, a] * inv - d * d, 0.0)
                    if form:
                        for b in range(a, D):
                            t = s2[k, a, b] * inv - d * s1[k, b] * inv
                            stack_S[top, a, b] = t
                            stack_S[top, b, a] = t
            m += 2
        else:  # a leaf (its rows ascending: the partitions are stable): statistics exactly from its rows
            for j in range(D):
                direction[i, j] = 0.0
            count[i] = _moments(Xc, wc, s, e, mean[i], var[i], c, S, full)
            if full:
                cov[i] = S
    # internal nodes from their children (numbered after them): counts summed, covariances merged
    for i in range(m - 1, -1, -1):
        lo, hi = left[i], right[i]
        if lo < 0:
            continue
        nl, nr = count[lo], count[hi]
        nt = nl + nr  # > 0: only nodes of positive weight are split
        count[i] = nt
        fl, fr, fx = nl / nt, nr / nt, nl * nr / (nt * nt)
        for a in range(D):
            da = mean[lo, a] - mean[hi, a]
            var[i, a] = fl * var[lo, a] + fr * var[hi, a] + fx * da * da
            if full:
                for b in range(a, D):
                    t = fl * cov[lo, a, b] + fr * cov[hi, a, b] + fx * da * (mean[lo, b] - mean[hi, b])
                    cov[i, a, b] = t
                    cov[i, b, a] = t
    old_of, new_of = _bfs_numbering(left, right, m)
    b_left = np.full(m, -1, dtype=np.int64)
    b_right = np.full(m, -1, dtype=np.int64)
    b_parent = np.full(m, -1, dtype=np.int64)
    b_depth = np.zeros(m, dtype=np.int64)
    for k in range(m):
        o = old_of[k]
        if left[o] >= 0:
            b_left[k], b_right[k] = new_of[left[o]], new_of[right[o]]
        if parent[o] >= 0:
            b_parent[k] = new_of[parent[o]]
            b_depth[k] = b_depth[b_parent[k]] + 1
    b_cov = cov[old_of] if full else cov[:0].copy()
    return (b_left, b_right, b_parent, b_depth, start[old_of], stop[old_of], order, count[old_of], mean[old_of],
            var[old_of], b_cov, direction[old_of], n_products)


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
    (left, right, parent, depth, start, stop, order, count, mean, var, cov, direction,
     _) = build_topology(X, w, int(leaf_size), EXPLICIT_MAX_D, bool(full))
    second = cov if full else var
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
