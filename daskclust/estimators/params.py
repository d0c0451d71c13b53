"""Parameter validation of the estimators.

Parameters are the keyword arguments of ``__init__``, stored unchanged under
the same names; scikit-learn's ``BaseEstimator`` reads and writes them
(``get_params`` / ``set_params``, ``clone``, ``repr``), and each estimator
declares how every parameter is validated in ``_constraints``, checked when
``fit`` starts.
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidParameterError


@dataclass(frozen=True)
class Interval:
    """A finite number in [low, high] (``None`` = unbounded); ``integer`` requires an int; ``words``
    are strings also accepted (``n_init="auto"``).

    NaN and infinities are refused: no parameter means anything at them (``tol=nan``
    never converges, ``reg_covar=inf`` gives an infinite variance).
    """

    low: float | None
    high: float | None
    integer: bool = False
    allow_none: bool = False
    open_low: bool = False
    allow_bool: bool = False
    words: tuple[str, ...] = ()

    def check(self, name: str, value: Any) -> None:
        if (value is None and self.allow_none) or (isinstance(value, bool) and self.allow_bool) \
                or (isinstance(value, str) and value in self.words):
            return
        kind = numbers.Integral if self.integer else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):
            what = "an integer" if self.integer else "a number"
            words = "".join(f" or {word!r}" for word in self.words)
            raise InvalidParameterError(f"{name} must be {what}{words}, got {value!r}")
        if not isinstance(value, numbers.Integral) and not math.isfinite(value):  # an int may not fit a float
            raise InvalidParameterError(f"{name} must be a finite number, got {value!r}")
        if self.low is not None and (value < self.low or (self.open_low and value == self.low)):
            raise InvalidParameterError(f"{name} must be {'>' if self.open_low else '>='} {self.low}, got {value!r}")
        if self.high is not None and value > self.high:
            raise InvalidParameterError(f"{name} must be <= {self.high}, got {value!r}")


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values."""

    values: tuple

    def check(self, name: str, value: Any) -> None:
        try:  # an array compares element by element: never one of the values
            ok = not isinstance(value, np.ndarray) and bool(value in self.values)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            valid = ", ".join(repr(v) for v in self.values)
            raise InvalidParameterError(f"{name}={value!r} is not supported; valid: {valid}")


class PathOrNone:
    """None, or where a store goes: a str (local path or fsspec URL) or an ``os.PathLike``."""

    def check(self, name: str, value: Any) -> None:
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise InvalidParameterError(f"{name} must be a path or URL (str or os.PathLike) or None, got "
                                        f"{type(value).__name__} {value!r}")


class AnyValue:
    """No constraint here (checked where it is used, e.g. ``init``)."""

    def check(self, name: str, value: Any) -> None:
        return None


class RandomStateLike:
    """scikit-learn's ``random_state``: None, an integer seed in [0, 2**63 - 1], or a numpy
    ``RandomState`` / ``Generator`` (from which each fit draws its seed)."""

    HIGH = 2**63 - 1

    def check(self, name: str, value: Any) -> None:
        if value is None or isinstance(value, (np.random.RandomState, np.random.Generator)):
            return
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= self.HIGH:
            raise InvalidParameterError(f"{name} must be None, an integer in [0, 2**63 - 1], a numpy RandomState "
                                        f"or Generator, got {value!r}")


class ParamsMixin:
    """Validation (``_constraints``) and storage of the ``__init__`` parameters; put before
    scikit-learn's ``BaseEstimator``, which provides ``get_params``, ``set_params`` and ``repr``."""

    _constraints: dict[str, Any] = {}

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD]

    def _store_params(self, values: dict[str, Any]) -> None:
        """Store every ``__init__`` argument unchanged under its own name (call with ``locals()``)."""
        for name in self._param_names():
            setattr(self, name, values[name])

    def set_params(self, **params):
        """Set parameters (scikit-learn's ``set_params``); an unknown name is an
        :class:`InvalidParameterError`."""
        valid = self._param_names()
        for name in params:
            if name not in valid:
                raise InvalidParameterError(
                    f"invalid parameter {name!r} for {type(self).__name__}; valid: {', '.join(valid)}"
                )
        return super().set_params(**params)

    def _validate_params(self) -> None:
        """Check every parameter against ``_constraints`` (:class:`InvalidParameterError`)."""
        for name, value in self.get_params(deep=False).items():
            self._constraints.get(name, AnyValue()).check(name, value)
