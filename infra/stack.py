"""The scale-out stack on one machine: ``make stack-up``, ``stack-status``, ``stack-down``.

Every part is a separate process, as it would be on separate hosts:

- PostgreSQL holding the Iceberg catalog (database ``lake``) and Dagster's run, event-log and
  schedule storage (database ``dagster``, which also keeps Borrowers' heartbeats);
- an Iceberg REST catalog: both engines reach the catalog only through it, as production lakes are
  reached. ``make stack-up CATALOG=...`` picks the server: ``icegroup`` (the default:
  ``infra/rest_catalog``, over database ``lake``, with a client credential, the warehouse a folder of
  the stack's), ``fixture`` (Iceberg's REST test fixture over database ``fixture``, the warehouse in S3)
  or ``nessie`` (Project Nessie, its version store in RocksDB, the warehouse in S3);
- a Spark standalone master and two workers, each with its own cores and memory limits, started
  with ``spark-class`` from the pyspark install;
- ``dagster-webserver`` (on 127.0.0.1 only) and ``dagster-daemon`` over one PostgreSQL instance;
- an S3-compatible server (moto) with a bucket: the fixture's and Nessie's warehouse, and the
  ``lakehouse-s3.yaml`` SQL catalog's.

Its files live in one folder (``.stack/`` by default): the data, every log, ``stack.json`` (what
runs where), ``lakehouse.yaml`` (the product's config for this stack) and ``env`` (the variables
that select it: ``source .stack/env``). Every process it starts carries ``ICEGROUP_STACK_MEMBER``
in its environment, and so do their children (executors, code servers, Borrower runs): that is how
``down`` finds and stops them all, even those of a stack whose record was lost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from icegroup.infra import rest_catalog
from icegroup.infra.postgres import LocalPostgres, open_local_postgres, server_bin_dir
from icegroup.infra.processes import MEMBER, alive, http_ok, is_member, members, port_open, terminate, wait_for
from icegroup.infra.stack_catalogs import catalog_part, forget_s3_catalogs
from icegroup.infra.stack_layout import (
    BUCKET,
    CATALOGS,
    S3_KEYS,
    Layout,
    default_layout,
    repo_root,
    stack_env,
    write_files,
)
from icegroup.infra.stack_s3 import ensure_bucket


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
    catalog: str = "icegroup"

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
        return Stack(
            folder=data["folder"],
            parts=[Part(**part) for part in data["parts"]],
            catalog=data.get("catalog", "icegroup"),
        )


def venv_bin() -> Path:
    """The folder of this interpreter's console scripts (dagster-webserver, moto_server, spark-class's python)."""
    return Path(sys.executable).parent


def spark_home() -> Path:
    """The pyspark install, which holds ``bin/spark-class``."""
    import pyspark

    return Path(pyspark.__file__).parent


def member_env(layout: Layout, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A started process's environment: the host's basics, marked as a stack member, plus ``extra``.

    The caller's icegroup, Dagster, Spark, AWS, Iceberg-fixture and Python-path settings are left out: a part that a
    test restarts must not inherit the test's scratch catalog or instance. Without PYTHONPATH a
    cluster's executors import only what is installed or shipped, as on real hosts; a transform that
    reaches them only through the driver's path fails here as it would there.
    """
    dropped = ("ICEGROUP_", "DAGSTER_", "SPARK_", "PYSPARK_", "AWS_", "CATALOG_")
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


def claim_port(port: int, part: str) -> None:
    """Stop with a clear message when a port a part is about to take is in use."""
    if port_open(port):
        raise SystemExit(f"port {port} for {part} is in use by another program; stop it, or run `make stack-down`")


def up(layout: Layout) -> Stack:
    """Start what is not running, wait until every part is healthy, and record the stack; twice is harmless."""
    layout.folder.mkdir(parents=True, exist_ok=True)
    write_files(layout)
    recorded = Stack.load(layout.folder)
    if (
        recorded is not None
        and recorded.catalog != layout.catalog
        and any(is_member(part.pid, layout.folder) for part in recorded.parts)
    ):
        raise SystemExit(
            f"the stack in {layout.folder} runs CATALOG={recorded.catalog}; run `make stack-down` first to start it "
            f"on {layout.catalog}"
        )
    if recorded is None and (strays := members(layout.folder)):
        print(f"stopping {len(strays)} processes left by an earlier stack that was not recorded")
        terminate(strays, grace_s=10)
    before = {part.name: part for part in (recorded.parts if recorded else [])}
    stack = Stack(folder=str(layout.folder), catalog=layout.catalog)

    def keep_or_start(name: str, port: int, command: list[str], extra: dict[str, str] | None = None) -> Part:
        own = before.get(name)
        if own is not None and is_member(own.pid, layout.folder):
            return own
        claim_port(port, name)
        pid, log = launch(layout, name, command, extra)
        return Part(name=name, pid=pid, listens=f"127.0.0.1:{port}", log=log)

    postgres = open_local_postgres(layout.folder / "postgres", layout.postgres_port)
    for database in ("lake", "dagster", "fixture"):
        postgres.ensure_database(database)
    stack.parts.append(
        Part("postgres", postgres.pid(), f"127.0.0.1:{layout.postgres_port}", str(postgres.data_dir / "log"))
    )

    s3 = keep_or_start(
        "s3", layout.s3_port, [str(venv_bin() / "moto_server"), "-H", "127.0.0.1", "-p", str(layout.s3_port)]
    )
    s3.listens = f"{layout.s3_endpoint} (bucket {BUCKET})"
    stack.parts.append(s3)
    wait_for("the S3 server", lambda: http_ok(f"{layout.s3_endpoint}/moto-api/"), 60, s3.log)
    if s3 is not before.get("s3"):
        # The catalog server still running would serve tables whose files the new S3 server lacks: restart it.
        running = before.pop("rest-catalog", None) if layout.catalog != "icegroup" else None
        if running is not None and running.pid is not None and is_member(running.pid, layout.folder):
            terminate([running.pid], grace_s=10)
        forget_s3_catalogs(layout, postgres)
    ensure_bucket(layout)

    port, command, extra, serves = catalog_part(layout)
    rest = keep_or_start("rest-catalog", port, command, extra)
    rest.listens = f"{layout.rest_url} ({serves})"
    stack.parts.append(rest)
    rest_catalog.wait_ready(layout.rest_url, 120, log=Path(rest.log))

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
    wait_for(
        "dagster-webserver",
        lambda: http_ok(f"http://127.0.0.1:{layout.webserver_port}/server_info"),
        180,
        webserver.log,
    )
    wait_for("dagster-daemon", lambda: daemon_healthy(layout), 180, daemon.log)
    return stack


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
        cluster = stack_postgres(layout)
        if cluster.running():
            cluster.halt()
    left = [*members(layout.folder), *([pid] if (pid := _postgres_pid(postgres_dir)) else [])]
    if not left:
        (layout.folder / "stack.json").unlink(missing_ok=True)
    return left


def stack_postgres(layout: Layout) -> LocalPostgres:
    """The stack's PostgreSQL cluster, running or not, for stopping it or making databases in it."""
    found = server_bin_dir()
    if found is None:
        raise SystemExit(
            f"{layout.folder / 'postgres'} holds a PostgreSQL cluster, but no server binaries are installed"
        )
    return LocalPostgres(data_dir=layout.folder / "postgres", port=layout.postgres_port, bin_dir=found)


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


def print_parts(rows: list[tuple[str, str, str, str]]) -> None:
    """The parts as an aligned table."""
    for name, state, listens, log in rows:
        print(f"  {name:<18} {state:<10} {listens:<58} {log}")


def main(argv: list[str] | None = None) -> int:
    """``python -m icegroup.infra.stack up|down|status``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument(
        "--catalog",
        choices=CATALOGS,
        help="the REST catalog server `up` starts (default: ICEGROUP_STACK_CATALOG, else icegroup)",
    )
    args = parser.parse_args(argv)
    action = args.action
    recorded = Stack.load(default_layout().folder)
    layout = default_layout(args.catalog or (recorded.catalog if recorded and action != "up" else None))
    if action == "up":
        started = time.monotonic()
        stack = up(layout)
        rows, _ = status(layout)
        print(f"stack up in {time.monotonic() - started:.0f} s, {len(stack.parts)} parts healthy:")
        print_parts(rows)
        what = "ICEGROUP_LAKEHOUSE, DAGSTER_HOME, the S3 keys"
        if layout.catalog == "icegroup":
            what += ", the REST credential"
        print(f"use it: source {layout.folder / 'env'}   ({what})")
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
