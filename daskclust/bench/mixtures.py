"""The mixture families against scikit-learn's GaussianMixture, per-iteration time in C, cost per pair, predict.

Rows (one run, 2 workers x 1 thread, seeding included for everyone):

- fit: daskclust ``GaussianMixture(covariance_type=T)`` against scikit-learn's
  ``GaussianMixture(covariance_type=T)``, both with their defaults (whole fits: daskclust's seeding
  and k-means start, scikit-learn's k-means start), seeds 0-4, on 90 % of the rows; quality is the
  mean log-likelihood per point of the held-out 10 % (exact, all components), mean over the seeds,
  with the standard error of the difference of the two means (one seed's held-out likelihood on
  uci_letter moves by more than the 0.5 % the target allows).
  Targets: BIRCH C = 1024 spherical >= 100x, uci_letter C = 500 diag >= 20x, BIRCH C = 1024 full
  >= 20x, each at a held-out log-likelihood at least scikit-learn's minus 0.5 % of its magnitude.
- per-iteration time of every family at C = 256, 1024, 4096, 16384 on BIRCH grids of the same N
  (median of 6 iterations after the first, tol=0; target: flat within 1.5x), and the E-step's time
  per evaluated (row, component) pair at D = 64.
- predict and score_samples at C = 4096 (BIRCH, spherical) and on uci_letter's held-out rows (C = 500,
  diagonal): daskclust's against scikit-learn's with the same parameters (predict >= 10x; scikit-learn's
  in blocks of 20,000 rows, which its N x C temporaries need at this size), the share of rows given the
  exact most likely component (>= 99.9 %) and the score's largest error against the exact
  log-likelihood (<= 1e-3 per row).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .. import GaussianMixture, KMeans
from .data import birch_array, blobs_array
from .measure import timed
from .realdata import data_dir
from .runner import Table

COMMAND = "daskclust bench --suite mixtures"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
FIT_CASES = (("BIRCH C=1024", "spherical", 100.0), ("uci_letter C=500", "diag", 20.0),
             ("BIRCH C=1024", "full", 20.0))
SCALING_C = (256, 1024, 4096, 16384)
PREDICT_C = 4096
"""The scaling rows' C whose spherical model the predict rows use (scikit-learn's predict builds N x C
temporaries: 20,000 x 4096 per block is 0.6 GB)."""
SCALING_ROWS = 409_600
SCALING_ITERATIONS = 6
FAMILIES = ("kmeans", "isotropic", "spherical", "diag", "full")
HELD_OUT = 0.1
FIT_SEEDS = (0, 1, 2, 3, 4)
QUALITY = 0.005
"""Allowed shortfall of the held-out log-likelihood, as a share of scikit-learn's magnitude (the
realdata-mixtures suite's target)."""
PREDICT_BLOCK = 20_000


def load(name: str) -> np.ndarray:
    if name.startswith("BIRCH"):
        return birch_array(int(name.split("=")[1]))[0].astype(np.float64)
    return np.load(data_dir() / "uci_letter" / "X.npy").astype(np.float64)


def split(X: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(len(X))
    n_test = int(HELD_OUT * len(X))
    return X[perm[n_test:]], X[perm[:n_test]]


def estimator(C: int, family: str, seed: int, **kw):
    if family == "kmeans":
        return KMeans(C, random_state=seed, **kw)
    return GaussianMixture(C, covariance_type=family, random_state=seed, **kw)


def warm_up(X, client) -> None:
    """Compile every family's kernels for this dimension on the workers before timing."""
    sample = X[: min(len(X), 3000)]
    for family in FAMILIES:
        estimator(16, family, 0, max_iter=2).fit(sample, client=client)


def fit_rows(client) -> tuple[list[list], list[str], dict]:
    """The fit rows (whole fits with both libraries' defaults, seeds ``FIT_SEEDS``); also returns the
    first seed's fitted model with its held-out rows (for the predict rows)."""
    from sklearn.mixture import GaussianMixture as SKGaussianMixture

    rows, notes, models = [], [], {}
    for name, family, target in FIT_CASES:
        C = int(name.split("=")[1])
        train, test = split(load(name), 0)
        warm_up(train, client)
        ours, theirs = Fits(), Fits()
        for seed in FIT_SEEDS:
            model, seconds = timed(lambda: estimator(C, family, seed).fit(train, client=client))
            if seed == FIT_SEEDS[0]:
                models[(name, family)] = (model, test)
            exact = float(model.score(test, exact=True))
            ours.add(seconds, model.n_iter_, exact, model.seeding_time_, abs(float(model.score(test)) - exact))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter
                sk, seconds = timed(lambda: SKGaussianMixture(C, covariance_type=family, random_state=seed).fit(train))
            theirs.add(seconds, sk.n_iter_, float(sk.score(test)))
        speedup = theirs.seconds / ours.seconds
        quality = ours.held_out >= theirs.held_out - QUALITY * abs(theirs.held_out)
        ok = speedup >= target and quality
        rows.append([name, family, "daskclust", ours.seconds, ours.iterations, ours.held_out, f"{speedup:.1f}x",
                     f">= {target:.0f}x", "PASS" if ok else "MISS"])
        rows.append([name, family, "scikit-learn", theirs.seconds, theirs.iterations, theirs.held_out, "1x", "-", "-"])
        notes.append(f"{name} {family}: daskclust {ours.seconds:.2f} s per fit ({ours.iterations:.0f} iterations, "
                     f"seeding and k-means start {ours.seeding:.2f} s), held-out log-likelihood {ours.held_out:.4f} "
                     f"(exact; its default score() differs by at most {ours.score_error:.1e}); scikit-learn "
                     f"{theirs.seconds:.2f} s ({theirs.iterations:.0f} iterations), {theirs.held_out:.4f}; "
                     f"standard error of the difference {np.hypot(ours.held_out_sem, theirs.held_out_sem):.3f} "
                     f"over {len(FIT_SEEDS)} seeds; "
                     f"{speedup:.1f}x (target {target:.0f}x at a held-out log-likelihood at least scikit-learn's "
                     f"minus {100 * QUALITY:.1f} % of its magnitude: {'met' if quality else 'not met'}): "
                     f"{'PASS' if ok else 'MISS'}")
    return rows, notes, models


@dataclass
class Fits:
    """One library's fits of one row, one entry per seed: seconds, iterations, held-out
    log-likelihood, seeding seconds (daskclust's, k-means start included) and the error of the
    default score against the exact one (daskclust's)."""

    runs: list[tuple[float, int, float, float, float]] = field(default_factory=list)

    def add(self, seconds, iterations, held_out, seeding=0.0, score_error=0.0) -> None:
        self.runs.append((seconds, iterations, held_out, seeding, score_error))

    def mean(self, column: int) -> float:
        return float(np.mean([run[column] for run in self.runs]))

    @property
    def seconds(self) -> float:
        return self.mean(0)

    @property
    def iterations(self) -> float:
        return self.mean(1)

    @property
    def held_out(self) -> float:
        return self.mean(2)

    @property
    def seeding(self) -> float:
        return self.mean(3)

    @property
    def score_error(self) -> float:
        return float(max(run[4] for run in self.runs))

    @property
    def held_out_sem(self) -> float:
        """Standard error of the mean held-out log-likelihood over the seeds."""
        values = [run[2] for run in self.runs]
        return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def scaling_rows(client, seed: int) -> tuple[list[list], list[str], dict]:
    """Median iteration seconds per family and C at a fixed N; returns the spherical model at ``PREDICT_C`` too."""
    rows, notes, models = [], [], {}
    per_iter = {family: {} for family in FAMILIES}
    for C in SCALING_C:
        X = birch_array(C, points=SCALING_ROWS // C)[0].astype(np.float64)
        warm_up(X, client)
        for family in FAMILIES:
            # steady iterations: a fixed number of them (tol=0), the first (K(n) from the seeds) left out
            model = estimator(C, family, seed, max_iter=SCALING_ITERATIONS, tol=0).fit(X, client=client)
            seconds = float(np.median([r["seconds"] for r in model.history_[1:]]))
            per_iter[family][C] = seconds
            rows.append([f"BIRCH N={len(X):,}", family, C, 1e3 * seconds, model.n_iter_])
            if C == PREDICT_C and family == "spherical":
                models["predict"] = (model, X)
    for family, by_c in per_iter.items():
        ratio = max(by_c.values()) / min(by_c.values())
        notes.append(f"{family}: median iteration {', '.join(f'{1e3 * s:.0f} ms' for s in by_c.values())} at C = "
                     f"{', '.join(map(str, by_c))}; max / min {ratio:.2f} (target <= 1.5): "
                     f"{'PASS' if ratio <= 1.5 else 'MISS'}")
    return rows, notes, models


def pair_cost_rows(client, seed: int) -> tuple[list[list], list[str]]:
    """E-step seconds per evaluated (row, component) pair and parameter memory at D = 64, C = 1024."""
    X, _ = blobs_array(100_000, 64, 1024)
    X = X.astype(np.float64)
    C, D = 1024, X.shape[1]
    warm_up(X, client)
    rows, notes = [], []
    for family in ("isotropic", "spherical", "diag", "full"):
        model = estimator(C, family, seed, max_iter=3, tol=0).fit(X, client=client)
        steady = model.history_[1:]
        ns = sum(r["seconds"] for r in steady) / sum(r["n_distances_points"] for r in steady)
        memory = {"isotropic": C * D, "spherical": C * (D + 2), "diag": C * (2 * D + 1),
                  "full": C * (D + D * D + 1)}[family] * 8
        rows.append([f"blobs N=100k D={D} C={C}", family, 1e9 * ns, memory / 2**20])
    diag_ns, full_ns = rows[2][2], rows[3][2]
    notes.append(f"covariance_type='diag': {diag_ns:.0f} ns per pair against {full_ns:.0f} ns for 'full' "
                 f"({full_ns / diag_ns:.1f}x) and {rows[2][3]:.1f} MiB of parameters against {rows[3][3]:.1f} MiB "
                 "at D = 64, C = 1024")
    return rows, notes


def as_sklearn(model):
    """scikit-learn's GaussianMixture holding ``model``'s parameters (its exact predict and score)."""
    from sklearn.mixture import GaussianMixture as SKGaussianMixture

    sk = SKGaussianMixture(model.n_components, covariance_type=model.covariance_type)
    sk.weights_, sk.means_, sk.covariances_ = model.weights_, model.means_, model.covariances_
    sk.precisions_cholesky_, sk.precisions_ = model.precisions_cholesky_, model.precisions_
    return sk


def in_blocks(fn, X):
    """``fn`` over blocks of rows: scikit-learn's predict builds N x C arrays (13 GB at N = 409,600, C = 4096)."""
    return np.concatenate([fn(X[s:s + PREDICT_BLOCK]) for s in range(0, len(X), PREDICT_BLOCK)])


def exact_label_share(sk, X: np.ndarray, labels: np.ndarray, block: int = 4096) -> float:
    """The share of rows whose label is a most likely component under scikit-learn's exact log-joint
    (ties to 1e-9 relative), computed a block of rows at a time (N x C log-joints do not fit in memory
    at N = 409,600, C = 4096)."""
    hits = 0
    for start in range(0, len(X), block):
        joint = sk._estimate_weighted_log_prob(X[start:start + block])
        rows = np.arange(len(joint))
        best = joint.max(axis=1)
        hits += int((joint[rows, labels[start:start + block]] >= best - 1e-9 * np.abs(best)).sum())
    return hits / len(X)


def predict_rows(label: str, model, X) -> tuple[list[list], list[str]]:
    """predict and score of ``model`` on the rows ``X`` against scikit-learn's with the same parameters:
    time, the share of rows given the exact most likely component, the score's error."""
    sk = as_sklearn(model)
    ours, t_ours = timed(model.predict, X)
    theirs, t_sk = timed(lambda: in_blocks(sk.predict, X))
    exact = exact_label_share(sk, X, ours)
    scores, t_score = timed(model.score_samples, X)
    sk_scores, t_sk_score = timed(lambda: in_blocks(sk.score_samples, X))
    error = float(np.abs(scores - sk_scores).max())
    speedup, score_speedup = t_sk / t_ours, t_sk_score / t_score
    C, family = model.n_components, model.covariance_type
    rows = [[label, family, "daskclust predict", f"{t_ours:.2f} s (scikit-learn {t_sk:.2f} s)", f"{speedup:.1f}x",
             f"{100 * exact:.2f} % exact labels"],
            [label, family, "daskclust score_samples", f"{t_score:.2f} s (scikit-learn {t_sk_score:.2f} s)",
             f"{score_speedup:.1f}x", f"max error {error:.1e} per row"]]
    note = (f"{label} {family}, C = {C}, {len(X):,} rows: predict {t_ours:.2f} s against scikit-learn's {t_sk:.2f} s "
            f"({speedup:.1f}x, target >= 10x: {'PASS' if speedup >= 10 else 'MISS'}), the exact most likely "
            f"component on {100 * exact:.3f} % of rows (target >= 99.9 %: {'PASS' if exact >= 0.999 else 'MISS'}; "
            f"scikit-learn's labels agree on {100 * float((ours == theirs).mean()):.2f} %); score_samples "
            f"{t_score:.2f} s against {t_sk_score:.2f} s ({score_speedup:.1f}x), largest difference from the exact "
            f"log-likelihood {error:.1e} per row (target <= 1e-3: {'PASS' if error <= 1e-3 else 'MISS'})")
    return rows, [note]


def run(client, seed: int = 0) -> Table:
    table = Table("Mixture families against scikit-learn's GaussianMixture (2 workers x 1 thread; seeding included)",
                  ["data", "covariance", "system", "seconds", "iterations", "held-out log-likelihood / point",
                   "speedup", "target", "result"])
    rows, notes, fitted = fit_rows(client)
    table.rows += rows
    table.notes += notes
    scaling, scaling_notes, models = scaling_rows(client, seed)
    table.rows += [[d, f, "daskclust", f"{ms:.0f} ms / iteration at C = {C}", it, "-", "-", "flat in C", "-"]
                   for d, f, C, ms, it in scaling]
    table.notes += scaling_notes
    pairs, pair_notes = pair_cost_rows(client, seed)
    table.rows += [[d, f, "daskclust", f"{ns:.1f} ns / pair", "-", "-", "-", f"{mib:.1f} MiB parameters", "-"]
                   for d, f, ns, mib in pairs]
    table.notes += pair_notes
    model, X = models["predict"]
    letter, held_out = fitted[("uci_letter C=500", "diag")]
    for label, (m, rows_) in ((f"BIRCH C={model.n_components} N={len(X):,}", (model, X)),
                              ("uci_letter C=500, held-out rows", (letter, held_out))):
        prows, pnotes = predict_rows(label, m, rows_)
        table.rows += [[d, f, system, seconds, "-", "-", speedup, ">= 10x" if "predict" in system else "-", result]
                       for d, f, system, seconds, speedup, result in prows]
        table.notes += pnotes
    return table
