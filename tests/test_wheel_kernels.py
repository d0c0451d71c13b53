"""setup.py's build hook: the wheel carries the kernels of default fits, so that the first
``daskclust demo`` and the first default ``KMeans`` and ``GaussianMixture`` fits of float64 data
after ``pip install .`` load them instead of compiling them."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

COUNT_COMPILES = """
import numpy as np
from numba.core import event
import daskclust
from daskclust import GaussianMixture, KMeans
from daskclust.cli.demo import run_demo

class Counter(event.Listener):
    def __init__(self):
        self.names = []
    def on_start(self, ev):
        self.names.append(getattr(ev.data.get("dispatcher"), "__name__", "?"))
    def on_end(self, ev):
        pass

rng = np.random.default_rng(7)
blobs = rng.standard_normal((3000, 3)) + 6 * rng.standard_normal((12, 3))[np.arange(3000) % 12]
noise = rng.standard_normal((4000, 10))  # no structure: the seedings search by matrix products
demo, fits = Counter(), Counter()
with event.install_listener("numba:compile", demo):
    run_demo(400, None, 0)
with event.install_listener("numba:compile", fits):
    for X in (blobs, noise):
        for model in (KMeans(12, random_state=0), GaussianMixture(12, random_state=0)):
            model.fit(X)
            model.predict(X)
            model.score(X)
print("DASKCLUST", daskclust.__file__)
print("DEMO", demo.names)
print("FITS", fits.names)
"""


def build_hook():
    spec = importlib.util.spec_from_file_location("daskclust_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_tree(tmp_path) -> pathlib.Path:
    """The package's sources copied as ``build_py`` copies them, without any numba cache."""
    build_lib = tmp_path / "lib"
    shutil.copytree(ROOT / "daskclust", build_lib / "daskclust", ignore=shutil.ignore_patterns("__pycache__"))
    return build_lib


def cached_kernels(build_lib: pathlib.Path) -> list[pathlib.Path]:
    return sorted(build_lib.glob("daskclust/**/__pycache__/*.nbi"))


@pytest.mark.slow
def test_the_first_demo_and_default_fits_from_a_built_tree_compile_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))  # the hook must not write there
    build_lib = build_tree(tmp_path)
    build_hook().compile_kernels(str(build_lib))
    assert cached_kernels(build_lib), "no kernel cached beside the built sources"
    assert not (tmp_path / "elsewhere").exists()

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(build_lib)
    run = subprocess.run([sys.executable, "-c", COUNT_COMPILES], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if line.startswith(("DASKCLUST", "DEMO",
                                                                                              "FITS")))
    assert pathlib.Path(lines["DASKCLUST"]).is_relative_to(build_lib)
    assert lines["DEMO"] == "[]", "the demo compiled kernels"
    assert lines["FITS"] == "[]", "default KMeans or GaussianMixture fits compiled kernels"


def test_the_hook_can_be_turned_off(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DASKCLUST_BUILD_KERNELS", "0")
    build_lib = build_tree(tmp_path)
    build_hook().compile_kernels(str(build_lib))
    assert cached_kernels(build_lib) == []
    assert "ships no compiled kernels" in capsys.readouterr().err


def test_a_failing_compile_leaves_the_build_going(tmp_path, capsys):
    """A build tree whose package cannot be imported: a message, no exception."""
    broken = tmp_path / "lib" / "daskclust"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a broken build tree')\n")
    build_hook().compile_kernels(str(tmp_path / "lib"))
    assert "compile on first use" in capsys.readouterr().err
