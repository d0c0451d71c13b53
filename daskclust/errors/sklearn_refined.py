"""The errors that refine scikit-learn's classes of the same names, so that scikit-learn's own
checks (``check_is_fitted``, the estimator checks) and warning filters apply to daskclust's.
Imported when first asked for through :mod:`daskclust.errors` (importing scikit-learn costs
1.6 s of CPU); their names there are ``daskclust.errors.NotFittedError`` and
``daskclust.errors.ConvergenceWarning``."""

from __future__ import annotations

from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from sklearn.exceptions import NotFittedError as SklearnNotFittedError

from . import DaskclustError


class NotFittedError(DaskclustError, SklearnNotFittedError):
    """A fitted attribute was requested from an estimator that was not fitted (also
    scikit-learn's ``NotFittedError``, itself a ``ValueError`` and ``AttributeError``)."""


class ConvergenceWarning(SklearnConvergenceWarning):
    """The fit ended with a degenerate model (e.g. fewer distinct points than clusters), or a mixture
    stopped at ``max_iter`` before it converged; scikit-learn's ``ConvergenceWarning`` (a
    ``UserWarning``), so that filters on scikit-learn's class apply."""


NotFittedError.__module__ = ConvergenceWarning.__module__ = "daskclust.errors"  # their public home (pickle, repr)
