"""An unreadable catalog is a clear error: the catalog, the cause and the remedy, exit 2, nothing retried forever."""

from __future__ import annotations

from pathlib import Path

import pytest

from icegroup.dagster_project.cli import Exit, main
from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.errors import CatalogUnavailable


def test_a_file_that_is_not_a_database_names_the_file_and_the_remedy(tmp_path: Path) -> None:
    (tmp_path / ".lake").mkdir()
    (tmp_path / ".lake" / "catalog.db").write_text("not a database at all")

    with pytest.raises(CatalogUnavailable) as info:
        load_lakehouse(env={"ICEGROUP_HOME": str(tmp_path)}).catalog()

    message = str(info.value)
    assert message.startswith(f"catalog_uri: catalog 'lake' at sqlite:///{tmp_path}/.lake/catalog.db cannot be opened")
    assert "file is not a database" in message
    assert "restore it from a backup, or point catalog_uri (ICEGROUP_CATALOG_URI) at the right file" in message


def test_a_database_that_is_down_names_the_server_and_hides_the_password(tmp_path: Path) -> None:
    env = {"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_CATALOG_URI": "postgresql+psycopg2://u:secret@127.0.0.1:1/lake"}

    with pytest.raises(CatalogUnavailable) as info:
        load_lakehouse(env=env).catalog()

    message = str(info.value)
    assert "postgresql+psycopg2://u:***@127.0.0.1:1/lake cannot be opened" in message
    assert "secret" not in message
    assert "Check that the database server is up and reachable" in message


def test_the_cli_says_so_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".lake").mkdir()
    (tmp_path / ".lake" / "catalog.db").write_bytes(b"\x00garbage" * 100)
    monkeypatch.setenv("ICEGROUP_HOME", str(tmp_path))

    assert main(["list"]) == Exit.ERROR == 2

    err = capsys.readouterr().err
    assert err.startswith("icegroup: error: catalog_uri: catalog 'lake'")
    assert "Traceback" not in err
