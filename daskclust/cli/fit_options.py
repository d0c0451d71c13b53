"""The estimator options of ``daskclust fit``, generated from the estimators themselves.

One option per parameter of the estimators' ``__init__``: the flag is the ``--kebab-case`` of the
Python name, the ``--config`` key the name itself, the value kind follows the parameter's declared
constraint (``_constraints``), the help text is the first sentence of its description in the
estimators' docstrings, with its default for each algorithm. A parameter a chosen algorithm does not
have, or accepts without using (:data:`UNUSED`), is an error, never ignored.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cache

from ..errors import InvalidParameterError
from ..estimators import CellGaussianMixture, GaussianMixture, GreedyGaussianMixture, KMeans, SketchedGaussianMixture
from ..estimators.params import AnyValue, Interval, Options, RandomStateLike
from ..seeding import SEEDINGS
from ..transforms import Sketch
from .docstrings import first_sentence, parameter_descriptions
from .values import Boolean, Choice, Integer, IntegerOrAuto, IntegerOrFraction, Number, OrNone, Text, ValueKind

ALGORITHMS = {
    "kmeans": KMeans,
    "gmm": GaussianMixture,
    "sketched-gmm": SketchedGaussianMixture,
    "cell-gmm": CellGaussianMixture,
    "greedy-gmm": GreedyGaussianMixture,
}
"""``--algorithm`` names and their estimators."""

NOT_OPTIONS = ("weights_init", "means_init", "precisions_init",  # arrays: Python only
               "scheduler_address", "security", "verbose", "callback",  # --scheduler, --tls-*, --quiet; Python only
               "algorithm", "copy_x")  # KMeans' scikit-learn compatibility parameters, without effect
"""Parameters without an estimator option."""

UNUSED = {
    "sketched-gmm": ("init",),  # seeded by k-means++ on sketches
    "cell-gmm": ("coreset", "refine_iter"),  # its fit refuses a coreset
    "greedy-gmm": ("init", "coreset", "refine_iter"),  # starts from the data's mean
}
"""Parameters an estimator accepts but does not use (its docstring or its fit says so): refused here."""

KINDS = {
    "init": Choice(("auto", *SEEDINGS)),  # "auto": GaussianMixture's per-family default
    "n_init": IntegerOrAuto(),  # KMeans' "auto"; the mixtures refuse it with a typed error
    "n_kept": IntegerOrFraction(),
    "state_store": Text("PATH"),
    "tree_store": Text("PATH"),
}
"""Value kinds of the parameters whose constraint (``AnyValue``) does not say it."""

ALIASES = {"n_clusters": ("--clusters",), "random_state": ("--seed",)}
"""Older spellings of some flags, still accepted."""

COMMAND_LINE_DEFAULTS = {"random_state": 0}
"""Defaults of the command line that differ from the estimators' (a fit repeats unless told otherwise)."""

COUNT = "n_clusters"
"""The number of clusters C for every algorithm: ``n_clusters`` of KMeans, ``n_components`` of the mixtures."""

COUNT_OPTIONAL = ("greedy-gmm",)
"""The algorithms whose number of clusters a fit may leave to its default (greedy learning's most
components); the others require it."""

DESCRIPTIONS = {
    COUNT: "Number of clusters C: n_clusters of KMeans, n_components of the mixtures.",
    "random_state": "Seed of every random stream: an integer makes the fit repeatable, none draws fresh entropy.",
}
"""Descriptions the command line gives instead of the docstrings' (which speak of Python objects)."""


@dataclass(frozen=True)
class EstimatorOption:
    """One estimator parameter as a ``daskclust fit`` option.

    Attributes
    ----------
    name : str
        The Python parameter, the ``--config`` key and the argparse destination.
    kind : ValueKind
        How its value is read.
    algorithms : tuple of str
        The ``--algorithm`` names it applies to.
    help : str
        Its description, default(s) and algorithms.
    """

    name: str
    kind: ValueKind
    algorithms: tuple[str, ...]
    help: str

    @property
    def flags(self) -> tuple[str, ...]:
        """``--kebab-case`` of the name, then its aliases."""
        return ("--" + self.name.replace("_", "-"), *ALIASES.get(self.name, ()))


@cache
def estimator_options() -> dict[str, EstimatorOption]:
    """Every estimator option by parameter name, in the order of the estimators' signatures."""
    names = [name for cls in ALGORITHMS.values() for name in cls._param_names() if name not in NOT_OPTIONS]
    options = {}
    for name in dict.fromkeys(names):
        algorithms = tuple(algorithm for algorithm, cls in ALGORITHMS.items()
                           if (name in cls._param_names() or name == COUNT) and name not in UNUSED.get(algorithm, ()))
        options[name] = EstimatorOption(name, _kind(name), algorithms, _help(name, algorithms))
    return options


def _kind(name: str) -> ValueKind:
    """The value kind of parameter ``name`` from its declared constraint (the union of the estimators' choices)."""
    if name in KINDS:
        return KINDS[name]
    constraints = [cls._constraints[name] for cls in ALGORITHMS.values() if name in cls._constraints]
    first = constraints[0] if constraints else AnyValue()
    if isinstance(first, Interval):
        kind = Integer() if first.integer else Number()
        return OrNone(kind) if first.allow_none else kind
    if isinstance(first, RandomStateLike):
        return OrNone(Integer())
    if isinstance(first, Options):
        values = tuple(dict.fromkeys(value for constraint in constraints for value in constraint.values))
        if set(values) <= {None, True, False}:
            return OrNone(Boolean()) if None in values else Boolean()
        return Choice(values)
    raise TypeError(f"parameter {name!r} has no command-line value kind: declare one in KINDS")


def _help(name: str, algorithms: tuple[str, ...]) -> str:
    """The first sentence of the parameter's own description, its defaults and, when not all, its algorithms."""
    described = [parameter_descriptions(cls).get(name, "") for cls in (*ALGORITHMS.values(), Sketch)]
    own = DESCRIPTIONS.get(name) or next((text for text in described if text and not text.startswith("As in")), "")
    parts = [first_sentence(own), _defaults(name, algorithms)]
    if algorithms != tuple(ALGORITHMS):
        parts.insert(0, f"[{', '.join(algorithms)}]")
    return " ".join(part for part in parts if part).replace("%", "%%")


def _default(cls, name: str) -> str:
    """The default of ``cls``'s parameter ``name``, as the command line writes it."""
    default = inspect.signature(cls.__init__).parameters[name].default
    return "none" if default is None else str(default)


def _defaults(name: str, algorithms: tuple[str, ...]) -> str:
    """"Default: X", or "Default: X (kmeans); Y (gmm, ...)" where the estimators differ."""
    if name in COMMAND_LINE_DEFAULTS:
        return f"Default: {COMMAND_LINE_DEFAULTS[name]}."
    if name == COUNT:
        optional = [f"{algorithm}: default {_default(ALGORITHMS[algorithm], 'n_components')}"
                    for algorithm in algorithms if algorithm in COUNT_OPTIONAL]
        return f"Required ({'; '.join(optional)})." if optional else "Required."
    by_value: dict[str, list[str]] = {}
    for algorithm in algorithms:
        by_value.setdefault(_default(ALGORITHMS[algorithm], name), []).append(algorithm)
    if len(by_value) == 1:
        return f"Default: {next(iter(by_value))}."
    return "Default: " + "; ".join(f"{value} ({', '.join(names)})" for value, names in by_value.items()) + "."


def estimator_params(algorithm: str, values: dict, origins: dict[str, str]) -> dict:
    """The keyword arguments of ``ALGORITHMS[algorithm]`` from option values, checked before any work.

    ``values`` maps parameter names to values read from flags or a config file, ``origins`` each
    name to where it was given (a flag, or ``FILE: key``), which errors name. A parameter the
    algorithm does not have or does not use, a value outside the parameter's constraint, both
    ``n_clusters`` and ``n_components``, or ``refine_iter`` without ``coreset`` is an
    :class:`InvalidParameterError`. ``n_clusters`` becomes ``n_components`` for the mixtures;
    :data:`COMMAND_LINE_DEFAULTS` fill what is not given.
    """
    options = estimator_options()
    cls = ALGORITHMS[algorithm]
    for name in values:
        if algorithm not in options[name].algorithms:
            reason = "does not use" if name in cls._param_names() else "has no"
            raise InvalidParameterError(f"{origins[name]}: {algorithm} ({cls.__name__}) {reason} parameter {name!r}; "
                                        f"it applies to {', '.join(options[name].algorithms)}")
    params = {**COMMAND_LINE_DEFAULTS, **values}
    if COUNT in params and cls is not KMeans:
        if "n_components" in params:
            raise InvalidParameterError(f"{origins[COUNT]} and {origins['n_components']} both give the number of "
                                        "components: give one")
        params["n_components"] = params.pop(COUNT)
    if "refine_iter" in params and params.get("coreset") is None:
        raise InvalidParameterError(f"{origins['refine_iter']} refines a coreset's model: it needs --coreset")
    for name, value in params.items():
        check_value(cls, name, value, origins.get(name, f"the default {name}"))
    return params


def check_value(cls, name: str, value, origin: str) -> None:
    """Check ``value`` against the constraint ``cls`` declares for ``name`` (an error naming ``origin``)."""
    try:
        cls._constraints.get(name, AnyValue()).check(name, value)
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{origin}: {exc}") from None
