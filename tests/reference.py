"""Slow, obviously correct numpy references the engine is tested against."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from daskclust.kernels.rng import uniform


def sq_distances(X, centres):
    return ((X[:, None, :] - centres[None, :, :]) ** 2).sum(-1)


def truncated_estep(X, w, centres, sigma2, n_truncated):
    """Statistics of one E-step keeping the n_truncated closest clusters (dense numpy)."""
    d2 = sq_distances(X, centres)
    order = np.argsort(d2, axis=1, kind="stable")[:, :n_truncated]
    sel = np.take_along_axis(d2, order, axis=1)
    logits = -sel / (2 * sigma2)
    m = logits.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))[:, 0]
    q = np.exp(logits - lse[:, None])
    C, D = centres.shape
    R = np.zeros((len(X), C))
    np.put_along_axis(R, order, q, axis=1)
    wR = R * w[:, None]
    return {
        "S0": wR.sum(0),
        "S1": wR.T @ X,
        "SD2": (wR * d2).sum(0),
        "W": w.sum(),
        "LSE": (w * lse).sum(),
        "QE": (w * d2.min(1)).sum(),
        "labels": order[:, 0],
        "K": order,
    }


def gmm_em(X, centres, n_iter, reg=0.0):
    """Exact EM for the isotropic equal-weight GMM (Forster & Lücke 2018 Eqs. 3-4), textbook form.

    Returns per iteration (free energy per point, sigma2 used, QE) and the final centres.
    sigma2 starts at the mean squared distance to the nearest initial centre / D.
    """
    N, D = X.shape
    C = len(centres)
    mu = centres.astype(np.float64).copy()
    d2 = sq_distances(X, mu)
    sigma2 = d2.min(1).sum() / (D * N) + reg
    rows = []
    for t in range(n_iter + 1):
        d2 = sq_distances(X, mu)
        logits = -d2 / (2 * sigma2)
        m = logits.max(1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(logits - m).sum(1))
        F = lse.mean() - np.log(C) - 0.5 * D * np.log(2 * np.pi * sigma2)
        rows.append((F, sigma2, d2.min(1).sum()))
        if t == n_iter:
            break
        s = np.exp(logits - lse[:, None])
        mu_new = (s.T @ X) / s.sum(0)[:, None]
        sigma2 = (s * sq_distances(X, mu_new)).sum() / (D * N) + reg
        mu = mu_new
    return rows, mu


# ---- truncated search (issue 9): candidate sets, pair statistics, neighbourhoods, S rows ----------


def _randint(uniform, key, counter, n):
    return min(int(uniform(key, counter) * n), n - 1)


def _draw_from_row(idx, cdf, length, u):
    """First entry whose cumulative weight exceeds u * total (the last one at the latest)."""
    target = u * cdf[length - 1]
    return int(idx[min(int(np.searchsorted(cdf[:length], target, side="right")), length - 1)])


def search_candidates(K_row, C, *, mode, neighbours=None, row_idx=None, row_cdf=None, row_len=None, n_draws=0,
                      n_explore=0, key=0, row=0, uniform=None):
    """The clusters one point evaluates, in the order they are offered, without repeats.

    K(n) (-1 skipped); in "neighbourhood" mode each member c0 followed by G_c0; in
    "sampled" mode ``n_draws`` draws from the S row of c_bar = K(n)[0] (uniform over
    all clusters when that row has no more entries than K(n), or c_bar unknown),
    each redrawn up to 4 times while it hits a cluster already taken; then
    ``n_explore`` uniform draws (one when nothing else was offered). Draw j of the point in source row ``row`` is
    ``uniform(key, row * (4 n_draws + n_explore) + j)``, exploration starting at 4 n_draws.
    Also returns how many of them came before the exploration draws and whether the S row was used
    (None without draws).
    """
    k = len(K_row)
    cand = []

    def add(c):
        if c not in cand:
            cand.append(int(c))
            return True
        return False

    for c0 in K_row:
        if c0 < 0:
            continue
        add(c0)
        if mode == "neighbourhood":
            for c in neighbours[c0]:
                add(c)
    base = row * (4 * n_draws + n_explore)
    from_row = None
    if mode == "sampled" and n_draws:
        cbar = K_row[0]
        from_row = bool(cbar >= 0 and row_len[cbar] > k)
        counter = base
        for _ in range(n_draws):
            for _attempt in range(4):
                u = uniform(key, counter)
                counter += 1
                c = _draw_from_row(row_idx[cbar], row_cdf[cbar], row_len[cbar], u) if from_row else \
                    min(int(u * C), C - 1)
                if add(c):
                    break
    searched = len(cand)
    for e in range(n_explore):
        add(_randint(uniform, key, base + 4 * n_draws + e, C))
    if not cand:  # nothing known, nothing drawn: one uniform draw at the exploration's first counter
        add(_randint(uniform, key, base + 4 * n_draws, C))
    return cand, searched, from_row


def truncated_search_estep(X, w, centres, sigma2, K, *, mode, neighbours=None, thresholds=None, row_idx=None,
                           row_cdf=None, row_len=None, n_draws=0, n_explore=0, key=0, collect=True,
                           source_row=None, tsum=None, tcnt=None, uniform=None, explored_pairs=True):
    """One partial E-step, point by point in plain numpy/python (the docstring of
    ``daskclust.kernels.search.estep_truncated`` as a spec).

    Returns a dict: new K, S0, S1, SD2, W, LSE, QE, CHANGED, the distance counts
    NDIST_POINTS (distinct candidates summed over rows) and NDIST_CENTRES (pairs the
    triangle inequality leaves undecided, plus one rank per distinct returned pair),
    tsum / tcnt (inputs plus this step's sums), the returned pairs (keys ascending,
    sums, weights, rank), and ``cases``: how often each branch of the pair test was taken.
    """
    X = np.asarray(X, dtype=np.float64)
    n, D = X.shape
    C = len(centres)
    k = K.shape[1]
    P = max(k, 2) if mode == "sampled" else k
    w = np.ones(n) if w is None or len(w) == 0 else np.asarray(w, dtype=np.float64)
    K_new = K.copy()
    S0, S1, SD2 = np.zeros(C), np.zeros((C, D)), np.zeros(C)
    tot = dict(W=0.0, LSE=0.0, QE=0.0, CHANGED=0, NDIST_POINTS=0)
    tsum = None if tsum is None else np.array(tsum, dtype=np.float64)
    tcnt = None if tcnt is None else np.array(tcnt, dtype=np.float64)
    pairs: dict[int, list[float]] = {}
    cases = dict(in_table=0, explored=0, rejected_by_bound=0, accepted_by_bound=0, centre_test_rejected=0,
                 centre_test_accepted=0, rows_from_s=0, rows_uniform=0)
    n_undecided = 0
    for i in range(n):
        row = i if source_row is None or len(source_row) == 0 else int(source_row[i])
        cand, searched, from_row = search_candidates(K[i], C, mode=mode, neighbours=neighbours, row_idx=row_idx,
                                           row_cdf=row_cdf, row_len=row_len, n_draws=n_draws,
                                           n_explore=n_explore, key=key, row=row, uniform=uniform)
        if from_row is not None:
            cases["rows_from_s" if from_row else "rows_uniform"] += 1
        cand = np.array(cand, dtype=np.int64)
        d2 = ((X[i][None, :] - centres[cand]) ** 2).sum(1)
        order = np.argsort(d2, kind="stable")
        bc, bd = int(cand[order[0]]), float(d2[order[0]])
        sel_c, sel_d = cand[order[:P]], d2[order[:P]]
        wi = w[i]
        if K[i, 0] != bc:
            tot["CHANGED"] += 1
        kept = min(len(cand), k)
        logits = -(sel_d[:kept] - bd) / (2 * sigma2)
        z = np.exp(logits).sum()
        q = np.exp(logits) / z
        for c, qc, dc in zip(sel_c[:kept], q, sel_d[:kept]):
            S0[c] += wi * qc
            S1[c] += wi * qc * X[i]
            SD2[c] += wi * qc * dc
        K_new[i] = -1
        K_new[i, :kept] = sel_c[:kept]
        if wi > 0:
            tot["LSE"] += wi * (-bd / (2 * sigma2) + np.log(z))
        tot["W"] += wi
        tot["QE"] += wi * bd
        tot["NDIST_POINTS"] += len(cand)
        if not collect or wi == 0:  # zero-weight rows record no pair
            continue
        found = []
        if mode == "neighbourhood":
            db, thr = np.sqrt(bd), thresholds[bc]
            for t, (c, dc2) in enumerate(zip(cand, d2)):
                if c == bc:
                    continue
                d = np.sqrt(dc2)
                slots = np.flatnonzero(neighbours[bc, 1:] == c)
                if len(slots):
                    tsum[bc, slots[0] + 1] += wi * d
                    tcnt[bc, slots[0] + 1] += wi
                    cases["in_table"] += 1
                    continue
                if t >= searched and not explored_pairs:  # an exploration draw outside G_bc: no pair
                    cases["explored"] += 1
                    continue
                if d - db >= thr:
                    cases["rejected_by_bound"] += 1
                    continue
                if d + db >= thr:
                    n_undecided += 1
                    if ((centres[bc] - centres[c]) ** 2).sum() >= thr * thr:
                        cases["centre_test_rejected"] += 1
                        continue
                    cases["centre_test_accepted"] += 1
                else:
                    cases["accepted_by_bound"] += 1
                found.append((bc * C + int(c), wi * d))
        else:
            for a in range(len(sel_c)):
                for b in range(a + 1, len(sel_c)):
                    lo, hi = sorted((int(sel_c[a]), int(sel_c[b])))
                    found.append((lo * C + hi, wi * np.exp(-(sel_d[a] + sel_d[b] - 2 * bd) / (2 * sigma2))))
        for key_, value in found:
            entry = pairs.setdefault(key_, [0.0, 0.0])
            entry[0] += value
            entry[1] += wi
    keys = np.array(sorted(pairs), dtype=np.int64)
    sums = np.array([pairs[kk][0] for kk in keys])
    weights = np.array([pairs[kk][1] for kk in keys])
    rank = ((centres[keys // C] - centres[keys % C]) ** 2).sum(1) if len(keys) else np.zeros(0)
    return dict(K=K_new, S0=S0, S1=S1, SD2=SD2, tsum=tsum, tcnt=tcnt, keys=keys, sums=sums, weights=weights,
                rank=rank, NDIST_CENTRES=n_undecided + len(keys), cases=cases, **tot)


def prune_pairs(keys, sums, weights, rank, C, per_row, symmetric):
    """Each row's ``per_row`` pairs of smallest rank (ties: smaller partner first); an unordered
    pair i < j stays when row i or row j keeps it. Keys unique; returns the kept entries, keys ascending."""
    keep = set()
    rows: dict[int, list] = {}
    for t, key in enumerate(keys):
        i, j = divmod(int(key), C)
        rows.setdefault(i, []).append((rank[t], j, t))
        if symmetric:
            rows.setdefault(j, []).append((rank[t], i, t))
    for entries in rows.values():
        for _, _, t in sorted(entries)[:per_row]:
            keep.add(t)
    idx = np.array(sorted(keep, key=lambda t: keys[t]), dtype=np.int64)
    return keys[idx], sums[idx], weights[idx], rank[idx]


def estimated_table(prev, tsum, tcnt, keys, sums, counts):
    """Forster & Lücke 2018 Eq. 8 as implemented: per cluster c, itself, then the G - 1 candidates of smallest
    mean distance (tsum / tcnt for c~ = prev[c, g], g >= 1, then the pairs c * C + c~, both only
    with a positive count; ties keep the earlier), topped up with prev[c, 1:] entries not yet
    in the row, then the last entry repeated. Threshold = largest mean kept, inf when topped up."""
    C, G = prev.shape
    table = np.empty((C, G), dtype=np.int64)
    thresholds = np.full(C, np.inf)
    for c in range(C):
        offered = [(tsum[c, g] / tcnt[c, g], int(prev[c, g])) for g in range(1, G) if tcnt[c, g] > 0]
        offered += [(sums[t] / counts[t], int(keys[t] % C)) for t in range(len(keys))
                    if keys[t] // C == c and counts[t] > 0]
        order = sorted(range(len(offered)), key=lambda t: (offered[t][0], t))[: G - 1]
        row = [c] + [offered[t][1] for t in order]
        if len(row) == G and G > 1:
            thresholds[c] = max(offered[t][0] for t in order)
        for g in range(1, G):
            if len(row) < G and prev[c, g] not in row:
                row.append(int(prev[c, g]))
        row += [row[-1]] * (G - len(row))
        table[c] = row
    return table, thresholds


def similarity_rows(keys, sums, C, row_length, prev_idx, prev_cdf, prev_len):
    """S rows after an update from the (pruned) pairs (Exarchakis et al. 2022 Eq. 12 sums): each row its
    ``row_length`` largest summed similarities (an unordered pair i < j counts for row i and row j; ties: smaller index
    first), cumulative weights; rows no pair touches keep their previous entries.
    Returns per row (indices, cumulative weights) of its first row_len entries."""
    entries: dict[int, list] = {}
    for key, value in zip(keys, sums):
        i, j = divmod(int(key), C)
        entries.setdefault(i, []).append((-value, j))
        entries.setdefault(j, []).append((-value, i))
    out = []
    for c in range(C):
        if c in entries:
            best = sorted(entries[c])[:row_length]
            out.append((np.array([j for _, j in best]), np.cumsum([-v for v, _ in best])))
        else:
            out.append((prev_idx[c, : prev_len[c]].copy(), prev_cdf[c, : prev_len[c]].copy()))
    return out


def exact_centre_neighbours(centres, n_neighbors):
    """Brute force: each centre itself, then the others by distance (ties: smaller index), and the distances."""
    C = len(centres)
    k = min(n_neighbors, C)
    d2 = sq_distances(centres, centres)
    idx = np.empty((C, k), dtype=np.int64)
    for c in range(C):
        others = np.array([j for j in range(C) if j != c], dtype=np.int64)
        idx[c] = np.concatenate([[c], others[np.argsort(d2[c, others], kind="stable")]])[:k]
    return idx, np.sqrt(np.take_along_axis(d2, idx, axis=1))


def kd_leaf_order(centres, leaf=8):
    """Recursive kd-tree leaf order: split at the median (lower half len // 2 entries first) of
    the widest coordinate, stable in that coordinate, until at most ``leaf`` centres remain."""

    def visit(idx):
        if len(idx) <= leaf:
            return [idx]
        pts = centres[idx]
        dim = int(np.argmax(pts.max(0) - pts.min(0)))
        order = np.argsort(pts[:, dim], kind="stable")
        half = len(idx) // 2
        return visit(idx[order[:half]]) + visit(idx[order[half:]])

    return np.concatenate(visit(np.arange(len(centres))))


def gaussian_log_joint(X, weights, means, cov, cov_type):
    """log pi_c N(x_n; mu_c, Sigma_c) for every row and component, (N, C), textbook numpy."""
    N, D = X.shape
    out = np.empty((N, len(means)))
    for c in range(len(means)):
        diff = X - means[c]
        if cov_type == "isotropic":  # one variance shared by all components
            maha, logdet = (diff ** 2).sum(1) / cov, D * np.log(cov)
        elif cov_type == "spherical":
            maha, logdet = (diff ** 2).sum(1) / cov[c], D * np.log(cov[c])
        elif cov_type == "diag":
            maha, logdet = (diff ** 2 / cov[c]).sum(1), np.log(cov[c]).sum()
        else:  # through the Cholesky factor: an explicit inverse loses digits when Sigma_c is ill-conditioned
            L = np.linalg.cholesky(cov[c])
            maha = (scipy.linalg.solve_triangular(L, diff.T, lower=True) ** 2).sum(0)
            logdet = 2.0 * np.log(np.diag(L)).sum()
        with np.errstate(divide="ignore"):
            out[:, c] = np.log(weights[c]) - 0.5 * (D * np.log(2 * np.pi) + logdet + maha)
    return out


def gaussian_em_step(X, w, weights, means, cov, cov_type, reg, learn_weights=True):
    """One exact EM iteration of a weighted-data Gaussian mixture (responsibilities from all
    components, then the M-step of Bishop 9.24-9.26 with reg added to the variances; the weights
    kept when not ``learn_weights``). Returns (log-likelihood per point at the given parameters,
    new weights, means, covariances)."""
    lj = gaussian_log_joint(X, weights, means, cov, cov_type)
    m = lj.max(1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(lj - m).sum(1))
    R = np.exp(lj - lse[:, None]) * w[:, None]
    nk = R.sum(0)
    new_means = R.T @ X / nk[:, None]
    D = X.shape[1]
    if cov_type == "isotropic":
        sq = sum((R[:, c] * ((X - new_means[c]) ** 2).sum(1)).sum() for c in range(len(nk)))
        new_cov = sq / (D * w.sum()) + reg
    elif cov_type == "full":
        new_cov = np.stack([(R[:, c, None] * (X - new_means[c])).T @ (X - new_means[c]) / nk[c] + reg * np.eye(D)
                            for c in range(len(nk))])
    else:
        diag = np.stack([(R[:, c, None] * (X - new_means[c]) ** 2).sum(0) / nk[c] for c in range(len(nk))]) + reg
        new_cov = diag if cov_type == "diag" else diag.mean(1)
    return float((w * lse).sum() / w.sum()), nk / nk.sum() if learn_weights else weights, new_means, new_cov


def reference_greedy(P, w, n_clusters, n_trials, key):
    """scikit-learn's greedy k-means++ (weighted) in plain numpy, drawing with the kernels'
    counter-based stream: draw 0 picks the first centre in proportion to w, draws
    1 + (k - 1) n_trials + t the trials of step k in proportion to w d^2."""
    def draw(u, mass):
        cum = np.cumsum(mass)
        return int(np.searchsorted(cum, u * cum[-1], side="right"))

    D2 = sq_distances(P, P)
    chosen = [draw(uniform(key, 0), w)]
    d2 = D2[chosen[0]].copy()
    for k in range(1, n_clusters):
        trials = [draw(uniform(key, 1 + (k - 1) * n_trials + t), w * d2) for t in range(n_trials)]
        pots = [(w * np.minimum(d2, D2[t])).sum() for t in trials]
        best = trials[int(np.argmin(pots))]
        chosen.append(best)
        d2 = np.minimum(d2, D2[best])
    return np.array(chosen)


def reference_local_greedy(P, w, n_clusters, n_trials, key, k):
    """:func:`reference_greedy` with each trial's saving counted over its k nearest points only
    (itself first, then by distance, ties to the smaller index), the chosen centre lowering d^2
    of every point."""
    def draw(u, mass):
        cum = np.cumsum(mass)
        return int(np.searchsorted(cum, u * cum[-1], side="right"))

    D2 = sq_distances(P, P)
    near = np.array([sorted(range(len(P)), key=lambda j, i=i: (j != i, D2[i, j], j))[:k] for i in range(len(P))])
    chosen = [draw(uniform(key, 0), w)]
    d2 = D2[chosen[0]].copy()
    for step in range(1, n_clusters):
        trials = [draw(uniform(key, 1 + (step - 1) * n_trials + t), w * d2) for t in range(n_trials)]
        gains = [(w[near[t]] * np.maximum(d2[near[t]] - D2[t, near[t]], 0.0)).sum() for t in trials]
        best = trials[int(np.argmax(gains))]
        chosen.append(best)
        d2 = np.minimum(d2, D2[best])
    return np.array(chosen)


def mixture_data(seed=0, n=900, D=3, C=6):
    """C anisotropic, unequally sized Gaussian clusters."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(-12, 12, (C, D))
    sizes = rng.multinomial(n, rng.dirichlet(np.full(C, 3.0)))
    rows = []
    for c in range(C):
        A = rng.standard_normal((D, D)) * rng.uniform(0.3, 1.5, D)
        rows.append(means[c] + rng.standard_normal((sizes[c], D)) @ A)
    X = np.concatenate(rows)
    return X[rng.permutation(len(X))]


def assert_same_mixture(a, b):
    """The same fitted mixture: parameters to 1e-12, iterations, and the free energy of every iteration."""
    for name in ("weights_", "means_", "covariances_"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-12)
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose([r["free_energy"] for r in a.history_], [r["free_energy"] for r in b.history_],
                               rtol=1e-12)
