"""The documentation site's checks can fail: a broken link or an undocumented public method makes
``mkdocs build --strict`` (run by .ci/run) fail, and the CLI reference covers the whole parser."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daskclust.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]


def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_lists_every_subcommand_and_flag():
    text = load_hook("cli_reference").reference(build_parser())
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert f"## `daskclust {name}`" in text
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in text, (name, flag)


def test_undocumented_members_are_found(tmp_path):
    import griffe

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A package."""\nfrom .mod import Model\n')
    (pkg / "mod.py").write_text(
        '"""A module."""\n\n\nclass Base:\n    """Base."""\n\n    def inherited(self):\n        pass\n\n\n'
        'class Model(Base):\n    """Model."""\n\n    def documented(self):\n        """Yes."""\n\n'
        '    def bare(self):\n        pass\n\n    @property\n    def size_(self):\n        return 1\n\n'
        '    def _private(self):\n        pass\n')
    loaded = griffe.load("pkg", search_paths=[str(tmp_path)])
    found = load_hook("docstrings").undocumented(loaded["Model"].final_target)
    assert sorted(found) == ["pkg.mod.Model.bare", "pkg.mod.Model.inherited", "pkg.mod.Model.size_"]


def site_copy(tmp_path: Path) -> Path:
    """The docs, the config and the package in a scratch directory, to break them there."""
    site = tmp_path / "site-src"
    shutil.copytree(ROOT / "docs", site / "docs")
    shutil.copytree(ROOT / "daskclust", site / "daskclust", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", site / "mkdocs.yml")
    for recipe in ("deploy", "examples"):  # pages include recipe files as snippets
        if (ROOT / recipe).exists():
            shutil.copytree(ROOT / recipe, site / recipe)
    return site


def build(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site / "out")],
                          cwd=site, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(site)})


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["broken link", "missing docstring"])
def test_strict_build_fails_on_damage(tmp_path, damage):
    site = site_copy(tmp_path)
    if damage == "broken link":
        page = site / "docs" / "guide" / "inputs.md"
        page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
        expected = "no-such-page.md"
    else:
        module = site / "daskclust" / "estimators" / "kmeans.py"
        module.write_text(module.read_text().replace(
            "    def score(self, X, y=None, sample_weight=None):",
            "    def undocumented_method(self):\n        return 0\n\n    def score(self, X, y=None, sample_weight=None):"))
        expected = "KMeans.undocumented_method has no docstring"
    done = build(site)
    assert done.returncode != 0
    assert expected in done.stderr
    assert "Aborted with 1 warnings in strict mode" in done.stdout, done.stdout + done.stderr  # the damage alone
