"""The commands of the deployment recipes in deploy/, read from their files and checked.

The compose file (deploy/docker/compose.yaml) is the source: its services ``scheduler``,
``worker``, ``data``, ``job`` and ``info`` hold the canonical commands. The Kubernetes manifests
run the same commands in containers of the same names, with the placeholders of
``KUBERNETES_PLACEHOLDERS`` (documented in deploy/README.md); the HPC script builds the same
``fit`` and ``info`` arguments. Every command is also checked on its own: a ``daskclust`` command
must parse with daskclust's own parser, a ``dask`` command with the click command that ``dask``
runs for it, and a recipe's ``fit`` must name its ``--scheduler`` (without one it would fit on a
LocalCluster inside the job's container).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import NamedTuple

import click
import yaml

from daskclust.cli.main import build_parser

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
COMPOSE = DEPLOY / "docker" / "compose.yaml"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
JOBQUEUE_SCRIPT = DEPLOY / "hpc" / "jobqueue_fit.py"

ROLES = ("scheduler", "worker", "data", "job", "info")
"""The compose services, and the names of the Kubernetes containers that run the same commands."""

COMPOSE_SCHEDULER = "tcp://scheduler:8786"
"""The scheduler's address in the compose network."""

DATA_MOUNT = "/data"
"""Where the shared volume is mounted in the compose services and the Kubernetes pods."""

LOCAL_DASHBOARD = "127.0.0.1:0"
"""The dashboards of the local processes: loopback, any free port."""

KUBERNETES_PLACEHOLDERS = {COMPOSE_SCHEDULER: "$(DASK_SCHEDULER_ADDRESS)"}
"""Compose token -> Kubernetes token: the operator sets DASK_SCHEDULER_ADDRESS in the job and worker pods."""

KUBERNETES_WORKER_EXTRA = ["--name", "$(DASK_WORKER_NAME)"]
"""Appended to the worker's command on Kubernetes: the operator retires workers by pod name."""


class RecipeError(ValueError):
    """A recipe's command is wrong, or differs from the compose file's."""


def read_compose(path: Path = COMPOSE) -> dict[str, dict]:
    """The services of a compose file, by name."""
    return yaml.safe_load(Path(path).read_text())["services"]


def compose_commands(services: dict[str, dict]) -> dict[str, list[str]]:
    """Each compose service's command (exec form), by service name."""
    commands = {}
    for name, service in services.items():
        command = service.get("command")
        if not (isinstance(command, list) and all(isinstance(token, str) for token in command)):
            raise RecipeError(f"compose: service {name}: the command must be a list of strings (exec form), "
                              f"got {command!r}")
        commands[name] = command
    return commands


class Container(NamedTuple):
    """A container of a Kubernetes manifest and the command it runs."""

    where: str
    """``"<file>: <Kind>/<name> <container>"``"""
    role: str
    """The container's name: the compose service whose command it runs."""
    argv: list[str]
    """``command`` + ``args``."""


def load_kubernetes(paths=MANIFESTS) -> list[Container]:
    """Every container of the manifests at ``paths``, init containers included."""
    found = []
    for path in paths:
        for doc in yaml.safe_load_all(Path(path).read_text()):
            for pod in _pod_specs(doc):
                for container in pod.get("initContainers", []) + pod.get("containers", []):
                    where = f"{Path(path).name}: {doc['kind']}/{doc['metadata']['name']} {container['name']}"
                    argv = list(container.get("command", [])) + list(container.get("args", []))
                    found.append(Container(where, container["name"], argv))
    return found


def _pod_specs(doc: dict) -> list[dict]:
    """The pod specs of a manifest: a DaskCluster's scheduler and workers, a DaskJob's runner and
    cluster, a Job's template."""
    spec = doc.get("spec", {})
    if doc["kind"] == "DaskCluster":
        return [spec["scheduler"]["spec"], spec["worker"]["spec"]]
    if doc["kind"] == "DaskJob":
        cluster = spec["cluster"]["spec"]
        return [spec["job"]["spec"], cluster["scheduler"]["spec"], cluster["worker"]["spec"]]
    if doc["kind"] == "Job":
        return [spec["template"]["spec"]]
    return []


def load_jobqueue_script():
    """deploy/hpc/jobqueue_fit.py as a module (it imports dask-jobqueue only when it runs)."""
    spec = importlib.util.spec_from_file_location("jobqueue_fit", JOBQUEUE_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_command(where: str, argv: list[str]) -> dict:
    """Parse ``argv`` as ``dask`` or ``daskclust`` would: its parameters by name (``command``: the
    sub-command); :class:`RecipeError` naming ``where`` if it does not parse."""
    if not argv:
        raise RecipeError(f"{where}: no command")
    program, *rest = argv
    if program == "daskclust":
        params = _parse_daskclust(rest)
    elif program == "dask":
        params = _parse_dask(rest)
    else:
        params = f"runs {program!r}: a recipe runs `dask` or `daskclust`"
    if isinstance(params, str):
        raise RecipeError(f"{where}: {params} in {' '.join(argv)!r}")
    return params


def _parse_daskclust(args: list[str]) -> dict | str:
    """The parameters of ``daskclust ARGS``, or what is wrong with them."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            params = vars(build_parser().parse_args(args))
    except SystemExit:
        return stderr.getvalue().strip().splitlines()[-1]
    if params["command"] == "fit" and not params.get("scheduler"):
        return "fit without --scheduler (it would fit on a LocalCluster in the job's container)"
    return params


def _parse_dask(args: list[str]) -> dict | str:
    """The parameters of ``dask ARGS``, or what is wrong with them."""
    commands = {ep.name: ep for ep in entry_points(group="dask_cli")}
    if not args or args[0] not in commands:
        return f"`dask {args[0] if args else ''}` is not a dask command ({', '.join(sorted(commands))})"
    try:
        context = commands[args[0]].load().make_context(f"dask {args[0]}", list(args[1:]))
    except click.ClickException as exc:
        return exc.format_message()
    return {"command": args[0], **context.params}


def check_compose(services: dict[str, dict]) -> dict[str, dict]:
    """Every service's command parses, and the services agree on the scheduler's address, on the
    dashboards' ports their healthchecks ask, and on the data and model paths; returns the parsed
    commands by service."""
    commands = compose_commands(services)
    missing = [role for role in ROLES if role not in commands]
    if missing:
        raise RecipeError(f"compose: no service {', '.join(missing)}")
    parsed = {name: parse_command(f"compose: service {name}", argv) for name, argv in commands.items()}
    agreements = [
        ("the workers' scheduler", parsed["worker"]["scheduler"], COMPOSE_SCHEDULER),
        ("the scheduler's --port", parsed["scheduler"]["port"], COMPOSE_SCHEDULER.rsplit(":", 1)[1]),
        ("the job's --scheduler", parsed["job"]["scheduler"], COMPOSE_SCHEDULER),
        ("the job's data", parsed["job"]["data"], parsed["data"]["output"]),
        ("the model that info reads", parsed["info"]["model"], parsed["job"]["output"]),
    ]
    for what, found, expected in agreements:
        if found != expected:
            raise RecipeError(f"compose: {what} is {found!r}, expected {expected!r}")
    for name in ("scheduler", "worker"):
        url = f"http://localhost:{parsed[name]['dashboard_address'].rsplit(':', 1)[1]}/health"
        test = services[name].get("healthcheck", {}).get("test", [])
        if test[:2] != ["CMD", "python"] or not any(url in token for token in test):
            raise RecipeError(f"compose: service {name}: the healthcheck {test!r} does not run python on "
                              f"{url} (its dashboard)")
    return parsed


def local_healthcheck(service: dict, port: int) -> list[str]:
    """A compose service's healthcheck (``CMD python ...``) as a local process runs it, against a
    dashboard on 127.0.0.1:``port``."""
    return [sys.executable, *(re.sub(r"localhost:\d+", f"127.0.0.1:{port}", token)
                              for token in service["healthcheck"]["test"][2:])]


def local_scheduler_args(argv: list[str]) -> list[str]:
    """The compose scheduler's options (after ``dask scheduler``), with the port and the dashboard
    at 0 on 127.0.0.1, for :func:`process_cluster.process_cluster`."""
    return _with_values(argv[2:], {"--port": "0", "--dashboard-address": LOCAL_DASHBOARD})


def local_worker_args(argv: list[str]) -> list[str]:
    """The compose worker's options (after ``dask worker ADDRESS``), with the dashboard at 0 on
    127.0.0.1, for :func:`process_cluster.process_cluster` (which puts the live address first)."""
    args = argv[2:]
    if args[:1] != [COMPOSE_SCHEDULER]:
        raise RecipeError(f"compose: the worker's command does not start with `dask worker {COMPOSE_SCHEDULER}`")
    return _with_values(args[1:], {"--dashboard-address": LOCAL_DASHBOARD})


def local_command(argv: list[str], data_dir: Path, address: str) -> list[str]:
    """A compose ``daskclust`` command as a local process runs it: this Python's ``-m daskclust``,
    the shared volume's paths in ``data_dir`` and the compose scheduler at ``address``."""
    local = [sys.executable, "-m", "daskclust"]
    for token in argv[1:]:
        local.append(address if token == COMPOSE_SCHEDULER else local_path(token, data_dir))
    return local


def local_path(token: str, data_dir: Path) -> str:
    """``token`` with the shared volume's mount point replaced by ``data_dir`` (other tokens unchanged)."""
    if token == DATA_MOUNT or token.startswith(DATA_MOUNT + "/"):
        return str(data_dir) + token[len(DATA_MOUNT):]
    return token


def _with_values(args: list[str], values: dict[str, str]) -> list[str]:
    """``args`` with the value after each option of ``values`` replaced (every option must be there)."""
    args = list(args)
    for name, value in values.items():
        if name not in args:
            raise RecipeError(f"compose: {name} is not set in {' '.join(args)!r}")
        args[args.index(name) + 1] = value
    return args


def kubernetes_command(role: str, compose_argv: list[str]) -> list[str]:
    """The compose command of ``role`` as a Kubernetes container runs it (the placeholders substituted)."""
    argv = [KUBERNETES_PLACEHOLDERS.get(token, token) for token in compose_argv]
    return argv + KUBERNETES_WORKER_EXTRA if role == "worker" else argv


def check_kubernetes(compose: dict[str, list[str]], containers: list[Container]) -> None:
    """Every container's command parses and is its role's compose command; every role runs somewhere."""
    seen = set()
    for where, role, argv in containers:
        parse_command(where, argv)
        if role not in compose:
            raise RecipeError(f"{where}: no compose service {role!r} runs this container's command")
        expected = kubernetes_command(role, compose[role])
        if argv != expected:
            raise RecipeError(f"{where}: {' '.join(argv)!r} differs from the compose service's "
                              f"{' '.join(expected)!r}")
        seen.add(role)
    missing = [role for role in ROLES if role not in seen]
    if missing:
        raise RecipeError(f"kubernetes: no container runs {', '.join(missing)}")


def check_jobqueue(compose: dict[str, list[str]], script) -> None:
    """The HPC script's fit and info arguments, for the compose file's paths and address, are the
    compose file's."""
    job = parse_command("compose: service job", compose["job"])
    made = {
        "job": ["daskclust", *script.fit_argv(job["data"], job["n_clusters"], job["output"], job["scheduler"])],
        "info": ["daskclust", *script.info_argv(job["output"])],
    }
    for role, argv in made.items():
        parse_command(f"jobqueue_fit.py: {role}", argv)
        if argv != compose[role]:
            raise RecipeError(f"jobqueue_fit.py: {role}: {' '.join(argv)!r} differs from the compose service's "
                              f"{' '.join(compose[role])!r}")
