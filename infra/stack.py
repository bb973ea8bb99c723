"""The scale-out stack on one machine: ``make stack-up``, ``stack-status``, ``stack-down``.

Every part is a separate process, as it would be on separate hosts:

- PostgreSQL holding the Iceberg catalog (database ``lake``) and Dagster's run, event-log and
  schedule storage (database ``dagster``);
- a Spark standalone master and two workers, each with its own cores and memory limits, started
  with ``spark-class`` from the pyspark install;
- ``dagster-webserver`` (on 127.0.0.1 only) and ``dagster-daemon`` over one PostgreSQL instance;
- an S3-compatible server (moto) with a bucket, for pyiceberg's side of an S3 warehouse.

Its files live in one folder (``.stack/`` by default): the data, every log, ``stack.json`` (what
runs where), ``lakehouse.yaml`` (the product's config for this stack) and ``env`` (the variables
that select it: ``source .stack/env``). Every process it starts carries ``ICEGROUP_STACK_MEMBER``
in its environment, and so do their children (executors, code servers, Borrower runs): that is how
``down`` finds and stops them all, even those of a stack whose record was lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from infra.postgres import LocalPostgres, open_local_postgres

MEMBER = "ICEGROUP_STACK_MEMBER"
BUCKET = "icegroup"
# Dummy keys for the local S3 server, which accepts any; .stack/env exports them. Real keys never go in a file.
S3_KEYS = {"AWS_ACCESS_KEY_ID": "icegroup-stack", "AWS_SECRET_ACCESS_KEY": "icegroup-stack", "AWS_REGION": "us-east-1"}


@dataclass(frozen=True)
class Layout:
    """Where the stack listens and how big its workers are.

    The workers advertise 4 cores and 3g each on a 2-core machine: oversubscribed on purpose, so that
    the tests' Spark application, several Borrowers and the chaos workers (1 core each) are all
    scheduled at once. They are Spark's scheduling limits, not a measure of the hardware.
    """

    folder: Path
    postgres_port: int = 55432
    master_port: int = 17077
    master_ui_port: int = 18080
    worker_ui_ports: tuple[int, ...] = (18081, 18082)
    worker_cores: int = 4
    worker_memory: str = "3g"
    webserver_port: int = 13000
    s3_port: int = 19000
    # One Borrower's application: 1 core and a small executor, so a handful of Borrowers share the workers.
    app_cores: int = 1
    executor_memory: str = "768m"

    @property
    def master_url(self) -> str:
        """The Spark master, as ``spark_master`` takes it."""
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def s3_endpoint(self) -> str:
        """The S3-compatible server's endpoint."""
        return f"http://127.0.0.1:{self.s3_port}"

    def catalog_uri(self, database: str = "lake") -> str:
        """A database of the stack's PostgreSQL as ``catalog_uri``."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.postgres_port}/{database}"


@dataclass
class Part:
    """One running part: its process, where it listens and where it logs."""

    name: str
    pid: int | None
    listens: str
    log: str


@dataclass
class Stack:
    """What ``stack.json`` records."""

    folder: str
    parts: list[Part] = field(default_factory=list)

    def save(self) -> None:
        """Write ``stack.json`` atomically."""
        path = Path(self.folder) / "stack.json"
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps(asdict(self), indent=2))
        partial.replace(path)

    @staticmethod
    def load(folder: Path) -> Stack | None:
        """The recorded stack, if one was started in ``folder``."""
        try:
            data = json.loads((folder / "stack.json").read_text())
        except (OSError, ValueError):
            return None
        return Stack(folder=data["folder"], parts=[Part(**part) for part in data["parts"]])


def repo_root() -> Path:
    """The checkout: workspace.yaml, the groups file and the built jars are found from here."""
    return Path(__file__).resolve().parents[1]


def venv_bin() -> Path:
    """The folder of this interpreter's console scripts (dagster-webserver, moto_server, spark-class's python)."""
    return Path(sys.executable).parent


def spark_home() -> Path:
    """The pyspark install, which holds ``bin/spark-class``."""
    import pyspark

    return Path(pyspark.__file__).parent


def lakehouse_config(layout: Layout) -> dict[str, object]:
    """The product's lakehouse config for this stack: the only thing that differs from the embedded default."""
    return {
        "catalog_uri": layout.catalog_uri(),
        "warehouse": str(layout.folder / "warehouse"),
        "spark_master": layout.master_url,
        "jars": str(repo_root() / "build" / "jars"),
        "spark": {
            "cores_max": layout.app_cores,
            "executor_cores": layout.app_cores,
            "executor_memory": layout.executor_memory,
            "python": sys.executable,
        },
    }


def s3_lakehouse_config(layout: Layout) -> dict[str, object]:
    """The same catalog with its warehouse in the stack's S3 bucket (pyiceberg's side; see infra/README.md)."""
    return {
        **lakehouse_config(layout),
        "catalog_name": "s3lake",
        "warehouse": f"s3://{BUCKET}/warehouse",
        "s3": {"endpoint": layout.s3_endpoint, "region": S3_KEYS["AWS_REGION"], "path_style_access": True},
    }


def dagster_config(layout: Layout) -> dict[str, object]:
    """Dagster's instance on the stack's PostgreSQL, with the queued run coordinator the daemon drives."""
    return {
        "storage": {
            "postgres": {
                "postgres_db": {
                    "hostname": "127.0.0.1",
                    "port": layout.postgres_port,
                    "username": "postgres",
                    "password": "",
                    "db_name": "dagster",
                    # SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3; dagster-postgres installs psycopg2.
                    "scheme": "postgresql+psycopg2",
                }
            }
        },
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"max_concurrent_runs": 4},
        },
        "run_monitoring": {"enabled": True, "start_timeout_seconds": 180, "poll_interval_seconds": 30},
        "telemetry": {"enabled": False},
    }


def stack_env(layout: Layout) -> dict[str, str]:
    """The variables that point icegroup, Dagster and boto3 at this stack."""
    return {
        "ICEGROUP_LAKEHOUSE": str(layout.folder / "lakehouse.yaml"),
        "DAGSTER_HOME": str(layout.folder / "dagster"),
        **S3_KEYS,
    }


def write_files(layout: Layout) -> None:
    """The stack's configs and its ``env`` file; rewritten on every ``up``, so they match the layout."""
    folder = layout.folder
    (folder / "dagster").mkdir(parents=True, exist_ok=True)
    (folder / "warehouse").mkdir(exist_ok=True)
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "lakehouse.yaml").write_text(yaml.safe_dump(lakehouse_config(layout), sort_keys=False))
    (folder / "lakehouse-s3.yaml").write_text(yaml.safe_dump(s3_lakehouse_config(layout), sort_keys=False))
    (folder / "dagster" / "dagster.yaml").write_text(yaml.safe_dump(dagster_config(layout), sort_keys=False))
    lines = [f"export {key}={value}" for key, value in stack_env(layout).items()]
    (folder / "env").write_text(
        "# source this file to use the stack: icegroup, dagster and boto3 pick it up\n" + "\n".join(lines) + "\n"
    )


def member_env(layout: Layout, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A started process's environment: the host's basics, marked as a stack member, plus ``extra``.

    The caller's icegroup, Dagster, Spark, AWS and Python-path settings are left out: a part that a
    test restarts must not inherit the test's scratch catalog or instance. Without PYTHONPATH a
    cluster's executors import only what is installed or shipped, as on real hosts; a transform that
    reaches them only through the driver's path fails here as it would there.
    """
    dropped = ("ICEGROUP_", "DAGSTER_", "SPARK_", "PYSPARK_", "AWS_")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(dropped)}
    env.update({MEMBER: str(layout.folder), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(spark_home())})
    env.update(extra or {})
    return env


def launch(layout: Layout, name: str, command: list[str], extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """Start a part in its own session with its output in ``logs/<name>.log``; returns its pid and log."""
    log = layout.folder / "logs" / f"{name}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            cwd=repo_root(),
            env=member_env(layout, extra_env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return process.pid, str(log)


def is_member(pid: int | None, folder: Path) -> bool:
    """Whether ``pid`` is a live process started by the stack in ``folder`` (its environment carries the mark).

    A pid recorded in ``stack.json`` is trusted only so: after a reboot the same number may belong
    to another program, which ``up`` must not take for a part and ``down`` must not signal.
    """
    if not alive(pid):
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MEMBER}={folder}".encode() in environ.split(b"\0")


def alive(pid: int | None) -> bool:
    """Whether a process exists and is not a zombie."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


def alive_workers(layout: Layout) -> int:
    """How many workers the master counts as ALIVE (its JSON status page)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{layout.master_ui_port}/json/", timeout=2) as response:
            status = json.load(response)
    except (OSError, ValueError):
        return 0
    return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")


def daemon_healthy(layout: Layout) -> bool:
    """``dagster-daemon liveness-check``: the daemon's heartbeat in the PostgreSQL instance is recent."""
    check = subprocess.run(
        [str(venv_bin() / "dagster-daemon"), "liveness-check"],
        env=member_env(layout, stack_env(layout)),
        capture_output=True,
        cwd=repo_root(),
    )
    return check.returncode == 0


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float, log: str | None = None) -> None:
    """Poll until ``ready``; on timeout say what did not come up and where its log is."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise SystemExit(f"{what} did not become healthy in {timeout_s:.0f} s" + (f"; see {log}" if log else ""))


def claim_port(port: int, part: str) -> None:
    """Stop with a clear message when a port a part is about to take is in use."""
    if port_open(port):
        raise SystemExit(f"port {port} for {part} is in use by another program; stop it, or run `make stack-down`")


def up(layout: Layout) -> Stack:
    """Start what is not running, wait until every part is healthy, and record the stack; twice is harmless."""
    layout.folder.mkdir(parents=True, exist_ok=True)
    write_files(layout)
    recorded = Stack.load(layout.folder)
    if recorded is None and (strays := members(layout.folder)):
        print(f"stopping {len(strays)} processes left by an earlier stack that was not recorded")
        terminate(strays, grace_s=10)
    before = {part.name: part for part in (recorded.parts if recorded else [])}
    stack = Stack(folder=str(layout.folder))

    def keep_or_start(name: str, port: int, command: list[str], extra: dict[str, str] | None = None) -> Part:
        own = before.get(name)
        if own is not None and is_member(own.pid, layout.folder):
            return own
        claim_port(port, name)
        pid, log = launch(layout, name, command, extra)
        return Part(name=name, pid=pid, listens=f"127.0.0.1:{port}", log=log)

    postgres = open_local_postgres(layout.folder / "postgres", layout.postgres_port)
    for database in ("lake", "dagster"):
        postgres.ensure_database(database)
    stack.parts.append(
        Part("postgres", postgres.pid(), f"127.0.0.1:{layout.postgres_port}", str(postgres.data_dir / "log"))
    )

    spark_class = str(spark_home() / "bin" / "spark-class")
    master = keep_or_start(
        "spark-master",
        layout.master_port,
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(layout.master_port),
            "--webui-port",
            str(layout.master_ui_port),
        ],
    )
    master.listens = f"{layout.master_url} (status http://127.0.0.1:{layout.master_ui_port})"
    stack.parts.append(master)
    wait_for("the Spark master", lambda: port_open(layout.master_port), 60, master.log)
    for number, ui_port in enumerate(layout.worker_ui_ports, start=1):
        work = layout.folder / "spark" / f"worker-{number}"
        work.mkdir(parents=True, exist_ok=True)
        worker = keep_or_start(
            f"spark-worker-{number}",
            ui_port,
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                layout.master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(layout.worker_cores),
                "--memory",
                layout.worker_memory,
                "--work-dir",
                str(work),
                "--webui-port",
                str(ui_port),
            ],
            S3_KEYS,  # executors' S3FileIO takes its keys from the AWS chain: here, the environment
        )
        worker.listens = f"{layout.worker_cores} cores, {layout.worker_memory} (status http://127.0.0.1:{ui_port})"
        stack.parts.append(worker)

    s3 = keep_or_start(
        "s3", layout.s3_port, [str(venv_bin() / "moto_server"), "-H", "127.0.0.1", "-p", str(layout.s3_port)]
    )
    s3.listens = f"{layout.s3_endpoint} (bucket {BUCKET})"
    stack.parts.append(s3)

    dagster_env = stack_env(layout)
    workspace = str(repo_root() / "workspace.yaml")
    webserver = keep_or_start(
        "dagster-webserver",
        layout.webserver_port,
        [str(venv_bin() / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(layout.webserver_port)],
        dagster_env,
    )
    webserver.listens = f"http://127.0.0.1:{layout.webserver_port}"
    stack.parts.append(webserver)
    daemon = before.get("dagster-daemon")
    if daemon is None or not is_member(daemon.pid, layout.folder):
        pid, log = launch(
            layout, "dagster-daemon", [str(venv_bin() / "dagster-daemon"), "run", "-w", workspace], dagster_env
        )
        daemon = Part("dagster-daemon", pid, "(no port: polls the instance)", log)
    stack.parts.append(daemon)
    stack.save()

    workers = len(layout.worker_ui_ports)
    wait_for(f"{workers} Spark workers", lambda: alive_workers(layout) == workers, 90, master.log)
    wait_for("the S3 server", lambda: http_ok(f"{layout.s3_endpoint}/moto-api/"), 60, s3.log)
    ensure_bucket(layout)
    wait_for(
        "dagster-webserver",
        lambda: http_ok(f"http://127.0.0.1:{layout.webserver_port}/server_info"),
        180,
        webserver.log,
    )
    wait_for("dagster-daemon", lambda: daemon_healthy(layout), 180, daemon.log)
    return stack


def ensure_bucket(layout: Layout) -> None:
    """Create the warehouse bucket unless it exists, and check it is there (boto3, the keys from ``env``)."""
    import boto3

    client = boto3.client("s3", endpoint_url=layout.s3_endpoint, **_boto_keys())
    if BUCKET not in {bucket["Name"] for bucket in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=BUCKET)
    client.head_bucket(Bucket=BUCKET)


def _boto_keys() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_KEYS["AWS_SECRET_ACCESS_KEY"],
        "region_name": S3_KEYS["AWS_REGION"],
    }


def members(folder: Path) -> list[int]:
    """Every process whose environment marks it as started by the stack in ``folder`` (children included)."""
    marker = f"{MEMBER}={folder}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def terminate(pids: Iterable[int], grace_s: float) -> None:
    """SIGTERM, then SIGKILL what is still there after ``grace_s``."""
    pids = list(pids)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def down(layout: Layout) -> list[int]:
    """Stop every part and every process they started, PostgreSQL last; keeps the data. Returns what was left."""
    stack = Stack.load(layout.folder)
    # The reverse of the start order: Dagster first (it launches Spark work), the master last.
    for part in reversed(stack.parts if stack else []):
        if part.pid is not None and is_member(part.pid, layout.folder):
            terminate([part.pid], grace_s=10)
    terminate(members(layout.folder), grace_s=5)
    postgres_dir = layout.folder / "postgres"
    if (postgres_dir / "PG_VERSION").is_file():
        cluster = LocalPostgres(data_dir=postgres_dir, port=layout.postgres_port, bin_dir=_pg_bin(postgres_dir))
        if cluster.running():
            cluster.halt()
    left = [*members(layout.folder), *([pid] if (pid := _postgres_pid(postgres_dir)) else [])]
    if not left:
        (layout.folder / "stack.json").unlink(missing_ok=True)
    return left


def _pg_bin(data_dir: Path) -> Path:
    from infra.postgres import server_bin_dir

    found = server_bin_dir()
    if found is None:
        raise SystemExit(f"{data_dir} holds a PostgreSQL cluster, but no server binaries are installed")
    return found


def _postgres_pid(data_dir: Path) -> int | None:
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if alive(pid) else None


def status(layout: Layout) -> tuple[list[tuple[str, str, str, str]], list[int]]:
    """Each recorded part as (name, state, where it listens, log), plus stack processes no part accounts for."""
    stack = Stack.load(layout.folder)
    rows = []
    for part in stack.parts if stack else []:
        up_now = (
            _postgres_pid(layout.folder / "postgres") if part.name == "postgres" else is_member(part.pid, layout.folder)
        )
        rows.append((part.name, "up" if up_now else "DOWN", part.listens, part.log))
    if stack is not None and alive_workers(layout) < len(layout.worker_ui_ports):
        rows.append(("spark-master", f"{alive_workers(layout)} workers", "alive at the master", ""))
    strays = [] if stack else members(layout.folder)
    return rows, strays


def default_layout() -> Layout:
    """The layout in ``ICEGROUP_STACK_DIR``, else ``.stack/`` of the checkout."""
    return Layout(folder=Path(os.environ.get("ICEGROUP_STACK_DIR") or repo_root() / ".stack").resolve())


def print_parts(rows: list[tuple[str, str, str, str]]) -> None:
    """The parts as an aligned table."""
    for name, state, listens, log in rows:
        print(f"  {name:<18} {state:<10} {listens:<58} {log}")


def main(argv: list[str] | None = None) -> int:
    """``python -m infra.stack up|down|status``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "down", "status"])
    action = parser.parse_args(argv).action
    layout = default_layout()
    if action == "up":
        started = time.monotonic()
        stack = up(layout)
        rows, _ = status(layout)
        print(f"stack up in {time.monotonic() - started:.0f} s, {len(stack.parts)} parts healthy:")
        print_parts(rows)
        print(f"use it: source {layout.folder / 'env'}   (ICEGROUP_LAKEHOUSE, DAGSTER_HOME, the S3 keys)")
        return 0
    if action == "status":
        rows, strays = status(layout)
        if not rows:
            print(f"no stack recorded in {layout.folder}" + (f"; stray stack processes: {strays}" if strays else ""))
            return 1 if strays else 0
        print_parts(rows)
        return 0 if all(row[1].startswith("up") for row in rows) else 1
    left = down(layout)
    if left:
        print(f"stack down, but processes remain: {left}", file=sys.stderr)
        return 1
    print(f"stack down: no stack process left (data kept in {layout.folder}; `make clean` removes it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
