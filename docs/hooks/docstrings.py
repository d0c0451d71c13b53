"""MkDocs hook: every public object the API reference shows must have a docstring.

mkdocstrings renders an undocumented method as a bare signature without a word of warning; this
hook reads the ``::: identifier`` lines of ``docs/api/*.md``, loads the package with griffe (the
library mkdocstrings itself uses) and logs a warning for each public class, function, method or
property without a docstring, so that ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import griffe

log = logging.getLogger("mkdocs.plugins.daskclust.docstrings")
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)
MEMBERS = re.compile(r"^\s+members: \[([^\]]*)\]\s*$", re.M)


def on_pre_build(config, **kwargs) -> None:
    root = Path(config.config_file_path).parent
    package = griffe.load("daskclust", search_paths=[str(root)], docstring_parser="numpy")
    for page in sorted((Path(config.docs_dir) / "api").glob("*.md")):
        text = page.read_text()
        blocks = DIRECTIVE.split(text)[1:]
        for identifier, options in zip(blocks[::2], blocks[1::2]):
            obj = package[identifier.removeprefix("daskclust.")] if identifier != "daskclust" else package
            wanted = MEMBERS.search(options.split(":::")[0])
            names = [n.strip() for n in wanted.group(1).split(",")] if wanted else None
            for path in undocumented(obj.final_target if obj.is_alias else obj, names):
                log.warning(f"{page.name}: {path} has no docstring")


def undocumented(obj, names: list[str] | None = None) -> list[str]:
    """Paths of ``obj`` and its public members (inherited ones of its package included) without a docstring."""
    own = obj.package.name + "."
    missing = [] if obj.docstring and obj.docstring.value.strip() else [obj.path]
    if obj.is_module or obj.is_class:
        members = obj.all_members if obj.is_class else obj.members
        for name, member in members.items():
            if (names is not None and name not in names) or (names is None and name.startswith("_")):
                continue
            if member.is_alias:
                if obj.is_module or not member.target_path.startswith(own):
                    continue  # re-exports and other packages' methods (scikit-learn's) are documented where they live
                member = member.final_target
            if member.is_module or not member.path.startswith(own):
                continue
            if member.is_attribute and not member.has_labels("property"):
                continue
            if member.is_class:
                missing += undocumented(member)
            elif not (member.docstring and member.docstring.value.strip()):
                missing.append(f"{obj.path}.{name}")
    return missing
