"""scikit-learn's parameter conventions without depending on scikit-learn.

Parameters are the keyword arguments of ``__init__``, stored unchanged under
the same names; ``get_params`` / ``set_params`` read and write them, and each
estimator declares how every parameter is validated in ``_constraints``.
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParameterError


@dataclass(frozen=True)
class Interval:
    """A finite number in [low, high] (``None`` = unbounded); ``integer`` requires an int.

    NaN and infinities are refused: no parameter means anything at them (``tol=nan``
    never converges, ``reg_covar=inf`` gives an infinite variance).
    """

    low: float | None
    high: float | None
    integer: bool = False
    allow_none: bool = False
    open_low: bool = False

    def check(self, name: str, value: Any) -> None:
        if value is None and self.allow_none:
            return
        kind = numbers.Integral if self.integer else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):
            raise InvalidParameterError(f"{name} must be {'an integer' if self.integer else 'a number'}, got {value!r}")
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
        if value not in self.values:
            valid = ", ".join(repr(v) for v in self.values)
            raise InvalidParameterError(f"{name}={value!r} is not supported; valid: {valid}")


class AnyValue:
    """No constraint here (checked where it is used, e.g. ``init``)."""

    def check(self, name: str, value: Any) -> None:
        return None


class ParamsMixin:
    """``get_params`` / ``set_params`` / ``__repr__`` from the ``__init__`` signature."""

    _constraints: dict[str, Any] = {}

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD]

    def _store_params(self, values: dict[str, Any]) -> None:
        """Store every ``__init__`` argument unchanged under its own name (call with ``locals()``)."""
        for name in self._param_names():
            setattr(self, name, values[name])

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params) -> ParamsMixin:
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise InvalidParameterError(
                    f"invalid parameter {name!r} for {type(self).__name__}; valid: {', '.join(valid)}"
                )
            setattr(self, name, value)
        return self

    def _validate_params(self) -> None:
        for name, value in self.get_params().items():
            self._constraints.get(name, AnyValue()).check(name, value)

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = []
        for name, value in self.get_params().items():
            default = defaults.get(name)
            same = value is default or (type(value) is type(default) and _equal(value, default))
            if not same:
                changed.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and other non-scalar values: treat as changed
        return False
