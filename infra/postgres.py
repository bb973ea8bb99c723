"""A throw-away local PostgreSQL cluster, for trying and testing icegroup beyond SQLite.

It uses the Debian server binaries (``make system`` installs them when missing). ``initdb`` refuses
to run as root, so as root the cluster runs as the ``postgres`` user. Trust authentication on
127.0.0.1 only: this is for a developer machine and CI, not for production.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalPostgres:
    """A running cluster; ``stop`` removes it."""

    data_dir: Path
    port: int
    bin_dir: Path

    def url(self, database: str = "lake") -> str:
        """SQLAlchemy URL of a database in this cluster, as ``catalog_uri`` takes it."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        """Create a database (once)."""
        _run([str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name])

    def ensure_database(self, name: str) -> None:
        """Create a database unless it exists; running it twice is harmless."""
        if name not in self.databases():
            self.create_database(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, closing its connections first (as a test run's scratch catalog ends)."""
        _run([str(self.bin_dir / "dropdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "--force", name])

    def databases(self) -> set[str]:
        """Names of the databases in this cluster."""
        query = "SELECT datname FROM pg_database"
        out = _run(
            [str(self.bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-Atc", query]
        )
        return set(out.split())

    def running(self) -> bool:
        """Whether the server of this data folder is up (``pg_ctl status``)."""
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        status = subprocess.run(
            [*prefix, str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "status"], capture_output=True
        )
        return status.returncode == 0

    def pid(self) -> int | None:
        """The postmaster's process id, from its pid file, while it runs."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            return int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def halt(self) -> None:
        """Stop the server, keeping its files: clients see it go away, as in an outage."""
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "stop"])

    def restart(self) -> None:
        """Start the halted server again, on the same port."""
        _start(self.bin_dir, self.data_dir, self.port)

    def stop(self) -> None:
        """Stop the server at once and delete its files."""
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop"])
        shutil.rmtree(self.data_dir, ignore_errors=True)


def server_bin_dir() -> Path | None:
    """The newest installed PostgreSQL server's bin folder, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def start_local_postgres() -> LocalPostgres:
    """Create a fresh cluster with initdb in a temporary folder and start it on a free port."""
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL server binaries; run `make system` or apt-get install postgresql")
    data_dir = Path(tempfile.mkdtemp(prefix="icegroup-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(data_dir, user.pw_uid, user.pw_gid)
    port = _free_port()
    _run([str(bin_dir / "initdb"), "-D", str(data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
    _start(bin_dir, data_dir, port)
    return LocalPostgres(data_dir=data_dir, port=port, bin_dir=bin_dir)


def open_local_postgres(data_dir: Path, port: int) -> LocalPostgres:
    """The cluster kept in ``data_dir``, listening on ``port``: created on first use, started if it is down.

    This is the stack's PostgreSQL (``make stack-up``): its data survives ``stack-down``, so a second
    ``stack-up`` finds the same catalog and Dagster history.
    """
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL server binaries; run `make system` or apt-get install postgresql")
    if not (data_dir / "PG_VERSION").is_file():
        data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(data_dir, user.pw_uid, user.pw_gid)
        _run([str(bin_dir / "initdb"), "-D", str(data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
    cluster = LocalPostgres(data_dir=data_dir, port=port, bin_dir=bin_dir)
    if not cluster.running():
        _start(bin_dir, data_dir, port)
    return cluster


def _start(bin_dir: Path, data_dir: Path, port: int) -> None:
    options = f"-p {port} -k {data_dir} -c listen_addresses=127.0.0.1"
    _run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-o", options, "-l", str(data_dir / "log"), "-w", "start"])


def _run(command: list[str]) -> str:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    try:
        done = subprocess.run(prefix + command, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{' '.join(command)} failed: {(exc.stderr or exc.stdout).strip()}") from exc
    return done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
