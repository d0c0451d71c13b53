"""``daskclust fit --config FILE.toml``: a command's settings in a TOML file, checked against its options."""

from __future__ import annotations

import argparse
import tomllib

from ..errors import InvalidParameterError
from .values import Boolean, Integer, Text, ValueKind


def option_kinds(parser: argparse.ArgumentParser, exclude=("help", "config")) -> dict[str, ValueKind]:
    """The value kind of each option of ``parser`` by destination: its ``type`` when a
    :class:`ValueKind`, an integer for ``int``, true/false for a switch, else a string."""
    kinds = {}
    for action in parser._actions:
        if action.dest in exclude:
            continue
        if isinstance(action.type, ValueKind):
            kinds[action.dest] = action.type
        elif action.type is int:
            kinds[action.dest] = Integer()
        elif action.nargs == 0 and action.const is True:
            kinds[action.dest] = Boolean()
        else:
            kinds[action.dest] = Text()
    return kinds


def read_config(path: str, kinds: dict[str, ValueKind]) -> dict:
    """The settings in the TOML file ``path``: every key one of ``kinds`` (the Python parameter names
    and the command's other options, ``_`` for ``-``), every value of its kind.

    Raises :class:`InvalidParameterError` for a missing or malformed file, an unknown key (listing the
    valid ones) or a value of the wrong type (naming the key).
    """
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    except FileNotFoundError:
        raise InvalidParameterError(f"no config file at {path!r}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(f"{path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise InvalidParameterError(f"cannot read the config file {path!r}: {exc.strerror or exc}") from None
    unknown = sorted(set(table) - set(kinds))
    if unknown:
        raise InvalidParameterError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                                    f"valid keys: {', '.join(sorted(kinds))}")
    return {key: kinds[key].checked(value, f"{path}: {key}") for key, value in table.items()}
