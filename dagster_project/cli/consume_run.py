"""The run ``icegroup consume`` makes: the group's consume job, executed here in the Dagster instance."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TextIO

from icegroup.dagster_project.cli.progress import ConsumeBars
from icegroup.dagster_project.cli.support import dagster_home
from icegroup.dagster_project.definitions import build_definitions
from icegroup.dagster_project.runs.execute import execute, open_instance
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.spark_jobs.consume import WAITS


def run_consume(
    args: argparse.Namespace,
    lakehouse: LakehouseConfig,
    groups: dict[str, GroupConfig],
    group: GroupConfig,
    terminal: TextIO,
) -> tuple[str, bool]:
    """Execute ``<group>_consume`` as a run of the instance, with progress bars on a terminal.

    Returns the run's id and whether it succeeded; a run that failed unexpectedly raises ``RunFailed``.
    The caller has pointed stderr at the command's log file (``cli/logfile.py``), so the bars are
    drawn on ``terminal``, the stderr it had.
    """
    home = dagster_home()
    job = build_definitions(groups, lakehouse.catalog_name, args.lakehouse).resolve_job_def(f"{group.name}_consume")
    run_config = {
        "loggers": {"console": {"config": {"log_level": "INFO"}}},
        "ops": {
            f"{group.name}_consume_op": {
                "config": {
                    "until_caught_up": args.until_caught_up or args.follow,
                    "max_wait_s": args.max_wait,
                    "follow": args.follow,
                    "poll_s": args.poll,
                }
            }
        },
    }
    tty = terminal.isatty() and not args.json
    bars = ConsumeBars(lakehouse.catalog(), group, terminal) if tty else nullcontext()
    with open_instance(home) as instance, bars, waits_on(terminal):
        result = execute(job, instance, home, run_config=run_config)
    return result.run_id, result.success


@contextmanager
def waits_on(terminal: TextIO) -> Iterator[None]:
    """Print the run's waits (``spark_jobs.consume.WAITS``: an outage, a reset in flight) on the terminal, as they come.

    The run's own log goes to the command's log file, so without this a consume with its output in
    a file said nothing for as long as the catalog was down.
    """
    handler = logging.StreamHandler(terminal)
    handler.setFormatter(logging.Formatter("icegroup: %(message)s"))
    WAITS.addHandler(handler)
    try:
        yield
    finally:
        WAITS.removeHandler(handler)
