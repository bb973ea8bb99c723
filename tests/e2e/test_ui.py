"""The demo in the Dagster UI, opened in a real browser (Chromium, driven by Playwright), as an operator sees it.

After ``make demo``, under ``dagster dev``: each sink shows its three checks passing in the asset
graph, its row count and columns on its page and the sink snapshot as its data version; a row
deleted from the sink by hand fails ``exactly_once`` when it is run from the UI, naming the window
and the replay that mends it. The screenshots land in the test's folder, and in
``$ICEGROUP_SCREENSHOTS`` when set (``make screenshots`` writes the ones the docs show).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from dagster_graphql import DagsterGraphQLClient
from playwright.sync_api import Page, sync_playwright

from icegroup.dagster_project.group_files import DEFAULT_GROUPS
from icegroup.iceberg.config.lakehouse import load_lakehouse
from tests.conftest import repo_root
from tests.dagster_dev import dagster_dev, dagster_env, new_instance, ui_answers
from tests.stack_env import home_env

pytestmark = [pytest.mark.demo, pytest.mark.dagster]

CHROMIUM = "chromium"
SINKS = ("demo/events_enriched", "demo/events_large")


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[str]:
    """The demo's lake and instance, after ``icegroup.infra.demo``, under ``dagster dev``; yields the UI's address."""
    new_instance(tmp_path / "dagster")
    # The demo's groups with no warm Borrower: the browser judges the asset pages, and two idle JVMs
    # beside it on two cores would only slow it (tests/e2e/test_daemon.py judges warm Borrowers).
    groups = yaml.safe_load(DEFAULT_GROUPS.read_text())
    groups["groups"] = [{**group, "warm_borrowers": 0} for group in groups["groups"]]
    (tmp_path / "groups.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    env = dagster_env(tmp_path, tmp_path / "groups.yaml", tmp_path / "dagster")
    env.pop("ICEGROUP_OPENLINEAGE_FILE", None)
    demo = subprocess.run(
        [sys.executable, "-m", "icegroup.infra.demo"],
        cwd=repo_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    with dagster_dev(env, tmp_path / "dev.log") as port:
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        deadline = time.monotonic() + 120
        while not ui_answers(client):
            assert time.monotonic() < deadline, f"the UI did not answer in 120 s; see {tmp_path / 'dev.log'}"
            time.sleep(1)
        yield f"http://127.0.0.1:{port}"


def shot(page: Page, folder: Path, name: str) -> None:
    """Screenshot the page into the test's folder, and into ``$ICEGROUP_SCREENSHOTS`` when set."""
    page.screenshot(path=str(folder / name))
    wanted = os.environ.get("ICEGROUP_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / name, Path(wanted) / name)


def test_the_demo_in_a_browser_shows_checks_row_counts_schema_and_versions_and_a_deleted_row_fails_the_check(
    ui: str, tmp_path: Path
) -> None:
    chromium = shutil.which(CHROMIUM)
    assert chromium is not None, "Chromium is missing: `make system` installs it (Debian package chromium)"
    window = datetime.now(UTC).date().isoformat()
    catalog = load_lakehouse(env=home_env(tmp_path)).catalog()
    head = catalog.load_table("demo.events_enriched").current_snapshot()
    assert head is not None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        # Dagster's one-time newsletter prompt covers the page whenever it comes up, seconds after a
        # load or much later: closed before any action it would block.
        page.add_locator_handler(page.get_by_role("button", name="Skip"), lambda skip: skip.click())

        page.goto(f"{ui}/assets/lake/demo/events_enriched?view=lineage")
        page.get_by_text("3 / 3 Passed").nth(len(SINKS) - 1).wait_for(timeout=90_000)
        shot(page, tmp_path, "asset-graph-checks.png")

        page.goto(f"{ui}/assets/lake/demo/events_enriched?view=overview")
        page.get_by_text("Row count").wait_for(timeout=30_000)
        overview = page.inner_text("body")
        assert "27,000" in overview, "the sink's row count"
        assert "Columns" in overview
        assert "amount_cents" in overview, "and its columns"
        shot(page, tmp_path, "sink-overview.png")

        page.goto(f"{ui}/assets/lake/demo/events_enriched?view=events")
        page.get_by_text(window).first.click(timeout=30_000)
        page.get_by_text("Show tags").first.click(timeout=30_000)
        tags = page.inner_text("body")
        assert re.search(rf"data_version\s+{head.snapshot_id}", tags), "the replay's sink snapshot is its data version"

        catalog.load_table("demo.events_enriched").delete("event_id = 7")
        page.goto(f"{ui}/assets/lake/demo/events_enriched?view=checks")
        page.get_by_text("exactly_once").first.click(timeout=30_000)
        page.locator("button").filter(has_text=re.compile(r"^\s*Execute\s*$")).first.click(timeout=30_000)
        page.get_by_text("Failed", exact=True).first.wait_for(timeout=180_000)
        page.wait_for_timeout(1000)
        failed = page.inner_text("body")
        assert f"window {window} of group demo: " in failed, "the check names the window"
        assert f"icegroup replay demo --window {window} --execute" in failed, "and the replay that mends it"
        shot(page, tmp_path, "exactly-once-failed.png")
        browser.close()
