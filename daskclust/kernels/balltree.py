"""Greedy k-means++ over a ball tree: cost per step independent of the number of points.

A binary tree over M points (median split of the widest coordinate, leaves of
at most ``leaf_size`` points); node n holds the points ``lo[n]:hi[n]`` of the
tree order, a centre g_n (their mean) and a radius rho_n (the largest
||p - g_n||). Greedy k-means++ keeps for every node the largest current
distance to the nearest centre, dmax_n = max_p d(p), and the mass
S_n = sum_p w_p d(p)^2. A trial point t can lower d(p) only where
||p - t|| < d(p), and ||p - t|| >= ||t - g_n|| - rho_n, so node n is skipped when

    ||t - g_n|| >= rho_n + dmax_n.

Late in the greedy, when d(p) is about the spacing of clusters, a trial
visits the O(log M) nodes on its way down and the few leaves around it;
the trials are drawn in proportion to w d^2 by descending the S_n. The
two-level partition of :mod:`daskclust.kernels.ballindex` checks every one of
its sqrt(M) groups per trial, which made the k-means|| reduction grow faster
than C (Arthur & Vassilvitskii 2007 for k-means++; the tree is a ball tree,
Omohundro 1989, with the bounds of Moore 2000's anchors hierarchy).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .estep import sqdist
from .rng import uniform
from .seeding import draw_position, local_gain

LEAF_SIZE = 8
"""Points per leaf at most (tried 4-32 on k-means|| candidates of the BIRCH grid, C = 4096 and 16384)."""


@njit(nogil=True, cache=True)
def build_ball_tree(points, leaf_size=LEAF_SIZE):
    """A ball tree over ``points`` (M, D); returns (order, lo, hi, left, centre, radius, n_distances).

    ``order`` (M,) is the tree order of the points; node n covers ``order[lo[n]:hi[n]]``, its
    children are ``left[n]`` and ``left[n] + 1`` (-1 at a leaf; children are numbered after
    their parent), ``centre[n]`` the mean of its points and ``radius[n]`` their largest
    distance to it. ``n_distances`` counts the point-to-centre distances of the radii. A node's
    points are split at the median of its widest coordinate by selection (O(n), no sort); a leaf
    lists its points sorted on its parent's coordinate, so copies of a point lie together and the
    order is that of sorting every node (draws over it treat a weight like repeats).
    """
    M, D = points.shape
    leaf_size = max(1, leaf_size)
    cap = 2 * (M // max(1, (leaf_size + 1) // 2)) + 3
    order = np.arange(M)
    lo = np.zeros(cap, dtype=np.int64)
    hi = np.zeros(cap, dtype=np.int64)
    left = np.full(cap, -1, dtype=np.int64)
    hi[0] = M
    n_nodes = 1
    stack = np.empty(cap, dtype=np.int64)
    split_dim = np.full(cap, -1, dtype=np.int64)  # the coordinate the node's parent split on
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        n = stack[top]
        a, b = lo[n], hi[n]
        if b - a <= leaf_size:
            if split_dim[n] >= 0:  # a leaf lists its points sorted like its parent's split (stable)
                keys = np.empty(b - a)
                for i in range(a, b):
                    keys[i - a] = points[order[i], split_dim[n]]
                _insertion_sort(keys, order[a:b])
            continue
        widest, spread = 0, -1.0
        for j in range(D):
            low, high = np.inf, -np.inf
            for i in range(a, b):
                v = points[order[i], j]
                low = min(low, v)
                high = max(high, v)
            if high - low > spread:
                widest, spread = j, high - low
        values = np.empty(b - a)
        for i in range(a, b):
            values[i - a] = points[order[i], widest]
        mid = (a + b) // 2
        _select(values, order[a:b], mid - a)
        left[n] = n_nodes
        lo[n_nodes], hi[n_nodes] = a, mid
        lo[n_nodes + 1], hi[n_nodes + 1] = mid, b
        split_dim[n_nodes] = split_dim[n_nodes + 1] = widest
        stack[top] = n_nodes
        stack[top + 1] = n_nodes + 1
        top += 2
        n_nodes += 2
    centre = np.zeros((n_nodes, D))
    radius = np.zeros(n_nodes)
    n_dist = 0
    for n in range(n_nodes):
        count = hi[n] - lo[n]
        for i in range(lo[n], hi[n]):
            for j in range(D):
                centre[n, j] += points[order[i], j]
        for j in range(D):
            centre[n, j] /= max(1, count)
        for i in range(lo[n], hi[n]):
            radius[n] = max(radius[n], sqdist(points[order[i]], centre[n]))
        radius[n] = np.sqrt(radius[n])
        n_dist += count
    return order, lo[:n_nodes], hi[:n_nodes], left[:n_nodes], centre, radius, n_dist


@njit(nogil=True)
def _insertion_sort(keys, items):
    """Sort ``keys`` ascending and reorder ``items`` alike, stably (equal keys keep their order):
    O(n^2), for a leaf's few points. Element moves only: a sort by ``np.argsort`` and an
    assignment of the permuted slice compiled numba's mergesort and the error path of a slice
    assignment (its message formatting), 6 of the 23 s of CPU the seeding's kernels took to
    compile. IN/OUT: keys, items."""
    for i in range(1, keys.shape[0]):
        key, item = keys[i], items[i]
        j = i - 1
        while j >= 0 and keys[j] > key:
            keys[j + 1] = keys[j]
            items[j + 1] = items[j]
            j -= 1
        keys[j + 1] = key
        items[j + 1] = item


@njit(nogil=True)
def _select(keys, items, k):
    """Reorder ``keys`` and ``items`` alike so that keys[k] is the k-th smallest key, no key before it
    larger and none after it smaller (Hoare's selection with a median-of-three pivot: O(n) expected,
    where sorting the node was O(n log n)). IN/OUT: keys, items."""
    lo, hi = 0, keys.shape[0] - 1
    while lo < hi:
        a, b, c = keys[lo], keys[(lo + hi) >> 1], keys[hi]
        pivot = max(min(a, b), min(max(a, b), c))
        i, j = lo, hi
        while i <= j:
            while keys[i] < pivot:
                i += 1
            while keys[j] > pivot:
                j -= 1
            if i <= j:
                keys[i], keys[j] = keys[j], keys[i]
                items[i], items[j] = items[j], items[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return


@njit(nogil=True)
def _gain(t, lo, hi, left, centre, radius, pts, wts, d2, dmax, mass, stack, visited, apply):
    """(sum_p w_p (d2_p - min(d2_p, ||p - pts[t]||^2)), distances evaluated): what
    choosing pts[t] as a centre saves. With ``apply`` the new distances are stored and dmax / mass
    of every visited node recomputed, children before parents."""
    x = pts[t]
    gain = 0.0
    n = 0
    n_visited = 0
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        node = stack[top]
        reach = radius[node] + dmax[node]
        n += 1
        if sqdist(x, centre[node]) >= reach * reach:
            continue
        if apply:
            visited[n_visited] = node
            n_visited += 1
        child = left[node]
        if child >= 0:
            stack[top] = child
            stack[top + 1] = child + 1
            top += 2
            continue
        for p in range(lo[node], hi[node]):
            d = sqdist(pts[p], x)
            n += 1
            if d < d2[p]:
                gain += wts[p] * (d2[p] - d)
                if apply:
                    d2[p] = d
    for v in range(n_visited - 1, -1, -1):
        node = visited[v]
        child = left[node]
        if child >= 0:
            dmax[node] = max(dmax[child], dmax[child + 1])
            mass[node] = mass[child] + mass[child + 1]
        else:
            largest, total = 0.0, 0.0
            for p in range(lo[node], hi[node]):
                largest = max(largest, d2[p])
                total += wts[p] * d2[p]
            dmax[node] = np.sqrt(largest)
            mass[node] = total
    return gain, n


@njit(nogil=True)
def _draw(target, lo, hi, left, wts, d2, mass):
    """The point at ``target`` (in [0, S_root)) of the cumulative w d^2 in tree order, descending
    the node masses (a subtree without mass is never entered)."""
    node = 0
    while left[node] >= 0:
        child = left[node]
        if mass[child + 1] <= 0.0 or (mass[child] > 0.0 and target < mass[child]):
            node = child
        else:
            target -= mass[child]
            node = child + 1
    acc = 0.0
    pick = -1
    for p in range(lo[node], hi[node]):
        m = wts[p] * d2[p]
        if m > 0.0:
            pick = p
            acc += m
            if acc > target:
                break
    return pick


@njit(nogil=True, cache=True)
def greedy_kmeanspp_tree(lo, hi, left, centre, radius, pts, wts, n_clusters, n_trials, key, nbr, nd2):
    """Weighted greedy k-means++ (scikit-learn's ``_kmeans_plusplus``) over a ball tree of the points
    ``pts`` (in tree order, weights ``wts``); returns (chosen positions, distances evaluated).

    The first centre is drawn in proportion to w; every further step draws
    ``n_trials`` points in proportion to w d^2 (d: distance to the nearest centre
    so far) and keeps the one that lowers sum w d^2 most (the first on ties).
    Draws use stream ``key``, so the result depends on nothing else. With ``nbr``
    of shape (M, 0) a trial's saving is exact (a descent of the tree); with K > 0
    columns (each point's K nearest points, tree positions, itself first, and their
    squared distances ``nd2``) it is counted over the trial's neighbourhood only
    (:func:`~daskclust.kernels.seeding.local_gain`, K evaluations); the chosen
    centre always lowers d exactly.
    """
    M = pts.shape[0]
    n_nodes = lo.shape[0]
    d2 = np.full(M, np.inf)
    dmax = np.full(n_nodes, np.inf)
    mass = np.full(n_nodes, np.inf)
    stack = np.empty(n_nodes + 2, dtype=np.int64)
    visited = np.empty(n_nodes, dtype=np.int64)
    chosen = np.empty(n_clusters, dtype=np.int64)
    chosen[0] = draw_position(uniform(key, 0), np.cumsum(wts))
    n_dist = _gain(chosen[0], lo, hi, left, centre, radius, pts, wts, d2, dmax, mass, stack, visited, True)[1]
    trials = np.empty(n_trials, dtype=np.int64)
    gains = np.empty(n_trials)
    counter = 1
    for k in range(1, n_clusters):
        total = mass[0]
        if total <= 0.0:  # every point coincides with a centre: take unchosen ones in order
            chosen[k] = _first_unchosen(chosen, k, M)
            continue
        for t in range(n_trials):
            trials[t] = _draw(uniform(key, counter) * total, lo, hi, left, wts, d2, mass)
            counter += 1
        for t in range(n_trials):
            if nbr.shape[1] > 0:
                gains[t] = local_gain(trials[t], nbr, nd2, wts, d2)
                n_dist += nbr.shape[1]
            else:
                gains[t], n = _gain(trials[t], lo, hi, left, centre, radius, pts, wts, d2, dmax, mass, stack, visited,
                                    False)
                n_dist += n
        chosen[k] = trials[np.argmax(gains)]
        n_dist += _gain(chosen[k], lo, hi, left, centre, radius, pts, wts, d2, dmax, mass, stack, visited, True)[1]
    return chosen, n_dist


@njit(nogil=True)
def _first_unchosen(chosen, k, M):
    for p in range(M):
        taken = False
        for j in range(k):
            if chosen[j] == p:
                taken = True
                break
        if not taken:
            return p
    return 0


@njit(nogil=True)
def _push_children(x, child, centre, stack, stack_d2, top):
    """Push the children ``child`` and ``child + 1`` of a node with their squared distances to ``x``,
    the nearer last (popped first); returns the new top of the stack."""
    d_left = sqdist(x, centre[child])
    d_right = sqdist(x, centre[child + 1])
    near, far = (child, child + 1) if d_left <= d_right else (child + 1, child)
    stack[top], stack_d2[top] = far, max(d_left, d_right)
    stack[top + 1], stack_d2[top + 1] = near, min(d_left, d_right)
    return top + 2


@njit(nogil=True, cache=True)
def tree_nearest(X, lo, hi, left, centre, radius, pts, ids, mind2, label):
    """Lower ``mind2`` / ``label`` (IN/OUT) of each row of X with the nearest point of a ball tree
    (points ``pts`` in tree order, labels ``ids``); returns the distances evaluated.

    Depth first, the nearer child first; a node is skipped when
    ||x - g_n|| >= rho_n + sqrt(best), best being the row's smallest squared
    distance so far (its ``mind2`` on entry: a known bound prunes from the start).
    """
    n_nodes = lo.shape[0]
    stack = np.empty(n_nodes + 2, dtype=np.int64)
    stack_d2 = np.empty(n_nodes + 2)
    n_eval = 0
    for i in range(X.shape[0]):
        x = X[i]
        best = mind2[i]
        arg = -1
        sb = np.sqrt(best)
        stack[0] = 0
        stack_d2[0] = sqdist(x, centre[0])
        n_eval += 1
        top = 1
        while top > 0:
            top -= 1
            node = stack[top]
            reach = radius[node] + sb
            if stack_d2[top] >= reach * reach:
                continue
            if left[node] >= 0:
                top = _push_children(x, left[node], centre, stack, stack_d2, top)
                n_eval += 2
                continue
            for p in range(lo[node], hi[node]):
                d = sqdist(x, pts[p])
                n_eval += 1
                if d < best:
                    best = d
                    arg = p
                    sb = np.sqrt(best)
        if arg >= 0:
            mind2[i] = best
            label[i] = ids[arg]
    return n_eval


@njit(nogil=True, cache=True)
def tree_neighbours(lo, hi, left, centre, radius, pts, ids, k, rows_start, rows_stop, out_idx, out_dist):
    """The ``k`` nearest points of each point ``ids[i]`` for tree positions i in [rows_start, rows_stop) of
    a ball tree over a point set (itself first, then the others by distance, ties to the smaller id):
    rows ``ids[i]`` of out_idx (int32) and out_dist (Euclidean distances) are written. Returns the
    distances evaluated (node centres included).

    The same descent as :func:`tree_nearest`, bounded by the k-th distance found so far.
    """
    n_nodes = lo.shape[0]
    stack = np.empty(n_nodes + 2, dtype=np.int64)
    stack_d2 = np.empty(n_nodes + 2)
    top_d = np.empty(max(k, 1))
    top_c = np.empty(max(k, 1), dtype=np.int64)
    n_eval = 0
    for i in range(rows_start, rows_stop):
        x = pts[i]
        me = ids[i]
        top_d[0] = 0.0
        top_c[0] = me
        size = 1
        stack[0] = 0
        stack_d2[0] = sqdist(x, centre[0])
        n_eval += 1
        top = 1
        while top > 0 and k > 1:
            top -= 1
            node = stack[top]
            if size == k:
                reach = radius[node] + np.sqrt(top_d[k - 1])
                if stack_d2[top] > reach * reach:  # strictly farther: a tie may still win on its id
                    continue
            if left[node] >= 0:
                top = _push_children(x, left[node], centre, stack, stack_d2, top)
                n_eval += 2
                continue
            for p in range(lo[node], hi[node]):
                c = ids[p]
                if c == me:
                    continue
                d = sqdist(x, pts[p])
                n_eval += 1
                if size == k and (d > top_d[k - 1] or (d == top_d[k - 1] and c > top_c[k - 1])):
                    continue
                pos = size if size < k else k - 1
                while pos > 1 and (top_d[pos - 1] > d or (top_d[pos - 1] == d and top_c[pos - 1] > c)):
                    if pos < k:
                        top_d[pos] = top_d[pos - 1]
                        top_c[pos] = top_c[pos - 1]
                    pos -= 1
                top_d[pos] = d
                top_c[pos] = c
                if size < k:
                    size += 1
        for t in range(k):
            out_idx[me, t] = top_c[t]
            out_dist[me, t] = np.sqrt(top_d[t])
    return n_eval
