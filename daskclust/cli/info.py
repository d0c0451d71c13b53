"""``daskclust info MODEL``: a saved model's parameters, training data, history, sizes and the versions
that wrote it; what a store written before these were recorded lacks is "not recorded"."""

from __future__ import annotations

import argparse
import json

from ..versions import MODEL_PACKAGES

NOT_RECORDED = "not recorded"
LONG_LIST = 8
"""Lists longer than this are shortened in the text output (chunk bounds); ``--json`` gives them whole."""


def add_info_parser(sub) -> None:
    """Register ``daskclust info``."""
    info = sub.add_parser("info", help="describe a saved model")
    info.add_argument("model", metavar="MODEL", help="a daskclust model store: path or fsspec URL")
    info.add_argument("--json", action="store_true", help="machine-readable output")


def run_info(args: argparse.Namespace) -> int:
    """Print the description of the model at ``args.model``."""
    from ..estimators.registry import from_stored
    from ..persistence.model import load_model

    stored = load_model(args.model)
    summary = describe(stored, from_stored(stored, repr(args.model)))
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print("\n".join(text_lines(summary)))
    return 0


def describe(stored, model) -> dict:
    """What ``daskclust info`` reports of a :class:`~daskclust.persistence.model.StoredModel` and its fitted estimator."""
    last = model.history_[-1] if model.history_ else {}
    versions = stored.versions or {}
    return {
        "kind": stored.kind,
        "n_clusters": int(model.centres_.shape[0]),
        "n_features": int(model.n_features_in_),
        "n_iter": int(model.n_iter_),
        "converged": bool(model.converged_),
        "free_energy": last.get("free_energy"),
        "quantization_error": last.get("quantization_error"),
        "sigma2": float(model.sigma2_),
        "fit_time_s": float(model.fit_time_),
        "seeding_time_s": float(model.seeding_time_),
        "coreset": model.coreset_,  # size, seconds, n_distances, total_weight of a coreset fit's construction
        "params": stored.params,
        "training_data": stored.data if stored.data is not None else NOT_RECORDED,
        "history": history_summary(model.history_),
        "sizes": sizes(stored),
        "versions": {name: versions.get(name, NOT_RECORDED) for name in ("python", *MODEL_PACKAGES, *versions)},
    }


def history_summary(history: list[dict]) -> dict:
    """Totals of a fit's history and, per phase (the rows of one ``data``: a coreset fit's ``"coreset"``
    then ``"full"``), its iterations, first and last free energy and quantization error, distances and time."""
    phases: list[list[dict]] = []
    for row in history:
        if not phases or phases[-1][0].get("data", "full") != row.get("data", "full"):
            phases.append([])
        phases[-1].append(row)
    return {
        "iterations": len(history),
        "n_distances": _total(history, "n_distances"),
        "seconds": _total(history, "seconds"),
        "phases": [{
            "data": rows[0].get("data", "full"),
            "iterations": len(rows),
            **{f"{end}_{key}": row.get(key) for key in ("free_energy", "quantization_error")
               for end, row in (("first", rows[0]), ("last", rows[-1]))},
            "n_distances": _total(rows, "n_distances"),
            "seconds": _total(rows, "seconds"),
        } for rows in phases],
    }


def _total(rows: list[dict], key: str):
    """The sum of column ``key`` over ``rows``, or None when the history lacks the column."""
    return sum(row[key] for row in rows) if rows and all(key in row for row in rows) else None


def sizes(stored) -> dict:
    """Shape, dtype and bytes of each stored array, their total, and the history's length."""
    arrays = {name: {"shape": list(a.shape), "dtype": str(a.dtype), "bytes": int(a.nbytes)}
              for name, a in stored.arrays.items()}
    return {"arrays": arrays, "total_bytes": sum(a["bytes"] for a in arrays.values()),
            "history_rows": len(stored.history)}


def text_lines(value, indent: int = 0) -> list[str]:
    """``value`` (nested dicts and lists of a summary) as indented ``key: value`` lines."""
    pad = "  " * indent
    lines = []
    for key, item in value.items():
        if isinstance(item, dict) and item:
            lines.append(f"{pad}{key}:")
            lines += text_lines(item, indent + 1)
        elif isinstance(item, list) and item and all(isinstance(x, dict) for x in item):
            lines.append(f"{pad}{key}:")
            lines += text_lines({i + 1: element for i, element in enumerate(item)}, indent + 1)
        else:
            lines.append(f"{pad}{key}: {_short(item)}")
    return lines


def _short(item) -> str:
    """A value for the text output: floats to 6 digits, long lists shortened, None as none."""
    if isinstance(item, list):
        shown = [_short(x) for x in item]
        if len(shown) > LONG_LIST:
            return f"[{', '.join(shown[:3])}, ..., {shown[-1]}] ({len(shown)} values)"
        return f"[{', '.join(shown)}]"
    if isinstance(item, float):
        return f"{item:.6g}"
    return "none" if item is None else str(item)
