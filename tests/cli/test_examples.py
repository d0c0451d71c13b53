"""Every file in examples/ runs at its small size (DASKCLUST_EXAMPLE_SMALL=1) as a script and prints
what it shows. Files are discovered, so a new example runs here without being listed; it fails until
KEY_LINES says what it must print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

KEY_LINES = {
    "coreset_sketch.py": [r"^sketch: 20,000 rows x 16 of 64 entries", r"^coreset phase: \d+ E-steps on 4096 rows",
                          r"^purity of the clusters on the sketches: 0\.\d+"],
    "fit_on_scheduler.py": [r"^scheduler tcp://\S+: 2 worker\(s\), 2 thread\(s\)",
                            r"^KMeans: 20000 x 8 in \d+ chunks on 2 worker\(s\)",
                            r"^labels written by the workers to .*labels\.zarr: 20,000 rows"],
    "fit_zarr.py": [r"^k-means: inertia [\d.]+ after \d+ iterations", r"^labels written: \(6400,\) int32",
                    r"^GMM: sigma\^2 ="],
    "laptop_fit.py": [r"^started a LocalCluster in this process", r"^  true centres found +\d+\.\d%",
                      r"labels_ is a numpy array"],
    "larger_than_ram.py": [r"^data: 40,000 x 8 float32 .* at file://",
                           r"^KMeans: 40000 x 8 in \d+ chunks .*, streamed from the source every pass "
                           r"\(data 1.3 MB exceed the memory budget of 0.3 MB\)$",
                           r"^interrupted after iteration 5; checkpoints in .*: ckpt-000002, ckpt-000004$",
                           r"the same centres and free energies as the uninterrupted fit: True$"],
    "xarray_cube.py": [r"^labels: DataArray 'labels' \{'sample': 6400\}, backed by dask$",
                       r"^unstacked: \('time', 'y', 'x'\) with the cube's coordinates",
                       r"identical to the computed labels$", r"^agreement with the true land cover: \d+\.\d%"],
}
"""Lines (regular expressions, searched line by line) each example must print at its small size."""

SCHEDULER_ARGUMENT = {"fit_on_scheduler.py"}
"""Examples taking the address of a running scheduler as their first argument."""


def test_every_example_is_checked():
    assert [path.name for path in EXAMPLES] == sorted(KEY_LINES), "KEY_LINES must list exactly the files of examples/"


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs_and_prints_what_it_shows(path, client, tmp_path):
    args = [client.scheduler.address] if path.name in SCHEDULER_ARGUMENT else []
    env = {key: value for key, value in os.environ.items() if key != "DASKCLUST_SCHEDULER"}
    env.update(DASKCLUST_EXAMPLE_SMALL="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, str(path), *args, str(tmp_path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        pytest.fail(f"{path.name} exited with {run.returncode}; its stderr ends:\n{run.stderr[-5000:]}")
    missing = [line for line in KEY_LINES.get(path.name, ["(no key line listed in KEY_LINES)"])
               if not re.search(line, run.stdout, re.MULTILINE)]
    assert not missing, f"{path.name} did not print {missing}; it printed:\n{run.stdout}"
