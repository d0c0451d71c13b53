"""The input range rules, one wording for every fit, transform and application of a model.

Rows must be finite, and max |x| must lie inside :func:`~daskclust.kernels.validation.scale_bounds`:
above it squared distances between rows overflow (checked chunk by chunk), below it every one of
them underflows (checked on the whole data, since tiny values beside large ones are fine). Sample
weights are 0 or in [``WEIGHT_MIN``, ``WEIGHT_MAX``].
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidDataError
from ..kernels.validation import (
    WEIGHT_MAX,
    WEIGHT_MIN,
    extremes,
    first_invalid_weight,
    first_nonfinite_row,
    scale_bounds,
)


def rows_problem(X: np.ndarray, start: int, purpose: str, chunk: int | None = None) -> str | None:
    """Why the rows ``X`` (row ``start`` onwards of the input, chunk ``chunk`` of a fit's data if
    given) cannot be used to ``purpose`` ("cluster" for a fit, "score" for a model applied to
    them), or None."""
    return checked_rows(X, start, purpose, chunk)[0]


def checked_rows(X: np.ndarray, start: int, purpose: str, chunk: int | None = None) -> tuple[str | None, float]:
    """(:func:`rows_problem`, max |x| over ``X``): the check and the largest magnitude it measured
    (NaN when the rows hold NaN or inf), so that a pass needing it does not measure it again."""
    lo, hi = extremes(X)
    if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or inf somewhere: find its row
        bad = first_nonfinite_row(X)
        at = f" (chunk {chunk}, row {bad} of the chunk)" if chunk is not None else ""
        return (f"X contains NaN or inf in row {start + bad}{at}; remove or impute such rows before you "
                f"{purpose} them"), math.nan
    largest = abs(max(hi, -lo))
    if largest > scale_bounds(X.dtype, X.shape[1])[1]:
        at = f" (chunk {chunk})" if chunk is not None else ""
        return (f"X is too large to {purpose}: max |x| = {largest:.3g} in rows {start}..{at}, so squared distances "
                f"between rows of {X.shape[1]} features overflow {X.dtype}; rescale the data (e.g. divide it by "
                "its standard deviation, as for the model's training data)"), largest
    return None, largest


def weights_problem(w: np.ndarray, start: int, chunk: int | None = None) -> str | None:
    """Why the sample weights ``w`` (row ``start`` onwards) are not valid weights, or None."""
    bad = first_invalid_weight(w)
    if bad < 0:
        return None
    at = f" (chunk {chunk})" if chunk is not None else ""
    return (f"sample_weight[{start + bad}] = {float(w[bad])!r}{at} is not a valid weight: weights must be 0 or in "
            f"[{WEIGHT_MIN:.3g}, {WEIGHT_MAX:.3g}] (finite, not subnormal, and small enough that their sums cannot "
            "overflow); only their ratios matter, so rescale them")


def check_not_too_small(largest: float, dtype, n_features: int) -> None:
    """Refuse data whose max |x| (over all rows) lies below :func:`scale_bounds`' lower bound: every
    squared distance between its rows underflows. All zero is valid (one distinct point)."""
    if 0 < largest < scale_bounds(dtype, n_features)[0]:
        raise InvalidDataError(
            f"X is too small to cluster: max |x| = {largest:.3g}, so every squared distance between rows of "
            f"{n_features} features underflows {np.dtype(dtype)}; rescale the data (e.g. divide it by max |x|)"
        )
