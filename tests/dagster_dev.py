"""A real ``dagster dev`` (webserver and daemon) over the repo's workspace, for e2e tests and benchmarks.

Both drive the product the way a user's deployment does: the Leader sensors tick in the daemon,
and every Borrower run is a process of its own that the daemon launches.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster_graphql import DagsterGraphQLClient

from tests.stack_env import home_env, write_instance_config

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reset_signals() -> None:
    """Background shells here may hand down ignored SIGTERM/SIGINT; the server must honour them."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def dagster_env(home: Path, groups: Path, dagster_home: Path) -> dict[str, str]:
    """The environment of every process of the deployment: its lakehouse, its groups and its instance."""
    return {**os.environ, **home_env(home), "ICEGROUP_GROUPS": str(groups), "DAGSTER_HOME": str(dagster_home)}


def new_instance(dagster_home: Path) -> None:
    """An empty Dagster instance with the repo's instance config; on the stack, its storage in PostgreSQL."""
    write_instance_config(dagster_home, REPO / "infra" / "dagster.yaml")


def ui_answers(client: DagsterGraphQLClient) -> bool:
    """The webserver is up and has loaded the code location."""
    try:
        client._execute("{ version }")
    except Exception:
        return False
    return True


def set_sensor(name: str, running: bool, env: dict[str, str]) -> None:
    """Start or stop a sensor in the instance, as ``dagster sensor start|stop`` does; the daemon follows."""
    command = [sys.executable, "-m", "dagster", "sensor", "start" if running else "stop", name, "-w", "workspace.yaml"]
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)


@contextmanager
def dagster_dev(env: dict[str, str], log: Path, port: int | None = None) -> Iterator[int]:
    """``dagster dev`` over workspace.yaml until the block ends; yields the webserver's port."""
    port = free_port() if port is None else port
    command = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]
    with serving(command, env, log):
        yield port


@contextmanager
def dagster_daemon(env: dict[str, str], log: Path) -> Iterator[None]:
    """``dagster-daemon run`` over workspace.yaml alone (no webserver) until the block ends."""
    with serving([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"], env, log):
        yield


@contextmanager
def serving(command: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """Run ``command`` in a session of its own; at the end, stop it and the code server it started.

    The code server runs in a session of its own and can outlive the command (one outlived its
    ``dagster dev`` by 24 minutes), so every process whose command line names the instance's home,
    as the code server's does, is stopped too. ``bench_daemon_start`` checks that no run, code
    server or Spark driver is left once this returns.
    """
    server = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=reset_signals,
    )
    try:
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        subprocess.run(["pkill", "-f", env["DAGSTER_HOME"]], check=False)
