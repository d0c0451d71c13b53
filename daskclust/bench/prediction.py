"""The cost model of one EM iteration (docs/scaling.md): constants, a scenario, the predicted
parts of an iteration, where the driver and the scheduler become the limit, and the prose
the ``costmodel`` suite writes from them.

The model, per family::

    t_iter = compute + read + tree + driver + overhead
    compute  = N r / (W T)                                      r: seconds per row per core
    read     = (N D s / W) (rho / T + 1 / beta)                 rho: seconds per byte per core
    tree     = depth (2 B_up / bw + lat + 2 t_merge) + B_root / bw + lat        up the tree
             + B_down / bw + lat + depth (2 B_down / bw + lat)                  down the tree
    driver   = t_drv(C)
    overhead = a + b W

where depth is the worker tree's depth, B_up(C) the largest accumulator a worker sends its
parent, B_root(C) the root's (what the driver receives), B_down(C) the E-step operation
(parameters and search tables), t_merge(C) one merge of two accumulators and t_drv(C) the
driver's M-step and neighbourhood update, each a line in C fitted at the scenario's D.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Line:
    """y = intercept + slope x, fitted by least squares (:meth:`fit`)."""

    intercept: float
    slope: float

    @classmethod
    def fit(cls, xs, ys) -> Line:
        """The least-squares line through the points (xs, ys)."""
        slope, intercept = np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)
        return cls(float(intercept), float(slope))

    def __call__(self, x: float) -> float:
        """The line's value at ``x``."""
        return self.intercept + self.slope * x


@dataclass(frozen=True)
class FamilyConstants:
    """One family's measured constants at the scenario's D.

    row_seconds : r, E-step seconds per row on one core (data in memory); bytes_up, bytes_root,
    bytes_down, merge_seconds, driver_seconds : lines in C (see the module docstring).
    """

    name: str
    row_seconds: float
    bytes_up: Line
    bytes_root: Line
    bytes_down: Line
    merge_seconds: Line
    driver_seconds: Line


@dataclass(frozen=True)
class Scenario:
    """The cluster and data the model is evaluated for (assumptions, not measurements).

    rows N, features D (float32: ``value_bytes`` 4), clusters C, workers W with ``threads`` T
    each; ``store_bandwidth`` beta: bytes per second one worker streams from object storage;
    ``network_bandwidth`` bw: bytes per second of a worker's link; ``hop_latency`` lat: seconds
    per message between workers (and to the driver).
    """

    rows: float = 1e10
    features: int = 16
    clusters: int = 10_000
    workers: int = 100
    threads: int = 8
    value_bytes: int = 4
    store_bandwidth: float = 500e6
    network_bandwidth: float = 1.25e9
    hop_latency: float = 1e-3


def tree_depth(n_workers: int) -> int:
    """Depth of the engine's worker tree (``Shard.run_tree``: the root runs its own chunks and
    hands each half of the other workers to that half's first one): floor(log2 W)."""
    depth = 0
    while n_workers > 1:
        n_workers = n_workers - 1 - (n_workers - 1) // 2  # the larger half
        depth += 1
    return depth


def compute_seconds(f: FamilyConstants, s: Scenario) -> float:
    """N r / (W T): the E-step's kernels on every core."""
    return s.rows * f.row_seconds / (s.workers * s.threads)


def worker_bytes(s: Scenario) -> float:
    """N D s / W: the bytes of rows each worker reads per iteration."""
    return s.rows * s.features * s.value_bytes / s.workers


def decode_seconds(read_per_byte: float, s: Scenario) -> float:
    """(N D s / W) rho / T: the cores' part of reading (the store's library, decompression, copies)."""
    return worker_bytes(s) * read_per_byte / s.threads


def transfer_seconds(s: Scenario) -> float:
    """(N D s / W) / beta: each worker's share of the rows coming from object storage."""
    return worker_bytes(s) / s.store_bandwidth


def read_seconds(read_per_byte: float, s: Scenario) -> float:
    """Decoding plus transfer, each worker reading its share of the rows."""
    return decode_seconds(read_per_byte, s) + transfer_seconds(s)


def tree_seconds(f: FamilyConstants, s: Scenario, clusters: float | None = None) -> float:
    """The operation down the worker tree and the accumulators up it, at ``clusters`` (default
    the scenario's C): on each level a worker sends to (receives from) two others over its link,
    and merges each child's accumulator into its own."""
    C = s.clusters if clusters is None else clusters
    depth, bw, lat = tree_depth(s.workers), s.network_bandwidth, s.hop_latency
    up = depth * (2 * f.bytes_up(C) / bw + lat + 2 * f.merge_seconds(C)) + f.bytes_root(C) / bw + lat
    down = f.bytes_down(C) / bw + lat + depth * (2 * f.bytes_down(C) / bw + lat)
    return up + down


def predict(f: FamilyConstants, overhead: Line, read_per_byte: float, s: Scenario) -> dict[str, float]:
    """The parts of one iteration (seconds) and their sum, ``total``."""
    parts = {
        "compute": compute_seconds(f, s),
        "read": read_seconds(read_per_byte, s),
        "tree": tree_seconds(f, s),
        "driver": f.driver_seconds(s.clusters),
        "overhead": overhead(s.workers),
    }
    parts["total"] = sum(parts.values())
    return parts


def crossing(line: Line, level: float) -> float:
    """The x where ``line`` reaches ``level`` (inf when it never grows to it)."""
    if line.slope <= 0:
        return float("inf") if line.intercept < level else 0.0
    return max(0.0, (level - line.intercept) / line.slope)


def driver_limit(f: FamilyConstants, s: Scenario) -> float:
    """C at which the driver's work per iteration equals the workers' compute (which does not
    depend on C: G + 1 candidates per row)."""
    return crossing(f.driver_seconds, compute_seconds(f, s))


def tree_limit(f: FamilyConstants, s: Scenario) -> float:
    """C at which the tree's transfers and merges equal the workers' compute (tree_seconds is
    linear in C)."""
    at0 = tree_seconds(f, s, 0.0)
    return crossing(Line(at0, tree_seconds(f, s, 1.0) - at0), compute_seconds(f, s))


def overhead_limit(f: FamilyConstants, overhead: Line, s: Scenario) -> float:
    """W at which the per-pass overhead a + b W equals the compute N r / (W T): the positive
    root of b W^2 + a W - N r / T."""
    work = s.rows * f.row_seconds / s.threads
    a, b = overhead.intercept, overhead.slope
    if b <= 0:
        return work / a if a > 0 else float("inf")
    return (-a + np.sqrt(a * a + 4 * b * work)) / (2 * b)


REMEDIES = {
    "driver": "shard the M-step and the neighbourhood update over the workers (the statistics reduce-scattered by "
              "cluster range instead of reduced to one root, each worker updating its range, the new parameters "
              "gathered by all) and overlap the driver's update of one iteration with the broadcast of the next",
    "tree": "reduce-scatter the statistics by cluster range, so that no message holds all C clusters",
    "overhead": "fewer, larger workers (more threads under each worker's one actor, so fewer hops and processes "
                "per pass), fewer and larger chunks, and iterations pipelined so that a pass's start does not "
                "wait for the driver",
}
"""What would be done when each limit is reached (see docs/scaling.md)."""


def headroom(f: FamilyConstants, overhead: Line, s: Scenario) -> dict[str, float]:
    """How far the scenario is from each limit: the limit's C over the scenario's C (driver,
    tree), its W over the scenario's W (overhead)."""
    return {"driver": driver_limit(f, s) / s.clusters, "tree": tree_limit(f, s) / s.clusters,
            "overhead": overhead_limit(f, overhead, s) / s.workers}


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"


def _n(value: float) -> str:
    return "never" if not np.isfinite(value) else f"{value:,.0f}"


def prose(families: list[FamilyConstants], overhead: Line, read_per_byte: float, s: Scenario) -> list[str]:
    """The paragraphs of the suite: the scenario, each family's predicted iteration by part, and
    where the driver, the tree and the per-pass overhead become the limit, with what would be done."""
    paragraphs = [
        f"Scenario (assumptions, not measurements): N = {s.rows:.3g} rows of D = {s.features} float"
        f"{8 * s.value_bytes} features ({s.rows * s.features * s.value_bytes / 1e12:.3g} TB), streamed every "
        f"iteration from object storage at beta = {s.store_bandwidth / 1e6:.0f} MB/s per worker; C = {s.clusters:,} "
        f"clusters; W = {s.workers} workers of T = {s.threads} threads (a worker tree of depth "
        f"{tree_depth(s.workers)}); links of bw = {s.network_bandwidth / 1e9:.3g} GB/s with lat = "
        f"{1e3 * s.hop_latency:.3g} ms per message. The constants are those of the table, measured on this "
        f"machine's cores; the prediction takes the lines fitted at D = {s.features} at C = {s.clusters:,}."
    ]
    for f in families:
        p = predict(f, overhead, read_per_byte, s)
        parts = {k: v for k, v in p.items() if k != "total"}
        largest = max(parts, key=parts.get)
        cores = p["compute"] + decode_seconds(read_per_byte, s)
        overlapped = max(cores, transfer_seconds(s)) + p["tree"] + p["driver"] + p["overhead"]
        paragraphs.append(
            f"{f.name}: predicted iteration {_s(p['total'])} = compute {_s(p['compute'])} + read {_s(p['read'])} "
            f"+ tree {_s(p['tree'])} + driver {_s(p['driver'])} + per-pass overhead {_s(p['overhead'])}; the "
            f"largest part is {largest} ({100 * parts[largest] / p['total']:.0f} %). Each thread reads its next "
            f"chunk while it computes, so the transfer overlaps the cores' work and the iteration may take as "
            f"little as {_s(overlapped)} (the larger of the cores' work, {_s(cores)}, and the transfer, "
            f"{_s(transfer_seconds(s))}, instead of their sum). With the rows persisted in the workers' memory "
            f"({worker_bytes(s) / 1e9:.3g} GB each) the read is gone: {_s(p['total'] - p['read'])}."
        )
    for f in families:
        paragraphs.append(
            f"Limits for {f.name}, whose E-step takes {_s(compute_seconds(f, s))} of compute per iteration at "
            f"W = {s.workers} whatever C (its candidates per row do not grow with C): the driver's M-step and neighbourhood update "
            f"grow by {1e6 * f.driver_seconds.slope:.3g} us per cluster and reach it at C = {_n(driver_limit(f, s))}; "
            f"the tree's transfers and merges reach it at C = {_n(tree_limit(f, s))}; the per-pass overhead "
            f"a + b W reaches it at W = {_n(overhead_limit(f, overhead, s))} workers (b is an upper bound, see the "
            f"notes, so the true W is larger)."
        )
    nearest = {f.name: min(headroom(f, overhead, s).items(), key=lambda kv: kv[1]) for f in families}
    listed = "; ".join(f"{name}: the {what} limit, at {factor:.3g} times the scenario's "
                       f"{'W' if what == 'overhead' else 'C'}" for name, (what, factor) in nearest.items())
    todo = " ".join(f"Past the {what} limit: {REMEDIES[what]}." for what in dict.fromkeys(w for w, _ in nearest.values()))
    paragraphs.append(f"The nearest limit: {listed}. {todo}")
    return paragraphs
