"""Every console example in README.md and docs/ still prints output of the shape it shows (tests/docs/console.py).

Each page is one scenario run in a fresh folder, with the checkout's virtualenv first on ``PATH``.
A page whose examples consume, replay or otherwise run Spark is marked ``spark`` (and ``dagster``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.docs.console import console_pages, parse_page, run_page, scenario_env

REPO = Path(__file__).resolve().parents[2]
# Pages a new user follows with the installed wheel: tests/package/test_wheel.py runs them that way, so
# running them again here with the checkout's virtualenv would only cost CI time.
WHEEL_PAGES = {Path("docs/tutorial.md")}
# Commands that start Spark or a Dagster run; a page running any of them is a slow page.
HEAVY = re.compile(
    r"\bicegroup\s+(?:\S+\s+)*?(?:consume|replay|rebuild|reset|expire|redrive|migrate|delete)\b|\bmake\s|\bdg\s|\bdagster\s"
)


def _page_params() -> list[object]:
    params: list[object] = []
    for page in console_pages(REPO):
        heavy = bool(HEAVY.search(page.read_text()))
        marks = [pytest.mark.spark, pytest.mark.dagster] if heavy else []
        if page.relative_to(REPO) in WHEEL_PAGES:
            marks.append(pytest.mark.skip(reason="run from the installed wheel, outside the checkout (tests/package)"))
        params.append(pytest.param(page, id=str(page.relative_to(REPO)), marks=marks))
    return params


def _skip_params() -> list[object]:
    params: list[object] = []
    for page in console_pages(REPO):
        where = page.relative_to(REPO)
        for block in parse_page(page.read_text(), source=str(where)):
            if block.skip is not None:
                params.append(pytest.param(f"{where}:{block.line}", block.skip, id=f"{where}:{block.line}"))
    return params


@pytest.mark.parametrize("page", _page_params())
def test_console_examples_still_have_their_shape(page: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    mismatches = run_page(page, work, scenario_env(tmp_path / "env", path))
    assert not mismatches, "\n\n".join(mismatches)


@pytest.mark.parametrize(("where", "reason"), _skip_params())
def test_skipped_console_block(where: str, reason: str) -> None:
    pytest.skip(f"{where}: console block not run: {reason}")
