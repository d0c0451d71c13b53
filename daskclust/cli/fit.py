"""``daskclust fit``: any estimator on a zarr store, every parameter a flag or a key of a TOML ``--config``.

Settings come from the config file, then the flags, which override it. Weights (``--sample-weight``)
and held-out rows (``--validation``, greedy-gmm) are an array of DATA's zarr group or a store of their
own. For sketched-gmm, DATA is raw rows, sketched in one pass before the fit (in memory, or into
``--sketch-output``), or a daskclust sketch store, whose Q, Q_S and preconditioning the model takes.
"""

from __future__ import annotations

import argparse
import logging

from ..data.sources import open_beside
from ..errors import CheckpointError, InvalidParameterError
from .arguments import add_cluster_arguments, add_data_arguments, add_output_arguments
from .config import option_kinds, read_config
from .docstrings import plain_text
from .fit_options import ALGORITHMS, COUNT, COUNT_OPTIONAL, check_value, estimator_options, estimator_params
from .values import Choice, Integer

RESUMABLE = ("max_iter", "memory_budget", "state_store", "tree_store")
"""Estimator parameters a resumed fit may change; the others are the checkpoint's."""

SKETCH_PARAMS = ("n_kept", "n_shared", "precondition")
"""The parameters a sketch store fixes."""

DESCRIPTION = plain_text(__doc__.split("\n\n", 1)[1])


def add_fit_parser(sub, help: str) -> None:
    """Register ``daskclust fit`` (``help``: its line in ``daskclust --help``)."""
    parser = sub.add_parser("fit", help=help, description=DESCRIPTION, argument_default=argparse.SUPPRESS)
    add_fit_arguments(parser)


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``daskclust fit`` (with ``argument_default=SUPPRESS``: only those given are set)."""
    add_data_arguments(parser, optional=True, also=", or a daskclust sketch store (sketched-gmm); with --resume, "
                       "default: the checkpoint's data")
    parser.add_argument("--config", metavar="FILE.toml", help="settings in a TOML file: keys are the Python "
                        "parameter names and these options' names with _ (n_clusters = 1024, algorithm = \"gmm\", "
                        "data = \"d.zarr\", ...); paths relative to the current directory; flags override it")
    algorithm = Choice(tuple(ALGORITHMS))
    parser.add_argument("--algorithm", type=algorithm, metavar=algorithm.metavar,
                        help="the estimator: " + ", ".join(f"{name} ({cls.__name__})" for name, cls in
                                                           ALGORITHMS.items()) + ". Default: kmeans.")
    parser.add_argument("--sample-weight", metavar="ARRAY_OR_URL", help="a weight per row: an array of DATA's zarr "
                        "group, else a zarr store path or fsspec URL; read in DATA's row chunks")
    parser.add_argument("--validation", metavar="ARRAY_OR_URL", help="[greedy-gmm] held-out rows (an array of "
                        "DATA's group or a zarr store, read into memory): their log-likelihood, not BIC, chooses "
                        "the number of components")
    parser.add_argument("--sketch-output", metavar="PATH", help="[sketched-gmm] write the sketch of DATA to this "
                        "zarr store (a later fit takes it as DATA); default: the sketch stays in memory")
    parser.add_argument("--stream", type=Integer(), metavar="EPOCHS", help="[kmeans, gmm] learn from a stream of "
                        "DATA's row chunks instead (partial_fit: one stepwise-EM step per chunk, one chunk in memory "
                        "at a time, in this process), EPOCHS passes over them; chunks of --chunk-rows rows, default "
                        "DATA's zarr chunks")
    parser.add_argument("--checkpoint", metavar="PATH", help="directory for checkpoints of the running fit")
    parser.add_argument("--checkpoint-every", type=Integer(), metavar="N",
                        help="iterations between checkpoints. Default: 10.")
    parser.add_argument("--resume", metavar="PATH", help="continue from this checkpoint (or directory of "
                        "checkpoints) with its estimator, parameters and data; only "
                        + ", ".join(estimator_options()[name].flags[0] for name in RESUMABLE) + " may change")
    add_output_arguments(parser, "model", required=False, also=", and an earlier fit's --checkpoint and "
                         "--sketch-output")
    add_cluster_arguments(parser)
    group = parser.add_argument_group("estimator parameters", "The estimators' Python parameters; [...] lists the "
                                      "algorithms a parameter applies to, 'none' is Python's None.")
    for option in estimator_options().values():
        group.add_argument(*option.flags, dest=option.name, type=option.kind, metavar=option.kind.metavar,
                           help=option.help)


def fit_settings(args: argparse.Namespace) -> tuple[dict, dict[str, str]]:
    """The settings of a fit: ``--config``'s, overridden by the flags given, and where each came from
    (a flag, or ``FILE: key``)."""
    probe = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    add_fit_arguments(probe)
    flags = {action.dest: "/".join(action.option_strings) if action.option_strings else action.metavar
             for action in probe._actions}
    given = {name: value for name, value in vars(args).items() if name in flags and name != "config"}
    from_file = read_config(args.config, option_kinds(probe)) if "config" in args else {}
    if {COUNT, "n_components"} & set(given):  # a flag's number of clusters overrides the file's, by either name
        from_file = {name: value for name, value in from_file.items() if name not in (COUNT, "n_components")}
    origins = {**{name: f"{args.config}: {name}" for name in from_file}, **{name: flags[name] for name in given}}
    return {**from_file, **given}, origins


def run_fit(args: argparse.Namespace) -> int:
    """Fit the estimator the settings describe, or resume a checkpoint's fit, and save the model."""
    from ..engine.cluster import security_from_files
    from ..io import Location, input_stores
    from ..persistence.model import check_model_target
    from ..transforms import Transformed

    values, origins = fit_settings(args)
    run = {name: values.pop(name) for name in list(values) if name not in estimator_options()}
    quiet = run.pop("quiet", False)
    if quiet and getattr(args, "log_level", None) is None:  # quiet = true in --config: as the flag does
        logging.getLogger("daskclust").setLevel("ERROR")
    algorithm = run.pop("algorithm", None)
    if "output" not in run:
        raise InvalidParameterError("fit needs --output (or output in --config): where to save the model")
    if "checkpoint_every" in run and "checkpoint" not in run:
        raise InvalidParameterError(f"{origins['checkpoint_every']} sets how often --checkpoint writes: it needs "
                                    "--checkpoint")
    runtime = dict(verbose=0 if quiet else 1, scheduler_address=run.get("scheduler"),
                   security=security_from_files(run.get("tls_ca_file"), run.get("tls_cert"), run.get("tls_key")))
    if "resume" in run:
        model, X, weights = resumed_fit(run, algorithm, values, origins, runtime)
    else:
        model, X, weights = new_fit(run, algorithm or "kmeans", values, origins, runtime)
    extra, extra_inputs = fit_extras(model, run, origins, X)
    paths = [run.get(name) for name in ("data", "checkpoint", "resume", "sketch_output")]
    paths += [getattr(model, name, None) for name in ("state_store", "tree_store")]
    stored = [Location.parse(s["url"]) for s in X.sources if s] if isinstance(X, Transformed) else input_stores(X)
    inputs = [Location.parse(p) for p in paths if p] + [*stored, *input_stores(weights), *extra_inputs]
    overwrite = run.get("overwrite", False)
    check_model_target(run["output"], overwrite=overwrite, inputs=inputs, option="--overwrite")
    if "stream" in run:
        stream_fit(model, X, weights, run, origins, quiet)
    else:
        model.fit(X, sample_weight=weights, checkpoint=run.get("checkpoint"),
                  checkpoint_every=run.get("checkpoint_every", 10), resume=run.get("resume"), overwrite=overwrite,
                  **extra)
    model.save(run["output"], overwrite=overwrite)
    if not quiet:
        print(f"saved {type(model).__name__} with {model.centres_.shape[0]} clusters to {run['output']}")
    return 0


def stream_fit(model, X, weights, run: dict, origins: dict, quiet: bool) -> None:
    """``--stream EPOCHS``: ``partial_fit`` on each row chunk of DATA in turn (``--chunk-rows`` rows, else the
    zarr array's row chunks), EPOCHS times; after each epoch the mean over its steps of the free energy
    of each chunk under the model before its step (held-out figures) is shown."""
    import numpy as np

    from ..transforms import Transformed

    given = [name for name in ("checkpoint", "resume", "sketch_output", "validation") if name in run]
    if given or not hasattr(model, "partial_fit") or isinstance(X, Transformed):
        what = origins[given[0]] if given else f"{type(model).__name__}" + (" on a sketch" if isinstance(
            X, Transformed) else "")
        raise InvalidParameterError(f"{origins['stream']} learns from a stream of chunks with partial_fit, which "
                                    f"{what} does not go with (kmeans and gmm on rows, without checkpoints)")
    if run["stream"] < 1:
        raise InvalidParameterError(f"{origins['stream']} needs at least 1 epoch")
    rows = model.chunk_rows or X.chunks[0]
    for epoch in range(run["stream"]):
        start_step = getattr(model, "n_steps_", 0)
        for start in range(0, X.shape[0], rows):
            chunk_weights = None if weights is None else weights[start:start + rows]
            model.partial_fit(X[start:start + rows], sample_weight=chunk_weights)
        if not quiet:
            energies = [row["free_energy"] for row in model.history_[start_step - model.n_steps_:]]
            print(f"epoch {epoch + 1}: {model.n_steps_ - start_step} steps, mean free energy of the chunks "
                  f"before their step {np.mean(energies):.6g}")


def new_fit(run: dict, algorithm: str, values: dict, origins: dict, runtime: dict):
    """The estimator, data and weights of a fit from its settings, checked before any work."""
    from ..transforms import SketchedData

    if "data" not in run:
        raise InvalidParameterError("fit needs DATA (or data in --config), or --resume CHECKPOINT")
    params = estimator_params(algorithm, values, origins)
    if not {COUNT, "n_components"} & set(params) and algorithm not in COUNT_OPTIONAL:
        raise InvalidParameterError("fit needs the number of clusters: --clusters C (n_clusters in --config)")
    X = open_data(run["data"], run.get("array"))
    if isinstance(X, SketchedData):
        if algorithm != "sketched-gmm":
            raise InvalidParameterError(f"{run['data']} is a daskclust sketch store: fit it with --algorithm "
                                        "sketched-gmm")
        fixed = [name for name in (*SKETCH_PARAMS, "array", "sample_weight") if name in values or name in run]
        if fixed:
            raise InvalidParameterError(f"{origins[fixed[0]]}: {run['data']} is a sketch store, which holds its "
                                        "rows' weights and how they were sketched")
        t = X.transform
        params.update(n_kept=t.n_kept, n_shared=t.n_shared, precondition=t.precondition)
    weights = open_beside(run["sample_weight"], run["data"], 1) if "sample_weight" in run else None
    return ALGORITHMS[algorithm](**params, **runtime), X, weights


def resumed_fit(run: dict, algorithm: str | None, values: dict, origins: dict, runtime: dict):
    """The estimator, data and weights of the checkpoint ``run["resume"]``, with the few settings a
    resumed fit may change (:data:`RESUMABLE`)."""
    from ..data import open_zarr_array
    from ..estimators.registry import ESTIMATORS
    from ..fit.checkpoints import load as load_checkpoint

    if "array" in run and "data" not in run:
        raise InvalidParameterError(f"{origins['array']} names an array of DATA: without DATA, --resume reads the "
                                    "checkpoint's data and array")
    changed = [name for name in values if name not in RESUMABLE] + (["algorithm"] if algorithm else [])
    if changed:
        allowed = ", ".join(estimator_options()[name].flags[0] for name in RESUMABLE)
        raise InvalidParameterError(f"{origins[changed[0]]}: --resume continues the checkpoint's fit with its "
                                    f"estimator and parameters; only {allowed} may change")
    record = load_checkpoint(run["resume"]).record
    cls = ESTIMATORS.get(record.kind)
    if cls is None:
        raise CheckpointError(f"{run['resume']} is a checkpoint of an unknown estimator {record.kind!r}")
    for name, value in values.items():
        check_value(cls, name, value, origins[name])
    source, recorded = record.source or {}, record.weights
    url, array = (run["data"], run.get("array")) if "data" in run else (source.get("url"), source.get("array"))
    if url is None:
        raise InvalidParameterError("the checkpoint does not record where its data is: pass DATA")
    if "sample_weight" in run:
        weights = open_beside(run["sample_weight"], url, 1)
    else:
        weights = open_zarr_array(recorded["url"], recorded["array"], ndim=1) if recorded else None
    return checkpoint_estimator(cls, record.params, values, runtime, run["resume"]), open_data(url, array), weights


def checkpoint_estimator(cls, stored: dict, values: dict, runtime: dict, where):
    """The estimator of a checkpoint's parameters (with the settings a resume may change and this run's
    runtime settings), each parameter checked as the estimator checks its own: a parameter the class does
    not take, or a value it refuses, means the checkpoint was altered (CheckpointError)."""
    unknown = sorted(set(stored) - set(cls().get_params()))
    if unknown:
        raise CheckpointError(f"{where} records parameters a {cls.__name__} does not take ({', '.join(unknown)}): "
                              "the checkpoint was altered")
    estimator = cls(**{**stored, **values, **runtime})
    try:
        estimator._validate_params()
    except InvalidParameterError as exc:
        raise CheckpointError(f"{where} records invalid parameters ({exc}): the checkpoint was altered") from exc
    return estimator


def fit_extras(model, run: dict, origins: dict, X) -> tuple[dict, list]:
    """The keywords of ``fit`` that only one estimator takes: ``sketch_output`` (sketched-gmm, raw data) and
    ``X_val`` (greedy-gmm), refused for the others; and the stores they read (inputs no output may touch)."""
    import numpy as np

    from ..estimators import GreedyGaussianMixture, SketchedGaussianMixture
    from ..io import Location, check_target, input_stores
    from ..transforms import SketchedData

    extra, extra_inputs = {}, []
    if "sketch_output" in run:
        if not isinstance(model, SketchedGaussianMixture) or isinstance(X, SketchedData):
            raise InvalidParameterError(f"{origins['sketch_output']} is for sketched-gmm on raw data (DATA not a "
                                        "sketch store)")
        check_target(Location.parse(run["sketch_output"]), "sketch", overwrite=run.get("overwrite", False),
                     inputs=input_stores(X), option="--overwrite")  # in the command line's words, before any work
        extra["sketch_output"] = run["sketch_output"]
    if "validation" in run:
        if not isinstance(model, GreedyGaussianMixture):
            raise InvalidParameterError(f"{origins['validation']} is for greedy-gmm: held-out rows choose its "
                                        "number of components")
        held_out = open_beside(run["validation"], run.get("data"), 2)
        extra["X_val"] = np.asarray(held_out)
        extra_inputs += input_stores(held_out)
    return extra, extra_inputs


def open_data(url: str, array: str | None):
    """The training data at ``url``: a :class:`~daskclust.transforms.SketchedData` for a daskclust sketch
    store, else its zarr array (``array`` inside a group)."""
    from ..data import open_zarr_array
    from ..io import Location, store_kind
    from ..transforms import SketchedData

    if store_kind(Location.parse(url)) == "sketch":
        return SketchedData.open(url)
    return open_zarr_array(url, array)
