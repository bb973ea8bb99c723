"""``icegroup metrics``: the Prometheus exposition, scraped over HTTP while a group consumes.

The server is the one the command starts (``prometheus_client``'s, on a free port); a thread
scrapes it as Prometheus would while ``icegroup consume`` runs the group's leases one after
another, and the lag it reads must fall to 0, never rise, and pass through values between.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.cli import main as icegroup_main
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.metrics import GroupCollector, LeaderTick
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, create_source, write_groups

pytestmark = [pytest.mark.spark, pytest.mark.dagster]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One scrape: each sample by its name and labels."""
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_scrape_during_a_consume_sees_the_lag_fall_to_zero(
    spark: SparkSession,
    env: Path,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
) -> None:
    group = make_group(shard_caps={"max_files": 1}, lease_max_shards=1, commit_batch_rows=0)
    rows = append_batches(create_source(catalog, group.source), 6, 10)
    groups = write_groups(tmp_path / "groups.yaml", group)
    registry = CollectorRegistry()
    ticked = {group.name: LeaderTick(at_s=0.0, tick_s=0.25)}
    registry.register(GroupCollector(lakehouse.catalog, {group.name: group}, lambda: ticked))
    server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    key = ("icegroup_lag_rows", (("group", group.name),))
    try:
        before = scrape(url)
        seen: list[float] = []
        exposed: set[str] = set()
        done = threading.Event()

        def scraper() -> None:
            while not done.is_set():
                samples = scrape(url)
                seen.append(samples.get(key, -1.0))  # a scrape without the group's lag fails the test below
                exposed.update(name for name, _ in samples)

        thread = threading.Thread(target=scraper)
        thread.start()
        try:
            assert icegroup_main(["--groups", str(groups), "consume", group.name, "--until-caught-up"]) == 0
        finally:
            done.set()
            thread.join()
        after = scrape(url)
    finally:
        server.shutdown()

    assert before[key] == rows, "before the consume, every appended row is lag"
    assert before[("icegroup_lag_snapshots", (("group", group.name),))] == 6 * 3, "6 appends, each in 3 streams"
    assert before[("icegroup_lag_age_seconds", (("group", group.name),))] > 0
    assert before[("icegroup_state", (("group", group.name), ("icegroup_state", "lagging")))] == 1
    assert after[key] == 0, "caught up: no lag left"
    assert after[("icegroup_lag_age_seconds", (("group", group.name),))] == 0
    assert after[("icegroup_state", (("group", group.name), ("icegroup_state", "caught up")))] == 1
    assert sum(v for (name, _), v in after.items() if name == "icegroup_committed_rows_total") == rows
    assert after[("icegroup_leader_tick_seconds", (("group", group.name),))] == 0.25
    assert after[("icegroup_up", (("group", group.name),))] == 1
    assert len(seen) >= 3, f"the scraper ran through the consume: {seen}"
    assert min(seen) >= 0, f"every scrape held the group's lag: {seen}"
    assert seen == sorted(seen, reverse=True), f"the lag never rises while nothing is appended: {seen}"
    assert any(0 < value < rows for value in seen), f"a scrape saw the lag part way down: {seen}"
    assert dashboard_metrics() - exposed == set(), "every metric the Grafana dashboard plots is exposed, some in flight"


def dashboard_metrics() -> set[str]:
    """The metric names the Grafana dashboard's queries use."""
    dashboard = json.loads((repo_root() / "infra" / "grafana" / "icegroup.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(exprs) >= 10
    return {name for expr in exprs for name in re.findall(r"\bicegroup_[a-z_]+", expr)}


def test_the_command_writes_a_textfile_and_refuses_every_without_it(
    env: Path,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 10)
    groups = write_groups(tmp_path / "groups.yaml", group)
    prom = tmp_path / "icegroup.prom"

    assert icegroup_main(["--groups", str(groups), "metrics", "--textfile", str(prom)]) == 0
    text = prom.read_text()
    assert f'icegroup_lag_rows{{group="{group.name}"}} 20.0' in text
    assert "# TYPE icegroup_lag_rows gauge" in text
    assert icegroup_main(["--groups", str(groups), "metrics", "--every", "5"]) == 2
    assert "--every: give it with --textfile" in capsys.readouterr().err
