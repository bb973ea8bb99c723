"""``icegroup metrics``: the groups' lag, rates, leases, dead letters, heartbeats and Leader ticks for Prometheus.

Three ways to hand them over, as Prometheus exporters do: print the exposition once, serve it over
HTTP for Prometheus to scrape (``--serve``), or write it to a file for node_exporter's textfile
collector (``--textfile``, atomically, once or ``--every`` N seconds). Every scrape or write
describes the groups afresh (``iceberg/metrics.py``); the Leader's ticks come from the sensors'
cursors in the Dagster instance.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from icegroup.dagster_project.cli.arguments import Commands, command
from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.support import dagster_home, pick
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.group import GroupConfig

if TYPE_CHECKING:
    from icegroup.iceberg.metrics import LeaderTick

log = logging.getLogger(__name__)


def add_metrics(sub: Commands) -> None:
    """The ``metrics`` command's arguments."""
    metrics = command(
        sub, "metrics",
        "the groups' lag, rates, leases, dead letters, heartbeats and Leader ticks, as Prometheus metrics",
    )  # fmt: skip
    metrics.add_argument("group", nargs="*", help="only these groups (default: every group)")
    how = metrics.add_mutually_exclusive_group()
    how.add_argument("--serve", type=int, metavar="PORT", help="serve /metrics on PORT until interrupted")
    how.add_argument(
        "--textfile", type=Path, metavar="PATH", help="write them to PATH (a .prom file) for node_exporter"
    )
    metrics.add_argument("--host", default="127.0.0.1", help="with --serve: the address to listen on (%(default)s)")
    metrics.add_argument(
        "--every", type=float, metavar="S", help="with --textfile: write again every S seconds until interrupted"
    )
    metrics.set_defaults(run=cmd_metrics)


def cmd_metrics(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup metrics [GROUP ...] [--serve PORT | --textfile PATH [--every S]]``.

    The Prometheus client and the Dagster instance are imported here, so other commands start without them.
    """
    from prometheus_client import CollectorRegistry, generate_latest, start_http_server, write_to_textfile

    from icegroup.iceberg.metrics import GroupCollector

    chosen = {name: pick(groups, name, args.groups) for name in args.group} if args.group else groups
    if args.every is not None and (args.textfile is None or args.every <= 0):
        raise UsageError("--every: give it with --textfile, as a number of seconds above 0 (e.g. --every 15)")
    home = dagster_home(create=False)
    registry = CollectorRegistry()
    registry.register(GroupCollector(lakehouse.catalog, chosen, lambda: leader_ticks(home, chosen)))
    if args.serve is not None:
        server, _ = start_http_server(args.serve, addr=args.host, registry=registry)
        print(f"serving the metrics of {len(chosen)} groups on http://{args.host}:{server.server_port}/metrics")
        wait_forever()
    elif args.textfile is not None:
        while True:
            write_to_textfile(str(args.textfile), registry)
            if args.every is None:
                print(f"wrote the metrics of {len(chosen)} groups to {args.textfile}")
                break
            time.sleep(args.every)
    else:
        print(generate_latest(registry).decode(), end="")
    return Exit.OK


def wait_forever() -> None:
    """Keep the serving process alive until it is interrupted (the server runs on a daemon thread)."""
    while True:
        time.sleep(3600)


def leader_ticks(home: Path, groups: Mapping[str, GroupConfig]) -> dict[str, LeaderTick]:
    """Each group's last Leader tick, from its sensor's state in the Dagster instance at ``home``."""
    from icegroup.dagster_project.runs.execute import open_instance
    from icegroup.dagster_project.tick_events import LeaderCursor
    from icegroup.iceberg.metrics import LeaderTick

    by_sensor = {f"{name}_leader": name for name in groups}
    ticks: dict[str, LeaderTick] = {}
    if not home.is_dir():
        return ticks  # no instance: no tick was ever recorded, and reading must not create one
    with open_instance(home) as instance:
        for state in instance.all_instigator_state():
            group = by_sensor.get(state.instigator_name)
            data = state.sensor_instigator_data if group is not None else None
            if group is None or data is None or not data.last_tick_timestamp:
                continue
            if group in ticks and ticks[group].at_s >= data.last_tick_timestamp:
                continue  # the same sensor in another code location, ticked earlier
            tick_ms = LeaderCursor.read(data.cursor).tick_ms
            ticks[group] = LeaderTick(data.last_tick_timestamp, None if tick_ms is None else tick_ms / 1000)
    return ticks
