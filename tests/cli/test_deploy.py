"""The deployment recipes in deploy/, as far as a machine without containers can test them.

The compose file's topology runs as local processes (its scheduler, its worker replicas, its
data, job and info commands, and its healthchecks); the Kubernetes manifests and the HPC script
must run the compose file's commands (tests/recipes.py), and a wrong command in a copy of a
recipe is refused. The HPC script runs for real with dask-jobqueue's local job system.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import zarr
from distributed import Client

import daskclust
from daskclust.cli.demo import recovered_fraction

import recipes
from process_cluster import process_cluster, still_running
from recipes import RecipeError

COMMAND_TIMEOUT = 300


@pytest.fixture(scope="module")
def services():
    return recipes.read_compose()


def run(argv, cwd):
    """Run a recipe's command as a process; its output, once it has exited with 0."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    assert done.returncode == 0, f"{argv} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def assert_recovers_the_grid(data: str, model_path: str, n_clusters: int):
    """The saved model: C centres, a finished fit, and the BIRCH grid's true centres found."""
    model = daskclust.load(model_path)
    assert model.cluster_centers_.shape == (n_clusters, 2)
    assert model.converged_ or np.isfinite(model.history_[-1]["free_energy"])
    true_centres = zarr.open_group(data, mode="r")["centers"][:]
    fraction, _ = recovered_fraction(true_centres, model.cluster_centers_)
    assert fraction >= 0.9, f"only {fraction:.0%} of the true centres have a fitted centre within 1.0"


def assert_describes(info_output: str, n_clusters: int):
    assert re.search(rf"^\s*n_clusters: {n_clusters}$", info_output, re.MULTILINE), info_output


# ------------------------------------------------------------------ the compose topology, run
@pytest.mark.slow
def test_the_compose_topology_runs_as_local_processes(tmp_path, services):
    """The scheduler, ``replicas`` workers, the data, job and info commands of the compose file,
    with /data in a temporary directory and the scheduler on 127.0.0.1; the healthchecks pass."""
    parsed = recipes.check_compose(services)
    commands = recipes.compose_commands(services)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    run(recipes.local_command(commands["data"], data_dir, "unused"), cwd=tmp_path)
    replicas = services["worker"]["deploy"]["replicas"]
    per_process = int(parsed["worker"]["n_workers"])
    assert replicas * per_process >= 2  # several worker processes
    with process_cluster(tmp_path, processes=replicas, workers_per_process=per_process,
                         scheduler_args=recipes.local_scheduler_args(commands["scheduler"]),
                         worker_args=recipes.local_worker_args(commands["worker"])) as cluster:
        tree = cluster.tree()
        with Client(cluster.address, set_as_default=False) as client:
            workers = client.scheduler_info(n_workers=-1)["workers"].values()
            assert len(workers) == replicas * per_process
            assert {w["nthreads"] for w in workers} == {parsed["worker"]["nthreads"]}
            worker_port = next(iter(workers))["services"]["dashboard"]
        run(recipes.local_healthcheck(services["scheduler"], cluster.dashboard_port()), cwd=tmp_path)
        run(recipes.local_healthcheck(services["worker"], worker_port), cwd=tmp_path)
        run(recipes.local_command(commands["job"], data_dir, cluster.address), cwd=tmp_path)
        info = run(recipes.local_command(commands["info"], data_dir, cluster.address), cwd=tmp_path)
    assert not still_running(tree), "processes left running"
    job = parsed["job"]
    assert_recovers_the_grid(recipes.local_path(job["data"], data_dir), recipes.local_path(job["output"], data_dir),
                             job["n_clusters"])
    assert_describes(info, parsed["job"]["n_clusters"])


# ------------------------------------------------------------------ the recipes agree
def test_the_compose_commands_parse_and_agree(services):
    parsed = recipes.check_compose(services)
    assert parsed["job"]["command"] == "fit" and parsed["worker"]["command"] == "worker"


def test_the_kubernetes_manifests_run_the_compose_commands(services):
    containers = recipes.load_kubernetes()
    recipes.check_kubernetes(recipes.compose_commands(services), containers)
    assert sorted(c.where for c in containers) == [
        "daskcluster.yaml: DaskCluster/daskclust scheduler",
        "daskcluster.yaml: DaskCluster/daskclust worker",
        "daskjob.yaml: DaskJob/daskclust-fit data",
        "daskjob.yaml: DaskJob/daskclust-fit job",
        "daskjob.yaml: DaskJob/daskclust-fit scheduler",
        "daskjob.yaml: DaskJob/daskclust-fit worker",
        "info-job.yaml: Job/daskclust-info info",
    ]


def test_the_jobqueue_script_runs_the_compose_fit(services):
    recipes.check_jobqueue(recipes.compose_commands(services), recipes.load_jobqueue_script())


# ------------------------------------------------------------------ a wrong recipe is refused
def mutated(source, tmp_path, old, new):
    """A copy of ``source`` in ``tmp_path`` with the first ``old`` replaced by ``new``."""
    text = source.read_text()
    assert old in text, f"{old!r} is not in {source.name}: the mutation would test nothing"
    copy = tmp_path / source.name
    copy.write_text(text.replace(old, new, 1))
    return copy


@pytest.mark.parametrize("old, new, message", [
    ('"--nthreads", "2"', '"--nthread", "2"', r"service worker: No such option '--nthread'"),
    ('"--nthreads", "2"', '"--nthreads", "two"', r"service worker: Invalid value for '--nthreads'"),
    ('["dask", "worker"', '["dask", "workers"', r"service worker: `dask workers` is not a dask command"),
    ('["dask", "scheduler"', '["dask-scheduler"', r"service scheduler: runs 'dask-scheduler'"),
    ('"daskclust", "fit"', '"daskclust", "fitt"', r"service job: .*invalid choice: 'fitt'"),
    ('"--scheduler", "tcp://scheduler:8786",', "", r"service job: fit without --scheduler"),
    ('"--points-per-cluster"', '"--points-per-clusters"', r"service data: .*unrecognized arguments"),
    ('"fit", "/data/birch.zarr"', '"fit", "/data/brich.zarr"',
     r"the job's data is '/data/brich.zarr', expected '/data/birch.zarr'"),
    ('"dask", "worker", "tcp://scheduler:8786"', '"dask", "worker", "tcp://scheduler:8787"',
     r"the workers' scheduler is 'tcp://scheduler:8787'"),
    ('["daskclust", "info", "/data/model.zarr"]', "daskclust info /data/model.zarr",
     r"service info: the command must be a list of strings \(exec form\)"),
    ("localhost:8788/health", "localhost:8789/health", r"service worker: the healthcheck .* http://localhost:8788"),
])
def test_a_wrong_compose_command_is_refused(tmp_path, old, new, message):
    copy = mutated(recipes.COMPOSE, tmp_path, old, new)
    with pytest.raises(RecipeError, match=message):
        recipes.check_compose(recipes.read_compose(copy))


@pytest.mark.parametrize("manifest, old, new, message", [
    ("daskjob.yaml", '"--nthreads", "2"', '"--nthreads", "3"',
     r"DaskJob/daskclust-fit worker: .* differs from the compose service's"),
    ("daskcluster.yaml", '"$(DASK_SCHEDULER_ADDRESS)", "--nworkers"', '"tcp://scheduler:8786", "--nworkers"',
     r"DaskCluster/daskclust worker: .* differs"),
    ("daskcluster.yaml", '"--name", "$(DASK_WORKER_NAME)"', '"--nme", "$(DASK_WORKER_NAME)"',
     r"DaskCluster/daskclust worker: No such option '--nme'"),
    ("daskjob.yaml", '"--scheduler", "$(DASK_SCHEDULER_ADDRESS)",', "",
     r"DaskJob/daskclust-fit job: fit without --scheduler"),
    ("daskjob.yaml", '"daskclust", "make-data"', '"daskclust", "makedata"',
     r"DaskJob/daskclust-fit data: .*invalid choice: 'makedata'"),
    ("info-job.yaml", "name: info", "name: report", r"Job/daskclust-info report: no compose service 'report'"),
])
def test_a_wrong_kubernetes_command_is_refused(tmp_path, services, manifest, old, new, message):
    paths = [mutated(p, tmp_path, old, new) if p.name == manifest else p for p in recipes.MANIFESTS]
    with pytest.raises(RecipeError, match=message):
        recipes.check_kubernetes(recipes.compose_commands(services), recipes.load_kubernetes(paths))


def test_a_role_missing_from_the_manifests_is_refused(services):
    paths = [p for p in recipes.MANIFESTS if p.name != "info-job.yaml"]
    with pytest.raises(RecipeError, match="no container runs info"):
        recipes.check_kubernetes(recipes.compose_commands(services), recipes.load_kubernetes(paths))


def test_a_jobqueue_fit_that_drifts_is_refused(services):
    script = recipes.load_jobqueue_script()
    drifted = SimpleNamespace(fit_argv=lambda *args: script.fit_argv(*args)[:-1], info_argv=script.info_argv)
    with pytest.raises(RecipeError, match=r"jobqueue_fit.py: job: .* differs from the compose service's"):
        recipes.check_jobqueue(recipes.compose_commands(services), drifted)


# ------------------------------------------------------------------ the HPC script
SCRIPT = [sys.executable, str(recipes.JOBQUEUE_SCRIPT)]


def test_the_jobqueue_script_helps_without_dask_jobqueue(tmp_path):
    """--help and the import need no dask-jobqueue; running without it says what to install."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "dask_jobqueue.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(hide), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([*SCRIPT, "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "slurm" in done.stdout and "--walltime" in done.stdout and "--jobs" in done.stdout
    assert recipes.load_jobqueue_script().build_parser().prog == "jobqueue_fit.py"
    done = subprocess.run([*SCRIPT, "slurm", "data.zarr", "--clusters", "4", "--output", "m.zarr"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1
    assert "dask-jobqueue is not installed here: pip install dask-jobqueue" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("system, directive", [("slurm", "#SBATCH"), ("pbs", "#PBS")])
def test_the_jobqueue_script_writes_the_job_script(tmp_path, system, directive):
    """--dry-run: the batch script asks for the given cores, memory and walltime, secures the
    worker with TLS, and the fit command is the recipes'."""
    pytest.importorskip("dask_jobqueue")
    done = subprocess.run([*SCRIPT, system, "/shared/birch.zarr", "--clusters", "36", "--output", "/shared/m.zarr",
                           "--cores", "4", "--memory", "8GB", "--walltime", "00:30:00", "--queue", "short",
                           "--interface", "lo", "--dashboard-address", "127.0.0.1:0", "--shared-dir", str(tmp_path),
                           "--prologue", "source /opt/venv/bin/activate", "--dry-run"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert directive in out and "00:30:00" in out and "short" in out
    assert "source /opt/venv/bin/activate" in out
    assert re.search(r"dask_worker tls://127\.0\.0\.1:\d+ .*--nthreads 4 --memory-limit 7\.45GiB", out), out
    assert f"--tls-ca-file {tmp_path}/" in out
    assert re.search(r"^daskclust fit /shared/birch\.zarr --clusters 36 --scheduler tls://127\.0\.0\.1:\d+ "
                     r"--output /shared/m\.zarr --seed 0 --overwrite$", out, re.MULTILINE), out


@pytest.mark.slow
def test_the_jobqueue_script_fits_on_local_jobs(tmp_path, services):
    """The whole script on dask-jobqueue's local job system: a TLS cluster of two job workers on
    127.0.0.1, the fit through daskclust's command line with the client's certificate, then info."""
    pytest.importorskip("dask_jobqueue")
    commands = recipes.compose_commands(services)
    run(recipes.local_command(commands["data"], tmp_path, "unused"), cwd=tmp_path)
    job = recipes.parse_command("compose: service job", commands["job"])
    data, model, clusters = recipes.local_path(job["data"], tmp_path), recipes.local_path(job["output"], tmp_path), \
        job["n_clusters"]
    out = run([*SCRIPT, "local", data, "--clusters", str(clusters), "--output", model, "--jobs", "2", "--cores", "1",
               "--memory", "2GB", "--interface", "lo", "--dashboard-address", "127.0.0.1:0",
               "--shared-dir", str(tmp_path)], cwd=tmp_path)
    assert re.search(r"^scheduler tls://127\.0\.0\.1:\d+", out, re.MULTILINE), out
    assert f"saved KMeans with {clusters} clusters to {model}" in out
    assert_recovers_the_grid(data, model, clusters)
    assert_describes(out, clusters)
    assert not list(tmp_path.glob(".dask-jobqueue.*")), "the workers' TLS files were left behind"
    leaked = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    for proc in leaked:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    assert not leaked, f"worker processes left running: {leaked}"


def test_the_deployment_page_gathers_every_recipe_readme():
    """docs/deployment.md includes every README of deploy/ (a new recipe's README too)."""
    page = (recipes.DEPLOY.parent / "docs" / "deployment.md").read_text()
    included = set(re.findall(r'^--8<-- "([^"]+)"$', page, re.MULTILINE))
    readmes = {str(p.relative_to(recipes.DEPLOY.parent)) for p in recipes.DEPLOY.rglob("README.md")}
    assert included == readmes


def test_every_pod_is_hardened_and_every_cluster_is_fenced():
    """Non-root pods with the runtime's seccomp profile; containers without privilege escalation or
    capabilities, on a read-only root file system with /tmp writable; a NetworkPolicy that admits only
    a cluster's own pods to its scheduler and workers; the compose services hardened alike."""
    import yaml

    clusters, fenced = set(), set()
    for path in recipes.MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] in ("DaskCluster", "DaskJob"):
                clusters.add(doc["metadata"]["name"])
            if doc["kind"] == "NetworkPolicy":
                selected = doc["spec"]["podSelector"]["matchLabels"]["dask.org/cluster-name"]
                sources = [rule["podSelector"]["matchLabels"] for rule in doc["spec"]["ingress"][0]["from"]]
                assert doc["spec"]["policyTypes"] == ["Ingress"] and {"dask.org/cluster-name": selected} in sources
                fenced.add(selected)
            for pod in recipes._pod_specs(doc):
                where = f"{path.name}: {doc['metadata']['name']}"
                context = pod.get("securityContext", {})
                assert context.get("runAsNonRoot") is True and context.get("seccompProfile") == {"type": "RuntimeDefault"}, where
                assert {"name": "tmp", "emptyDir": {}} in pod.get("volumes", []), where
                for container in pod.get("initContainers", []) + pod["containers"]:
                    own = container.get("securityContext", {})
                    assert own == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                   "capabilities": {"drop": ["ALL"]}}, (where, container["name"])
                    assert {"name": "tmp", "mountPath": "/tmp"} in container.get("volumeMounts", []), where
    assert clusters == fenced == {"daskclust", "daskclust-fit"}
    compose = yaml.safe_load((recipes.DEPLOY / "docker" / "compose.yaml").read_text())
    for name, service in compose["services"].items():
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        assert service["security_opt"] == ["no-new-privileges:true"] and service["user"] == "1000:1000", name
        assert "8786" not in " ".join(map(str, service.get("ports", []))), name
