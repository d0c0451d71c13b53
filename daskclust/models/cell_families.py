"""EM on cached cell statistics (Verbeek et al. 2006, Verbeek, Nunnink & Vlassis): diagonal and full mixtures fitted on cells.

A cell A (a kd-tree node's rows) stands in for its rows through its weight n_A, its mean m_A = <x>_A and its
within-cell covariance V_A = <x x^T>_A - m_A m_A^T (diagonal: the per-feature variances). The kernels read a
cell packed as one row, m_A then V_A (D values for "diag", D^2 row-major for "full"), with n_A as its sample
weight. All rows of a cell share the responsibilities q_A(s) (Eq. 9), q_A(s) ~ pi_s exp <log N(x; mu_s, S_s)>_A,
and by Eq. 10

    -2 <log pi_s N(x; mu_s, S_s)>_A - D log 2 pi = (m_A - mu_s)^T S_s^-1 (m_A - mu_s) + tr(S_s^-1 V_A)
                                                  + log det S_s - 2 log pi_s,

the family's cost: the row cost of the mean plus a trace term. The M-step (Eqs. 11-13) is the dense family's
with S1 += n_A q m_A and S2 += n_A q ((m_A - mu_s)(m_A - mu_s)^T + V_A), the second moment of the cell's rows
about mu_s. The free energy over cells (Eq. 8), sum_A n_A log sum_s exp(<log pi_s N>_A), is LSE / W -
(D/2) log 2 pi as for rows; it bounds the log-likelihood from below and equals it when every cell is one
row (V_A = 0: then the cost is the row's and this is the dense family's exact EM). Cost per (cell,
component) pair: 4 D flops ("diag"), about 2 D^2 ("full"), against 3 D and D (D + 1) per row.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .diag import DiagFamily
from .full import FullFamily
from .overloads import register

CellDiagParams = namedtuple("CellDiagParams", ["means", "prec", "const"])
"""As :class:`~.diag.DiagParams`, for packed cells."""

CellFullParams = namedtuple("CellFullParams", ["means", "chol_inv", "precision", "const"])
"""As :class:`~.full.FullParams`, plus the (C, D, D) precisions S^-1 = M^T M for the trace term."""


def _diag_cost(x, c, params):
    D = x.shape[0] // 2
    mu = params.means[c]
    prec = params.prec[c]
    s = 0.0
    for j in range(D):
        t = x[j] - mu[j]
        s += (t * t + x[D + j]) * prec[j]
    return s + params.const[c]


def _diag_add(x, wq, c, value, params, stats):
    D = x.shape[0] // 2
    mu = params.means[c]
    stats[0][c] += wq
    for j in range(D):
        stats[1][c, j] += wq * x[j]
        t = x[j] - mu[j]
        stats[2][c, j] += wq * (t * t + x[D + j])


def _diag_euclid(x, c, params, value):
    """<||x - mu_c||^2>_A = ||m_A - mu_c||^2 + tr V_A: the cell's rows' quantization error per row."""
    D = x.shape[0] // 2
    mu = params.means[c]
    s = 0.0
    for j in range(D):
        t = x[j] - mu[j]
        s += t * t + x[D + j]
    return s


register(CellDiagParams, cost=_diag_cost, add_point=_diag_add, euclid=_diag_euclid)


def _full_cost(x, c, params):
    D = params.means.shape[1]
    mu = params.means[c]
    M = params.chol_inv[c]
    P = params.precision[c]
    s = 0.0
    for k in range(D):
        z = 0.0
        for j in range(k + 1):
            z += M[k, j] * (x[j] - mu[j])
        s += z * z
    for k in range(D):
        for j in range(D):
            s += P[k, j] * x[D + k * D + j]
    return s + params.const[c]


def _full_add(x, wq, c, value, params, stats):
    D = params.means.shape[1]
    mu = params.means[c]
    S2 = stats[2][c]
    stats[0][c] += wq
    for j in range(D):
        stats[1][c, j] += wq * x[j]
        tj = x[j] - mu[j]
        for k in range(j, D):
            S2[j, k] += wq * (tj * (x[k] - mu[k]) + x[D + j * D + k])


def _full_euclid(x, c, params, value):
    D = params.means.shape[1]
    mu = params.means[c]
    s = 0.0
    for j in range(D):
        t = x[j] - mu[j]
        s += t * t + x[D + j * D + j]
    return s


register(CellFullParams, cost=_full_cost, add_point=_full_add, euclid=_full_euclid)


class CellDiagFamily(DiagFamily):
    """The diagonal mixture on packed cells (the module docstring); M-step and free energy as "diag"."""

    name = "cells-diag"
    full_cells = False
    """The cells carry the diagonal of their within-cell covariance (the trees' layout)."""

    def kernel_params(self, params):
        return CellDiagParams(*super().kernel_params(params))


class CellFullFamily(FullFamily):
    """The full-covariance mixture on packed cells; M-step and free energy as "full"."""

    name = "cells-full"
    full_cells = True
    """The cells carry their whole within-cell covariance, D^2 values."""

    def kernel_params(self, params):
        means, M, const = super().kernel_params(params)
        return CellFullParams(means, M, np.ascontiguousarray(M.transpose(0, 2, 1) @ M), const)


CELL_FAMILIES = {"diag": CellDiagFamily(), "full": CellFullFamily()}
"""The cell families by ``covariance_type``: the layouts :class:`~daskclust.CellGaussianMixture` fits."""
