"""Parameter descriptions read from numpy-style docstrings, for command-line help."""

from __future__ import annotations

import inspect
import re

_SECTION = re.compile(r"^Parameters\n-+\n(.*?)(?:\n\S[^\n]*\n-+\n|\Z)", re.S | re.M)
_ROLE = re.compile(r":[\w:]+:`~?([^`]+)`")  # :class:`daskclust.KMeans` -> daskclust.KMeans
_SENTENCE = re.compile(r"(.+?(?<!\bSec)(?<!\bEq)(?<!\bEqs)(?<!\bProp)(?<!\be\.g)(?<!\bi\.e)\.)(?=\s+[A-Z(\"]|\s*$)",
                       re.S)  # not after an abbreviation


def parameter_descriptions(obj) -> dict[str, str]:
    """Each parameter of ``obj``'s docstring "Parameters" section with its description, as plain text.

    An entry names one parameter or several (``init, n_init : ...``; a name list may wrap onto the
    next line after a comma); a parameter documented without a description is left out.
    """
    match = _SECTION.search(inspect.getdoc(obj) or "")
    if match is None:
        return {}
    found: dict[str, str] = {}
    names: list[str] = []
    description: list[str] = []
    header_continues = False

    def close() -> None:
        text = " ".join(description)
        if text:
            found.update((name, text) for name in names if name not in found)

    for line in match.group(1).splitlines():
        if line.startswith(" "):
            description.append(line.strip())
            continue
        if description or not header_continues:
            close()
            names, description = [], []
        header = line.split(" : ")[0]
        names += [name.strip() for name in header.split(",") if name.strip()]
        header_continues = header.rstrip().endswith(",")
    close()
    return {name: plain_text(text) for name, text in found.items()}


def plain_text(text: str) -> str:
    """reStructuredText roles and literals as plain text: ``x`` -> x, :class:`a.B` -> a.B."""
    return _ROLE.sub(r"\1", text).replace("``", "")


def first_sentence(text: str) -> str:
    """The first sentence of ``text``: up to a full stop (not an abbreviation's) before a capital, a
    parenthesis, a quote or the end."""
    match = _SENTENCE.match(text)
    return match.group(1) if match else text
