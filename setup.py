"""The wheel's build ships the kernels of default fits compiled for the machine that builds it.

numba compiles daskclust's kernels on first use and keeps them in its cache, ``__pycache__``
beside each source, keyed by the source's content, the numba and Python versions and the CPU.
``pip install .`` builds a wheel and installs it on the same machine, so after copying the
package into the build tree (``build_py``) this hook compiles there the kernels of default
``KMeans`` and ``GaussianMixture`` fits of float64 data (what ``daskclust demo`` runs, and a
first fit of either: :mod:`daskclust.estimators.wheel_kernels`); the wheel then carries them and
the first fits after the install load them instead of compiling them (about 10 s on two cores
for the demo, 7-8 s more for a mixture).

Nothing is lost if this cannot run (another numba than the one installed, another CPU, a
read-only install, ``DASKCLUST_BUILD_KERNELS=0``, a failure): numba then compiles on first use,
as before. Editable installs skip it (the kernels are cached beside the sources on first use).
Everything else about the build is in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

SKIP_VARIABLE = "DASKCLUST_BUILD_KERNELS"


def compile_kernels(build_lib: str) -> None:
    """Compile the default fits' kernels into the numba caches of the package copied to ``build_lib``."""
    if os.environ.get(SKIP_VARIABLE, "1") == "0":
        print(f"daskclust: {SKIP_VARIABLE}=0: the wheel ships no compiled kernels", file=sys.stderr)
        return
    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)  # the caches beside the sources, which the wheel carries
    env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(build_lib)] + [p for p in [env.get("PYTHONPATH")] if p])
    code = "from daskclust.estimators.wheel_kernels import main; raise SystemExit(main())"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=build_lib, timeout=900,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"daskclust: the kernels were not compiled into the wheel ({exc}); they compile on first use",
              file=sys.stderr)
        return
    message = (done.stdout.strip() or done.stderr.strip()[-2000:])
    if done.returncode:
        message = f"the kernels were not compiled into the wheel; they compile on first use: {message}"
    print(f"daskclust: {message}", file=sys.stderr)


class BuildPyWithKernels(build_py):
    """``build_py``, then the default fits' kernels compiled into the build tree (not for editable
    installs)."""

    def run(self):
        super().run()
        if not self.editable_mode:
            compile_kernels(self.build_lib)


if __name__ == "__main__":  # setuptools runs this file as __main__; the tests import it
    setup(cmdclass={"build_py": BuildPyWithKernels})
