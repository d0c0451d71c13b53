"""Kinds of option values, read from command-line text (as argparse ``type``) or from a TOML file."""

from __future__ import annotations

import argparse

from ..errors import InvalidParameterError


class ValueKind:
    """How one option's value is read: :meth:`from_text` for a flag (raising ValueError), :meth:`from_toml`
    for a value of a ``--config`` file, which must be one of ``types``; ``what`` names the kind in errors.
    The base kind is a string (a path, a URL, a name)."""

    what = "a string"
    metavar = "TEXT"
    types: tuple[type, ...] = (str,)

    def from_text(self, text: str):
        """The value of a flag's text."""
        return text

    def from_toml(self, value):
        """A TOML value of this kind, as the Python parameter takes it (TypeError or ValueError if not one)."""
        if not isinstance(value, self.types) or (isinstance(value, bool) and bool not in self.types):
            raise TypeError(value)
        return self.normalise(value)

    def normalise(self, value):
        """A value of one of ``types`` as the Python parameter takes it."""
        return value

    def __call__(self, text: str):
        """argparse's ``type``: a bad text is a usage error naming what was expected."""
        try:
            return self.from_text(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.what}, got {text!r}") from None

    def checked(self, value, where: str):
        """``value`` from a TOML file, or :class:`InvalidParameterError` naming ``where`` and the kind."""
        try:
            return self.from_toml(value)
        except (TypeError, ValueError):
            raise InvalidParameterError(f"{where} must be {self.what}, got {value!r}") from None


class Text(ValueKind):
    """A string, shown in help as ``metavar``."""

    def __init__(self, metavar: str = "TEXT"):
        self.metavar = metavar


class Integer(ValueKind):
    """An integer (a TOML float or bool is refused)."""

    what, metavar, types = "an integer", "INT", (int,)
    from_text = staticmethod(int)


class Number(ValueKind):
    """A real number, as a float (an integer is accepted)."""

    what, metavar, types = "a number", "X", (int, float)
    from_text = normalise = staticmethod(float)


class IntegerOrFraction(ValueKind):
    """An integer, or a fraction written with a decimal point (``n_kept``: Q, or a share of the features)."""

    what, metavar, types = "an integer or a fraction", "Q", (int, float)

    def from_text(self, text: str):
        """An int when the text is one, else a float."""
        try:
            return int(text)
        except ValueError:
            return float(text)


class IntegerOrAuto(ValueKind):
    """An integer, or ``auto`` (KMeans' ``n_init``: the number of runs its ``init`` needs)."""

    what, metavar, types = "an integer or auto", "INT|auto", (int, str)

    def from_text(self, text: str):
        """``"auto"``, else an int."""
        return "auto" if text == "auto" else int(text)

    def normalise(self, value):
        """The value, if an int or ``"auto"`` (else ValueError)."""
        if isinstance(value, str) and value != "auto":
            raise ValueError(value)
        return value


class Boolean(ValueKind):
    """true or false."""

    what, metavar, types = "true or false", "{true,false}", (bool,)

    def from_text(self, text: str):
        """``true`` or ``false``, in any case."""
        if text.lower() not in ("true", "false"):
            raise ValueError(text)
        return text.lower() == "true"


class Choice(ValueKind):
    """One of a fixed set of strings."""

    def __init__(self, values: tuple[str, ...]):
        self.values = tuple(values)
        self.what = "one of " + ", ".join(self.values)
        self.metavar = "{" + ",".join(self.values) + "}"

    def from_text(self, text: str):
        """The text, if one of the choices."""
        return self.normalise(text)

    def normalise(self, value):
        """The value, if one of the choices (else ValueError)."""
        if value not in self.values:
            raise ValueError(value)
        return value


class OrNone(ValueKind):
    """A value of ``inner``, or ``none`` (the Python parameter's None; TOML has no null: the string "none")."""

    def __init__(self, inner: ValueKind):
        self.inner = inner
        self.what = f"{inner.what} or none"
        self.metavar = f"{inner.metavar}|none"

    def from_text(self, text: str):
        """None for ``none``, else the inner kind's value."""
        return None if text.lower() == "none" else self.inner.from_text(text)

    def from_toml(self, value):
        """None for the string ``"none"``, else the inner kind's value."""
        return None if value == "none" else self.inner.from_toml(value)
