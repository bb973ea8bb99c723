"""On the stack started with ``make stack-up CATALOG=nessie``, icegroup refuses Nessie's tables before touching them.

Nessie's Iceberg REST endpoint keeps only a table's current snapshot in its metadata, so a group's
position and its exactly-once record cannot be read back (``iceberg/protocol/table_history.py``).
The source is made here through the stack's own lakehouse config, as a user would, with rows in the
stack's S3 bucket; then ``icegroup consume`` must exit 2, name Nessie, and leave the catalog as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.io import load_file_io

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.config.lakehouse import load_lakehouse
from tests.conftest import repo_root
from tests.factories import MakeGroup, create_source, events, write_groups
from tests.stack_env import stack_layout

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))

pytestmark = pytest.mark.skipif(
    not os.environ.get("ICEGROUP_TEST_STACK") or stack_layout().catalog != "nessie",
    reason="needs the stack on Nessie: make test-stack CATALOG=nessie",
)


def test_icegroup_consume_refuses_a_nessie_source_and_writes_nothing(tmp_path: Path, make_group: MakeGroup) -> None:
    lakehouse = load_lakehouse()
    catalog = lakehouse.catalog()
    group = make_group()
    source = create_source(catalog, group.source)
    # Nessie hands pyiceberg an fsspec FileIO (s3fs, which icegroup does not install); write with pyarrow's.
    source.io = load_file_io(
        {**lakehouse.pyiceberg_s3_properties(), "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    )
    source.append(events(1, 50, seed=7))
    source.append(events(51, 50, seed=8))
    assert len(catalog.load_table(group.source).snapshots()) == 1, "Nessie kept only the current snapshot"
    namespaces = sorted(catalog.list_namespaces())

    done = subprocess.run(
        [ICEGROUP, "--groups", str(write_groups(tmp_path / "groups.yaml", group)), "consume", group.name],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == Exit.ERROR, done.stdout + done.stderr
    assert f"source: table {group.source!r}" in done.stderr
    assert "Project Nessie" in done.stderr
    assert sorted(catalog.list_namespaces()) == namespaces, "no registry, sink or lineage table was made"
