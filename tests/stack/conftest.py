"""The stack tier runs only under ``make test-stack``, against the running stack."""

from __future__ import annotations

import pytest

from tests.integration.conftest import spark, spark_lakehouse
from tests.stack_env import on_stack

__all__ = ["spark", "spark_lakehouse"]  # the integration tier's session-wide Spark, on the stack's cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark this folder's tests; off the stack, skip them and say how to run them."""
    skip = pytest.mark.skip(reason="needs the scale-out stack: run `make test-stack`")
    for item in items:
        if "tests/stack/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.stack)
            if not on_stack():
                item.add_marker(skip)
