"""The versions of Python and of the packages daskclust runs on, as a model store records them."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

__version__ = "0.1.0"
"""daskclust's version (also ``pyproject.toml``'s): what every store it writes records. Declared
here, the bottom of the house, so that writers need not import the package root."""

MODEL_PACKAGES = ("daskclust", "dask", "distributed", "numpy", "numba", "zarr", "xarray", "scikit-learn")
"""The distributions whose versions a saved model records (``daskclust info`` prints them)."""


def package_versions(names=MODEL_PACKAGES) -> dict[str, str]:
    """The installed version of each distribution in ``names``, ``"not installed"`` for a missing one;
    daskclust's own is :data:`__version__` (an editable install's metadata may be older)."""
    found = {}
    for name in names:
        if name == "daskclust":
            found[name] = __version__
            continue
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def environment_versions() -> dict[str, str]:
    """Python's version and :func:`package_versions` of :data:`MODEL_PACKAGES`: what a saved model records."""
    return {"python": platform.python_version(), **package_versions()}
