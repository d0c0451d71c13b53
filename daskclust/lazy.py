"""Public names of a package imported from its modules when first asked for (PEP 562).

A package lists its names with the module each comes from and takes the ``__getattr__`` and
``__dir__`` this module makes: importing the package then imports none of those modules, so a
caller that needs one name (the command line, a Dask worker unpickling an operation) does not pay
for the others' imports (scikit-learn's, Dask arrays', the kernels')."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def imported_on_use(package: str, names: dict[str, str],
                    namespace: dict) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package ``package`` (its ``__name__``) whose name ``n`` is
    imported from its module ``names[n]`` (relative, e.g. ``"estimators"``) when first asked for;
    ``namespace`` is the package's ``globals()``. The module is imported once, so every caller, in
    any thread, gets the same object."""

    def __getattr__(name: str):
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted([*namespace, *names])

    return __getattr__, __dir__
