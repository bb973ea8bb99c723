"""The documentation site builds in strict mode (no warning, broken link or anchor), references generated."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from icegroup.dagster_project.cli.commands import parser
from icegroup.iceberg.config.lakehouse import LakehouseConfig

REPO = Path(__file__).resolve().parents[2]


def subcommands(top: argparse.ArgumentParser) -> list[str]:
    """Every command name ``icegroup --help`` lists."""
    return [
        name for action in top._actions if isinstance(action, argparse._SubParsersAction) for name in action.choices
    ]


def test_the_site_builds_strictly_with_the_generated_references(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
        check=False,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-8000:]
    assert "WARNING" not in log, log[-8000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for name in subcommands(parser()):
        assert f'id="icegroup-{name}"' in cli, name
    configuration = (site / "reference" / "configuration" / "index.html").read_text()
    for field in LakehouseConfig.model_fields:
        assert f"<code>{field}</code>" in configuration, field
