"""Accelerated greedy mixture learning (Verbeek et al. 2006 Sec. 5, Eqs. 14-21) on the cells of :mod:`daskclust.em.cell_loop`.

From a converged k-component mixture p_k, a new component phi with weight a is sought that maximises the
bound on the log-likelihood of p_{k+1} = (1 - a) p_k + a phi (Eq. 14) with p_k fixed:

1. The cells of the current partition are gathered to the driver with, per cell, F_A^k / n_A (its bound
   per row under p_k, Eq. 8) and its most responsible component s; the cells are split into the sets
   P_s by s. The driver holds cells, never rows: O(cells D^2) memory.
2. For every s, ``n_candidates`` candidates: the mean and covariance (Eq. 15) of a random subset S of P_s,
   here a cell drawn in proportion to n_A (distinct cells per s) and its nearest cells of P_s (by mean)
   until S holds ``CANDIDATE_SHARE`` of P_s's rows (at least 2 (D + 1)), a = n_S / n. Random halves of
   P_s, tried first, gave candidates too close to the component they came from (no gain until k = 6 on
   a 5-component mixture); single cells gave degenerate candidates on the finest partition (a row has
   no spread), where greedy learning then stopped at one component (one ad-hoc run each).
3. Partial EM of each candidate on the cells of its P_s only (the new component's responsibility is 0
   elsewhere): r_A of Eq. 18, then a, m_phi, C_phi of Eqs. 19-21, ``partial_iter`` times.
4. The candidate with the largest gain of the bound (Eq. 17 summed over P_s, minus sum F_A^k) joins the
   mixture: weights (1 - a) pi and a.

Cost per added component: one gathering pass, and on the driver O(k n_candidates |P_s| D^2 partial_iter)
-- about n_candidates partial_iter evaluations per cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk
from ..kernels.infer import top_components
from ..models import Params
from ..names import STATE_CELL_FRONTIER, STATE_CELL_K
from .cell_loop import load_tree, packed_cells

LOG_2PI = float(np.log(2 * np.pi))
CANDIDATE_SHARE = 0.05
"""Share of the rows of P_s a candidate's subset S of cells gathers (Eq. 15)."""


@dataclass
class GatherCellsOp:
    """Every chunk's frontier cells with their bound per row under the mixture ``kernel`` (all components)
    and their most responsible component; K(A) is dropped (the next mixture has another component)."""

    kernel: tuple

    reads_rows = False

    def new_acc(self) -> dict:
        return {"key": np.zeros((0, 2), dtype=np.int64), "X": None, "n": np.zeros(0), "lse": np.zeros(0),
                "best": np.zeros(0, dtype=np.int64)}

    def run(self, chunk: Chunk, acc: dict) -> None:
        tree = load_tree(chunk.state)
        frontier = chunk.state[STATE_CELL_FRONTIER]
        X, n = packed_cells(tree, frontier)
        idx = np.empty((len(X), 1), dtype=np.int32)
        q = np.empty((len(X), 1))
        lse = np.empty(len(X))
        top_components(X, self.kernel, np.zeros(len(X), dtype=np.int64), np.zeros((1, 0), dtype=np.int32), 1,
                       idx, q, lse)
        chunk.state.pop(STATE_CELL_K, None)
        key = np.column_stack([np.full(len(X), chunk.index), frontier])
        part = {"key": key, "X": X, "n": n, "lse": lse, "best": idx[:, 0].astype(np.int64)}
        acc.update(self.merge(dict(acc), part))

    @staticmethod
    def merge(a, b):
        if a["X"] is None:
            return b
        if b["X"] is None:
            return a
        merged = {name: np.concatenate([a[name], b[name]]) for name in a}
        order = np.lexsort((merged["key"][:, 1], merged["key"][:, 0]))  # chunk, node: independent of the tree
        return {name: value[order] for name, value in merged.items()}


def _split(X: np.ndarray, D: int, full: bool) -> tuple[np.ndarray, np.ndarray]:
    m = X[:, :D]
    V = X[:, D:].reshape(len(X), D, D) if full else X[:, D:]
    return m, V


def _expected_log_phi(m, V, mean, cov, full):
    """<log N(x; mean, cov)>_A of every cell (Eq. 10)."""
    D = m.shape[1]
    d = m - mean
    if full:
        L = np.linalg.cholesky(cov)
        z = np.linalg.solve(L, d.T)
        prec = np.linalg.inv(cov)
        maha = (z * z).sum(axis=0) + np.einsum("ij,nji->n", prec, V)
        log_det = 2 * np.log(np.diag(L)).sum()
    else:
        maha = ((d * d + V) / cov).sum(axis=1)
        log_det = np.log(cov).sum()
    return -0.5 * (maha + log_det + D * LOG_2PI)


def _moments(m, V, weights, full):
    """Weighted mean and covariance of the cells' rows (Eq. 15 / Eqs. 20-21)."""
    total = weights.sum()
    mean = weights @ m / total
    d = m - mean
    if full:
        cov = (np.einsum("n,nij->ij", weights, V) + np.einsum("n,ni,nj->ij", weights, d, d)) / total
    else:
        cov = (weights @ V + weights @ (d * d)) / total
    return mean, cov


@dataclass
class Candidate:
    gain: float
    a: float
    mean: np.ndarray
    cov: np.ndarray


def partial_em(m, V, n, bound, n_total, mean, cov, a, iters, reg, full) -> Candidate:
    """Eqs. 18-21 on the cells of one P_s; ``bound`` = F_A^k / n_A per cell. Returns the candidate and its
    gain, sum_A [F_A^{k+1} lower bound of Eq. 17] - sum_A F_A^k."""
    eye = np.eye(len(mean)) if full else 1.0
    for _ in range(iters + 1):
        log_phi = _expected_log_phi(m, V, mean, cov, full)
        num = np.log(a) + log_phi
        den = np.logaddexp(np.log1p(-a) + bound, num)
        r = np.exp(num - den)
        gain = float((n * (den - bound)).sum())  # Eq. 17 at the optimal r_A: n_A log((1-a) e^F + a e^<log phi>)
        nr = n * r
        if nr.sum() <= 0:
            break
        a_new = float(nr.sum() / n_total)
        if not 0 < a_new < 1:
            break
        mean_new, cov_new = _moments(m, V, nr, full)
        cov_new = cov_new + reg * eye
        if full and np.any(np.linalg.eigvalsh(cov_new) <= 0) or (not full and np.any(cov_new <= 0)):
            break
        a, mean, cov = a_new, mean_new, cov_new
    return Candidate(gain, a, mean, cov)


def add_component(cells: dict, params: Params, full: bool, n_candidates: int, partial_iter: int, reg: float,
                  rng: np.random.Generator) -> tuple[Params, dict]:
    """The (k+1)-component mixture: the best candidate over every P_s (the module docstring)."""
    D = params.means.shape[1]
    m, V = _split(cells["X"], D, full)
    n, best = cells["n"], cells["best"]
    bound = cells["lse"] - 0.5 * D * LOG_2PI  # F_A^k / n_A: the kernels' log-sum-exp plus the constant
    n_total = float(n.sum())
    chosen, evaluations = None, 0
    for s in range(len(params.means)):
        members = np.flatnonzero((best == s) & (n > 0))
        if len(members) < 2:
            continue
        mass = n[members] / n[members].sum()
        target = max(2.0 * (D + 1), CANDIDATE_SHARE * n[members].sum())
        for cell in rng.choice(members, size=min(n_candidates, len(members)), replace=False, p=mass):
            near = members[np.argsort(((m[members] - m[cell]) ** 2).sum(axis=1), kind="stable")]
            subset = near[: int(np.searchsorted(np.cumsum(n[near]), target)) + 1]
            mean, cov = _moments(m[subset], V[subset], n[subset], full)
            cov = cov + reg * (np.eye(D) if full else 1.0)
            a = float(min(max(n[subset].sum() / n_total, 1e-6), 0.5))
            cand = partial_em(m[members], V[members], n[members], bound[members], n_total, mean, cov, a,
                              partial_iter, reg, full)
            evaluations += len(members) * (partial_iter + 1)
            if chosen is None or cand.gain > chosen.gain:
                chosen = cand
    if chosen is None:
        return params, {"gain": 0.0, "evaluations": evaluations}
    cov = params.covariances
    new_cov = chosen.cov if full else np.asarray(chosen.cov)
    grown = Params(np.vstack([params.means, chosen.mean]), np.append((1 - chosen.a) * params.weights, chosen.a),
                   np.concatenate([cov, new_cov[None]]))
    return grown, {"gain": chosen.gain, "evaluations": evaluations}
