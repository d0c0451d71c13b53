"""Replication of Forster & Lücke 2018's Table 2, BIRCH rows.

BIRCH grid with C = 2025 (N = 202,500) and C = 4096 (N = 409,600); var-k-means-S
(KMeans, C' = 1) and var-GMM-S (GaussianMixture, C' = G) with G + 1 candidates
(G in {2, 5}, one exploratory cluster), mean of 5 runs: distance evaluations
saved against the full search -- N C per iteration over every distance the
iterations evaluate, point-to-centre and centre-to-centre, including the exact
neighbourhoods of the seeds in the first iteration -- and quantization error
relative to scikit-learn's KMeans
(greedy k-means++, n_init=1, mean of 5 runs). The paper seeds with AFK-MC2 and
compares to its own k-means; rows marked "afkmc2" use that seeding.
"""

from __future__ import annotations

import numpy as np

from .. import GaussianMixture, KMeans
from .data import birch_array
from .measure import daskclust_fit, sklearn_kmeans, warm_up
from .runner import Table

COMMAND = "daskclust bench --suite paper"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
PAPER = {  # (C, G) -> (var-k-means-S speedup, QE rel, var-GMM-S speedup (minimal / measured), QE rel)
    (2025, 2): ("675x", "-2.8%", "405x / 458x", "-4.6%"),
    (2025, 5): ("338x", "-4.3%", "78x / 143x", "-9.1%"),
    (4096, 2): ("1365x", "-3.7%", "819x / 927x", "-4.4%"),
    (4096, 5): ("683x", "-4.0%", "158x / 287x", "-11.7%"),
}
RUNS = 5


def estimator(name: str, C: int, G: int, init: str, seed: int):
    """var-k-means-S (C' = 1) or var-GMM-S (C' = G) with G + 1 candidates."""
    if name == "var-k-means-S":
        return KMeans(C, n_neighbors=G, init=init, n_init=1, random_state=seed)
    return GaussianMixture(C, covariance_type="isotropic", n_truncated=G, n_neighbors=G, init=init, random_state=seed)


def run(client, sizes=(2025, 4096), runs: int = RUNS) -> Table:
    table = Table(
        "Paper replication: Forster & Lücke 2018 Table 2, BIRCH rows (mean of 5 runs)",
        ["C", "N", "algorithm", "G", "seeding", "speedup (whole fit)", "speedup (median iteration)",
         "centre-centre share", "paper speedup", "QE vs scikit-learn", "paper QE vs k-means", "iterations", "fit s"],
    )
    warm_up(birch_array(64)[0], client)
    results = {}
    for C in sizes:
        X, _ = birch_array(C)
        ref = np.mean([sklearn_kmeans(X, C, "lloyd", seed)["qe"] for seed in range(runs)])
        for G in (2, 5):
            for column, name in enumerate(("var-k-means-S", "var-GMM-S")):
                inits = ["k-means||", "afkmc2"] if (G == 5 and name == "var-k-means-S") else ["k-means||"]
                for init in inits:
                    fits = [daskclust_fit(estimator(name, C, G, init, s), X, client) for s in range(runs)]
                    results[(C, name, G, init)] = {key: float(np.mean([f[key] for f in fits])) for key in
                                                   ("speedup", "speedup_iter", "centre_share", "qe", "n_iter")}
                    results[(C, name, G, init)]["qe"] /= ref
                    p_speed, p_qe = PAPER[(C, G)][2 * column: 2 * column + 2]
                    table.rows.append([
                        C, len(X), name, f"{G}+1", init, f"{np.mean([f['speedup'] for f in fits]):.0f}x",
                        f"{np.mean([f['speedup_iter'] for f in fits]):.0f}x",
                        f"{100 * np.mean([f['centre_share'] for f in fits]):.1f}%", p_speed,
                        f"{100 * (np.mean([f['qe'] for f in fits]) / ref - 1):+.1f}%", p_qe,
                        np.mean([f["n_iter"] for f in fits]), np.mean([f["seconds"] for f in fits]),
                    ])
    table.notes.append("QE: exact quantization error of the fitted centres (all centres searched); scikit-learn "
                       "KMeans(n_clusters=C, n_init=1), seeds 0-4, is the reference")
    table.notes.append("speedup (whole fit): N C x iterations / all distance evaluations of the iterations "
                       "(point-to-centre in the E-steps; centre-to-centre: the seeds' exact neighbourhoods, C (C - 1), "
                       "in the first iteration, the estimated search's threshold tests and pair ranks, the M-step's "
                       "shift of each centre); median iteration: N C / that iteration's evaluations; centre-centre "
                       "share: their part of all evaluations. Paper: 'saved distance evaluations per iteration'; for "
                       "var-GMM-S the theoretical minimal and the measured value")
    table.prose.append(verdict(results))
    return table


def _paper_value(text: str) -> list[float]:
    return [float(v.strip().rstrip("x")) for v in text.split("/")]


def verdict(results: dict) -> str:
    """The comparison with Forster & Lücke 2018, written from this run's means (``results[(C, name, G, init)]``)."""
    kmeans, gmm, whole, shares, afk = [], [], [], [], []
    n_below = 0
    for (C, name, G, init), r in sorted(results.items()):
        paper = _paper_value(PAPER[(C, G)][0 if name == "var-k-means-S" else 2])
        if init != "k-means||":
            afk.append(f"C = {C}: {100 * (r['qe'] - 1):+.1f} % after {r['n_iter']:.1f} iterations")
            continue
        here = f"C = {C}, {G}+1: {r['speedup_iter']:.0f}x"
        if name == "var-k-means-S":
            kmeans.append(f"{here} vs {paper[0]:.0f}x")
        else:
            low, high = paper
            where = ("below the minimal" if r["speedup_iter"] < low else
                     "between the minimal and the measured" if r["speedup_iter"] <= high else "above both")
            gmm.append(f"{here} vs {low:.0f}x / {high:.0f}x, {where}")
        n_below += r["speedup"] < paper[-1]
        whole.append(f"{name} C = {C}, {G}+1: {r['speedup']:.0f}x (paper {paper[-1]:.0f}x)")
        shares.append(100 * r["centre_share"])
    text = (f"Against Forster & Lücke 2018's Table 2, counting every distance (point-to-centre and centre-to-centre): per "
            f"median iteration var-k-means-S gives {'; '.join(kmeans)}; var-GMM-S gives {'; '.join(gmm)} "
            f"(the paper's minimal / measured values). Over whole fits {n_below} of {len(whole)} rows are below "
            f"the paper's per-iteration figure (its measured one for var-GMM-S: {'; '.join(whole)}). Why: the "
            f"seeds' exact neighbourhoods cost C (C - 1) centre distances once, in the first iteration, and the "
            f"fits are short, so centre-to-centre distances are {min(shares):.1f}-{max(shares):.1f} % of all "
            f"evaluations; the paper reports per iteration. The count is not tuned.")
    if afk:
        text += (f" From AFK-MC2 seeds var-k-means-S ends {'; '.join(afk)} against scikit-learn's QE: its chains "
                 "leave parts of the grid without a centre that no E-step moves into (see the seeding table).")
    return text
