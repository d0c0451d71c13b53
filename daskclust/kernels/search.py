"""Partial (truncated) E-step kernels: candidates from cluster neighbourhoods or sampled
from a similarity matrix, always joined with the current K(n) (Forster & Lücke 2018 Algs. 1-2,
Exarchakis et al. 2022 Alg. 1), plus the pair statistics that estimate the neighbourhoods.

Every kernel offers each point the union of its candidates and its current
K(n) and keeps the C' closest, so a point's clusters can only get closer: the
free energy cannot decrease (Forster & Lücke 2018 / Lücke & Forster 2019 Prop. 1). Statistics are
those of :mod:`daskclust.kernels.estep`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .estep import (
    CHANGED,
    LSE,
    NDIST_CENTRES,
    NDIST_POINTS,
    QE,
    W,
    insert_sorted,
    sqdist,
)
from .family import add_point, cost, euclid, pair_value, scale
from .rng import randint, uniform

PAIR_BLOCK = 1024
"""Rows per block of :func:`estep_truncated`: its pair buffer holds one block's pairs, so the
kernel's scratch memory is bounded (~0.8 MB at 32 pairs a row) whatever the chunk size."""

MIN_RECORDS = 1 << 16
"""Pair records :func:`gather_pairs` keeps at least before it sums them per pair."""


@njit(nogil=True, cache=True)
def gather_pairs(rec_key, rec_val, rec_wt, n_rec, keys, vals, wts, n):
    """Append the first n (key, val, wt) pair records to the record buffers holding n_rec. When they would
    overflow, the records are first summed per pair in place (:func:`sum_pairs`), and the buffers doubled
    if that leaves less than half of them free, so they hold at most 4 max(distinct pairs + n,
    :data:`MIN_RECORDS`) records. Returns (rec_key, rec_val, rec_wt, n_rec), the arrays possibly new.

    Records are appended in order and summed per pair in order (a stable sort): each pair's sum is the
    same left fold over its records whenever the buffers are summed."""
    if n_rec + n > rec_key.shape[0]:
        n_rec = sum_pairs(rec_key, rec_val, rec_wt, n_rec)
        if 2 * (n_rec + n) > rec_key.shape[0]:
            cap = max(2 * rec_key.shape[0], 2 * (n_rec + n), MIN_RECORDS)
            new_key = np.empty(cap, dtype=np.int64)
            new_val = np.empty(cap)
            new_wt = np.empty(cap)
            for t in range(n_rec):  # loops, not slice assignments: those cost seconds of compiling
                new_key[t] = rec_key[t]
                new_val[t] = rec_val[t]
                new_wt[t] = rec_wt[t]
            rec_key, rec_val, rec_wt = new_key, new_val, new_wt
    for t in range(n):
        rec_key[n_rec + t] = keys[t]
        rec_val[n_rec + t] = vals[t]
        rec_wt[n_rec + t] = wts[t]
    return rec_key, rec_val, rec_wt, n_rec + n


@njit(nogil=True, cache=True)
def sum_pairs(keys, vals, wts, n):
    """Sum the first n records per key, in record order, into the first d entries (keys ascending, unique);
    returns d. Sorting the records (sequential passes) replaced summing them in a hash table keyed by pair
    (a random access, three cache lines, per record into a table of up to MBs): for 19,000 records of
    17,468 distinct pairs (a chunk of the spherical family at C = 16384 on BIRCH) 0.74 ms against 2.2-2.8 ms,
    for 3,155 distinct (C = 256) 0.24 against 0.42 ms; inside a fit's E-step pass at C = 16384, where the
    two worker processes share the caches, the pairs' part of a chunk went from about 7.5 ms to 1-1.7 ms."""
    if n == 0:
        return 0
    order = radix_order(keys, n)
    out_key = np.empty(n, dtype=np.int64)
    out_val = np.empty(n)
    out_wt = np.empty(n)
    d = -1
    for t in range(n):
        r = order[t]
        if d < 0 or keys[r] != out_key[d]:
            d += 1
            out_key[d] = keys[r]
            out_val[d] = vals[r]
            out_wt[d] = wts[r]
        else:
            out_val[d] += vals[r]
            out_wt[d] += wts[r]
    d += 1
    for t in range(d):
        keys[t] = out_key[t]
        vals[t] = out_val[t]
        wts[t] = out_wt[t]
    return d


RADIX_BITS = 11
"""Bits per pass of :func:`radix_order`: 2048 counters, 3 passes for keys below 2^33 (C < 92,000)."""


@njit(nogil=True)
def radix_order(keys, n):
    """The stable ascending order of the non-negative int64 ``keys[:n]`` (positions, int64): LSD radix sort
    (Knuth, TAOCP vol. 3, 5.2.5) carrying each key's position, one stable counting pass per ``RADIX_BITS``
    bits of the largest key, O(n) each. The pair keys' sort: numba's own sorts took 2.2 s of CPU to
    compile on a machine's first fit, this a tenth of that, and it sorts 10^6 keys as fast."""
    largest = 0
    for i in range(n):
        largest = max(largest, keys[i])
    mask = (1 << RADIX_BITS) - 1
    counts = np.empty(mask + 2, dtype=np.int64)
    src_key, src_pos = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    dst_key, dst_pos = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    for i in range(n):
        src_key[i] = keys[i]
        src_pos[i] = i
    shift = 0
    passes = 0
    while n > 1 and (passes == 0 or (largest >> shift) > 0):
        for d in range(mask + 2):
            counts[d] = 0
        for i in range(n):
            counts[((src_key[i] >> shift) & mask) + 1] += 1
        for d in range(mask + 1):
            counts[d + 1] += counts[d]
        for i in range(n):
            d = (src_key[i] >> shift) & mask
            dst_key[counts[d]] = src_key[i]
            dst_pos[counts[d]] = src_pos[i]
            counts[d] += 1
        src_key, dst_key = dst_key, src_key
        src_pos, dst_pos = dst_pos, src_pos
        shift += RADIX_BITS
        passes += 1
    return src_pos


@njit(nogil=True, cache=True)
def pair_entries(rec_key, rec_val, rec_wt, n_rec, centres):
    """The records' pairs i * C + j with keys ascending: (keys, sums, weights, rank, n_centre_distances).

    rank = ||mu_i - mu_j||^2, one centre-to-centre distance per distinct pair:
    the order in which :class:`daskclust.search.pairs.PairStats` prunes them.
    """
    C = centres.shape[0]
    d = sum_pairs(rec_key, rec_val, rec_wt, n_rec)
    rank = np.empty(d)
    for t in range(d):
        rank[t] = sqdist(centres[rec_key[t] // C], centres[rec_key[t] % C])
    out_key = np.empty(d, dtype=np.int64)
    out_val = np.empty(d)
    out_wt = np.empty(d)
    for t in range(d):
        out_key[t] = rec_key[t]
        out_val[t] = rec_val[t]
        out_wt[t] = rec_wt[t]
    return out_key, out_val, out_wt, rank, d


@njit(nogil=True, cache=True)
def merge_pairs(ka, sa, wa, ra, kb, sb, wb, rb):
    """Union of two pair lists with ascending unique keys: sums and weights added per key,
    the rank taken from either (it is a function of the key). Linear in their lengths."""
    n = ka.shape[0] + kb.shape[0]
    keys = np.empty(n, dtype=np.int64)
    sums = np.empty(n)
    wts = np.empty(n)
    rank = np.empty(n)
    i = j = m = 0
    while i < ka.shape[0] or j < kb.shape[0]:
        if j == kb.shape[0] or (i < ka.shape[0] and ka[i] < kb[j]):
            keys[m], sums[m], wts[m], rank[m] = ka[i], sa[i], wa[i], ra[i]
            i += 1
        elif i == ka.shape[0] or kb[j] < ka[i]:
            keys[m], sums[m], wts[m], rank[m] = kb[j], sb[j], wb[j], rb[j]
            j += 1
        else:
            keys[m], sums[m], wts[m], rank[m] = ka[i], sa[i] + sb[j], wa[i] + wb[j], ra[i]
            i += 1
            j += 1
        m += 1
    return keys[:m], sums[:m], wts[:m], rank[:m]


@njit(nogil=True, cache=True)
def top_pairs_mask(keys, rank, n_clusters, per_row, symmetric):
    """Which pairs i * C + j (keys ascending) are among the ``per_row`` of smallest rank of row i
    (or, when ``symmetric``, of row i or row j); ties go to the smaller partner index.

    Each row lists its pairs in ascending partner order (for symmetric keys first
    the pairs (i, r) with i < r, then (r, j)); a stable selection by rank then breaks
    ties by partner. Only rows holding more than ``per_row`` pairs are selected from.
    """
    C, M, n = n_clusters, per_row, keys.shape[0]
    start = np.zeros(C + 1, dtype=np.int64)
    for t in range(n):
        start[keys[t] // C + 1] += 1
        if symmetric:
            start[keys[t] % C + 1] += 1
    full = True
    for r in range(C):
        if start[r + 1] > M:
            full = False
        start[r + 1] += start[r]
    keep = np.ones(n, dtype=np.bool_)
    if full:
        return keep
    members = np.empty(start[C], dtype=np.int64)
    fill = start[:C].copy()
    if symmetric:
        for t in range(n):
            r = keys[t] % C
            members[fill[r]] = t
            fill[r] += 1
    for t in range(n):
        r = keys[t] // C
        members[fill[r]] = t
        fill[r] += 1
    keep[:] = False
    sel_d = np.empty(M)
    sel_t = np.empty(M, dtype=np.int64)
    for r in range(C):
        row = members[start[r]:start[r + 1]]
        if row.shape[0] <= M:
            for t in row:
                keep[t] = True
        else:  # the M of smallest rank, ties to the earlier (smaller partner): a stable selection
            size = np.int64(0)  # not a literal 0: one specialisation of insert_sorted
            for t in row:
                size = insert_sorted(sel_d, sel_t, size, M, rank[t], t)
            for s in range(M):
                keep[sel_t[s]] = True
    return keep


@njit
def _draw_from_row(row_idx, row_cdf, length, u):
    """Index drawn from the first ``length`` entries of a row by its cumulative weights."""
    lo = 0
    hi = length - 1
    target = u * row_cdf[length - 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if row_cdf[mid] > target:
            hi = mid
        else:
            lo = mid + 1
    return row_idx[lo]


NEIGHBOURHOOD, SAMPLED = 0, 1


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def estep_truncated(X, w, params, K, mode, neighbours, thresholds, row_idx, row_cdf, row_len, n_draws,
                    n_explore, key, collect, stats, scal, tsum, tcnt, source_row, pair_stride=1, pair_phase=0,
                    explored_pairs=True):
    """Partial E-step: each point evaluates candidate clusters joined with its K(n), keeps the C' closest.

    Candidates (``mode``):

    NEIGHBOURHOOD (Forster & Lücke 2018 Algs. 1-2): G(n) = union of G_c over c in K(n);
        ``neighbours`` (C, G) int32 holds G_c, c first.
    SAMPLED (D-GMM, Exarchakis et al. 2022 Alg. 1): ``n_draws`` (R) clusters drawn from the
        similarity row of the best cluster c_bar = K(n)[0] (Eq. 9; clusters already
        taken are redrawn up to 4 times), uniformly when the row has no more
        entries than K(n); rows are sparse: ``row_idx`` (C, L) int32,
        ``row_cdf`` (C, L) cumulative weights, ``row_len`` (C,).

    Both add ``n_explore`` clusters drawn uniformly (a row left without any
    candidate, K(n) unknown and nothing drawn, gets one). All draws come from the
    stream ``key``; row i uses draws r * (4 R + n_explore) onwards, r its row in
    the source (``source_row[i]``, or i when empty), so the draws do not depend
    on the order in which a worker keeps the rows.

    K : (n, C') int32, IN/OUT, best first, -1 = unknown. ``params``: the family's
    parameters, ``stats`` its statistics and ``scal`` the scalars (IN/OUT), as in
    :func:`daskclust.kernels.estep.estep_full`. For the families whose cost is a
    squared Euclidean distance (k-means, isotropic) the estimated search records
    distances and bounds them with the triangle inequality; for the others it records
    the cost (``pair_value``) and ``thresholds`` are inf (no pair is bounded; which rows and
    candidates record them is below; the merge tree keeps each component's pairs of nearest
    means, :class:`~daskclust.search.pairs.PairStats`).
    Every distance is counted: point-to-centre in scal[NDIST_POINTS],
    centre-to-centre in scal[NDIST_CENTRES].

    With ``collect`` the kernel also gathers the pair statistics of its strategy:

    NEIGHBOURHOOD, Forster & Lücke 2018 Eq. 8: for the point's closest cluster c_o and every
        other evaluated c~, the distance ||y - mu_c~|| (or the cost, see above) weighted by w. Pairs with
        c~ in G_{c_o} are added to ``tsum`` / ``tcnt`` (C, G), IN/OUT, at the
        slot of c~; other pairs are returned, and only when the centres are
        closer than ``thresholds[c_o]`` (the largest estimate in G_{c_o}: the
        mean distance of points of c_o to a farther centre exceeds it, so such
        a pair could not enter G_{c_o}). Deciding per pair, not per point, keeps
        the recorded means unbiased. Pairs outside G_{c_o} come only from the rows r
        (``source_row``) with (r + ``pair_phase``) % ``pair_stride`` == 0: a choice that does
        not look at the row's values, so the means stay unbiased (the non-Euclidean families,
        which cannot filter by the triangle inequality, record every 16th row's, the phase
        advancing every iteration). Without ``explored_pairs`` they come only from the strategy's
        candidates (K(n) and their G_c), not from the exploration draws: at large C such a draw
        is mostly a far component, a distinct entry in every pair table on the way, which the
        merge tree (keeping each component's pairs of nearest means) then drops; a draw that
        comes close enters K(n) and is recorded from there on. Which candidates were drawn does
        not depend on the row's values either. The triangle inequality
        | ||y - mu_c~|| - ||y - mu_c_o|| | <= ||mu_c_o - mu_c~|| <= ||y - mu_c~|| + ||y - mu_c_o||
        settles most pairs from the two point distances already computed; only
        the others cost a centre-to-centre distance.
    SAMPLED, Exarchakis et al. 2022 Eq. 12: for every pair i < j among the P = max(C', 2)
        closest evaluated clusters, w exp(-(d_i^2 + d_j^2 - 2 d_min^2) / 2 sigma^2):
        squared distances scaled by 2 sigma^2 and shifted by the point's best,
        so the values cannot underflow (with a general cost: w q_i q_j / q_best^2).

    Returns the returned pairs aggregated per key i * C + j: (keys ascending,
    sums, weights, rank = ||mu_i - mu_j||^2), see :func:`pair_entries`.

    Rows are processed in blocks of ``PAIR_BLOCK``; each block's pairs are
    appended to the records, summed per pair whenever they would overflow
    (:func:`gather_pairs`), so the scratch memory is one block's buffer plus
    a few times the distinct pairs, not the chunk's rows times the pairs per
    row. The body is otherwise written out in one function on purpose:
    numba's inlined helpers taking many arrays made this loop 3-5 times
    slower, and so did growing the pair buffers inside it. It is
    compiled with ``fastmath={"reassoc", "contract"}`` (no assumption about NaN
    or inf): sums may be reordered and vectorised, 20 % faster at D = 32. No loop
    both writes memory and sums with reassociation: LLVM runs such a loop
    vectorised or not by a runtime check of the arrays' addresses, so its sum
    would depend on where the allocator put them (a fit's statistics then moved
    in the last bit from one run to the next).
    """
    n = X.shape[0]
    centres = params.means
    C = centres.shape[0]
    G = neighbours.shape[1]
    k = K.shape[1]
    P = max(k, 2) if mode == SAMPLED else k
    inv_two_s2 = 0.5 / scale(params)
    mark = np.full(C, -1, dtype=np.int64)
    cap = k * (G + 1) + n_draws + max(n_explore, 1)
    cand = np.empty(cap, dtype=np.int64)
    d2 = np.empty(cap)
    sel_d = np.empty(P)
    sel_c = np.empty(P, dtype=np.int64)
    q = np.empty(P)
    draws_per_row = 4 * n_draws + n_explore
    per_row = max(cap, P * (P - 1) // 2) if collect else 0  # at most this many pairs per row
    block = min(n, PAIR_BLOCK)
    pr_key = np.empty(block * per_row, dtype=np.int64)
    pr_val = np.empty(block * per_row)
    pr_wt = np.empty(block * per_row)
    rec_key = np.empty(0, dtype=np.int64)
    rec_val = np.empty(0)
    rec_wt = np.empty(0)
    n_rec = np.int64(0)  # not a literal 0: one specialisation of gather_pairs / pair_entries
    tw = tl = tq = 0.0
    nd = ndc = ch = 0
    for i0 in range(0, n, PAIR_BLOCK):
        n_pr = np.int64(0)
        for i in range(i0, min(n, i0 + PAIR_BLOCK)):
            wi = w[i] if w.shape[0] > 0 else 1.0
            counter = (source_row[i] if source_row.shape[0] > 0 else i) * draws_per_row
            # ---- candidates: K(n) always (Prop. 1), then the strategy's, then exploration
            m = 0
            k_first = K[i, 0] if k > 0 else -1  # cand[0] when known
            for t in range(k):
                c0 = K[i, t]
                if c0 < 0:
                    continue
                if mark[c0] != i:
                    mark[c0] = i
                    cand[m] = c0
                    m += 1
                if mode == NEIGHBOURHOOD:
                    for g in range(G):
                        c = neighbours[c0, g]
                        if mark[c] != i:
                            mark[c] = i
                            cand[m] = c
                            m += 1
            if mode == SAMPLED:
                cbar = K[i, 0]
                for r in range(n_draws):
                    for attempt in range(4):
                        u = uniform(key, counter)
                        counter += 1
                        if cbar >= 0 and row_len[cbar] > k:
                            c = _draw_from_row(row_idx[cbar], row_cdf[cbar], row_len[cbar], u)
                        else:
                            c = min(int(u * C), C - 1)
                        if mark[c] != i:
                            mark[c] = i
                            cand[m] = c
                            m += 1
                            break
            explore_base = (source_row[i] if source_row.shape[0] > 0 else i) * draws_per_row + 4 * n_draws
            searched = m  # cand[:searched] come from the strategy, the rest from the exploration draws
            for e in range(n_explore):
                c = randint(key, explore_base + e, C)
                if mark[c] != i:
                    mark[c] = i
                    cand[m] = c
                    m += 1
            if m == 0:  # no known cluster and nothing drawn (n_explore = 0): one uniform draw
                c = randint(key, explore_base, C)
                mark[c] = i
                cand[0] = c
                m = 1
            # ---- distances, the closest, and for P > 1 the P closest
            best = 0
            size = np.int64(0)  # not a literal 0: one specialisation of insert_sorted
            for t in range(m):
                c = cand[t]
                s = cost(X[i], c, params)
                d2[t] = s
                if s < d2[best]:
                    best = t
                if P > 1:
                    size = insert_sorted(sel_d, sel_c, size, P, s, c)
            bc = cand[best]
            bd = d2[best]
            # ---- truncated responsibilities, statistics, new K(n)
            if K[i, 0] != bc:
                ch += 1
            if k == 1:
                add_point(X[i], wi, bc, bd, params, stats)
                K[i, 0] = bc
                if wi > 0.0:  # see estep_full: a zero-weight row adds nothing, not 0 * -inf
                    tl -= wi * bd * inv_two_s2
            else:
                kept = min(size, k)
                for t in range(kept):
                    q[t] = np.exp(-(sel_d[t] - bd) * inv_two_s2)
                z = 0.0
                for t in range(kept):  # a loop that only reads: summed the same way wherever q lies
                    z += q[t]
                for t in range(kept):
                    add_point(X[i], wi * q[t] / z, sel_c[t], sel_d[t], params, stats)
                for t in range(k):
                    K[i, t] = sel_c[t] if t < kept else -1
                if wi > 0.0:
                    tl += wi * (-bd * inv_two_s2 + np.log(z))
            tw += wi
            tq += wi * euclid(X[i], bc, params, bd)
            nd += m
            if not collect or wi == 0.0:  # a zero-weight row adds no pair (it would only take a rank slot)
                continue
            # ---- pair statistics of the strategy
            if mode == NEIGHBOURHOOD:
                row = source_row[i] if source_row.shape[0] > 0 else i
                outside = (row + pair_phase) % pair_stride == 0  # this row records pairs outside G_c
                db = pair_value(params, bd)
                thr = thresholds[bc]
                # the best is K(n)'s first, expanded first (G_bc listing bc first): G_bc's other members
                # are in cand[1:G], in order unless G_bc repeats one
                first = best == 0 and k_first >= 0 and neighbours[bc, 0] == bc
                for t in range(m):
                    c = cand[t]
                    if c == bc:
                        continue
                    slot = -1
                    if first and t < G and neighbours[bc, t] == c:
                        slot = t
                    elif not first or t < G:  # past cand[G] the first expansion holds no member of G_bc
                        for g in range(1, G):
                            if neighbours[bc, g] == c:
                                slot = g
                                break
                    d = pair_value(params, d2[t])
                    if slot >= 0:
                        tsum[bc, slot] += wi * d
                        tcnt[bc, slot] += wi
                        continue
                    if not outside or (t >= searched and not explored_pairs):
                        continue
                    if d - db >= thr:  # centres at least d - db >= thr apart
                        continue
                    if d + db >= thr:  # undecided by the bounds: the centres' own distance
                        ndc += 1
                        if sqdist(centres[bc], centres[c]) >= thr * thr:
                            continue
                    pr_key[n_pr] = bc * C + c
                    pr_val[n_pr] = wi * d
                    pr_wt[n_pr] = wi
                    n_pr += 1
            else:
                for a in range(size):
                    for b in range(a + 1, size):
                        pr_key[n_pr] = min(sel_c[a], sel_c[b]) * C + max(sel_c[a], sel_c[b])
                        pr_val[n_pr] = wi * np.exp(-(sel_d[a] + sel_d[b] - 2.0 * bd) * inv_two_s2)
                        pr_wt[n_pr] = wi
                        n_pr += 1
        if n_pr > 0:
            rec_key, rec_val, rec_wt, n_rec = gather_pairs(rec_key, rec_val, rec_wt, n_rec, pr_key, pr_val, pr_wt,
                                                           n_pr)
    keys, sums, wts, rank, n_rank = pair_entries(rec_key, rec_val, rec_wt, n_rec, centres)
    scal[W] += tw
    scal[LSE] += tl
    scal[QE] += tq
    scal[NDIST_POINTS] += nd
    scal[NDIST_CENTRES] += ndc + n_rank
    scal[CHANGED] += ch
    return keys, sums, wts, rank


@njit(nogil=True, cache=True)
def centre_neighbours(centres, n_neighbors, rows_start, rows_stop, out_idx, out_dist):
    """Exact G nearest centres (itself first) of centres[rows_start:rows_stop] (Forster & Lücke 2018 Alg. 1).

    out_idx : (C, G) int32 OUT, out_dist : (C, G) float64 OUT (Euclidean distances).
    Returns the number of centre-to-centre distances evaluated, (rows_stop - rows_start) (C - 1).
    """
    C = centres.shape[0]
    k = min(n_neighbors, C)
    sel_d = np.empty(k)
    sel_c = np.empty(k, dtype=np.int64)
    n_evaluated = 0
    for i in range(rows_start, rows_stop):
        size = insert_sorted(sel_d, sel_c, np.int64(0), k, 0.0, i)  # not a literal 0: one specialisation
        for c in range(C):
            if c != i:
                size = insert_sorted(sel_d, sel_c, size, k, sqdist(centres[i], centres[c]), c)
                n_evaluated += 1
        for t in range(k):
            out_idx[i, t] = sel_c[t]
            out_dist[i, t] = np.sqrt(sel_d[t])
    return n_evaluated
