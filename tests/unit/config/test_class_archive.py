"""The driver's class archive: which archive a session maps in, and that Java shrugs off one that does not fit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from icegroup.iceberg.config.lakehouse import ENV_HOME, load_lakehouse
from icegroup.infra.class_archive import lakehouse_in
from icegroup.spark_jobs.class_archive import (
    DRIVER_OPTIONS,
    QUIET,
    SUBMIT_OPTIONS,
    archive_folder,
    archive_loads,
    archive_options,
    archive_path,
    keep_newest,
    recording_to,
    submit_options,
)
from icegroup.spark_jobs.jars import spark_jars_dir
from icegroup.spark_jobs.java import spark_java
from icegroup.spark_jobs.session import spark_conf

CONF = {"spark.jars": "/j/iceberg.jar,/j/icegroup-spark.jar", "spark.master": "local[*]"}


def test_the_archive_is_named_by_java_spark_and_jars_in_any_order(tmp_path: Path) -> None:
    path = archive_path(CONF, "/usr/bin/java", "3.5.8", tmp_path)
    reordered = {**CONF, "spark.jars": "/j/icegroup-spark.jar,/j/iceberg.jar"}

    assert path is not None
    assert path.parent == tmp_path
    assert archive_path(reordered, "/usr/bin/java", "3.5.8", tmp_path) == path
    assert archive_path(CONF, "/opt/jdk/bin/java", "3.5.8", tmp_path) != path
    assert archive_path(CONF, "/usr/bin/java", "4.0.1", tmp_path) != path
    assert archive_path({**CONF, "spark.jars": "/j/other.jar"}, "/usr/bin/java", "3.5.8", tmp_path) != path


def test_a_rebuilt_jar_gets_a_new_archive(tmp_path: Path) -> None:
    jar = tmp_path / "icegroup-spark.jar"
    jar.write_bytes(b"one")
    conf = {"spark.jars": str(jar)}
    before = archive_path(conf, "/usr/bin/java", "3.5.8", tmp_path)
    jar.write_bytes(b"rebuilt")

    assert archive_path(conf, "/usr/bin/java", "3.5.8", tmp_path) != before


def test_only_the_newest_archives_are_kept(tmp_path: Path) -> None:
    for n in range(5):
        archive = tmp_path / f"driver-{n}.jsa"
        archive.write_bytes(b"")
        os.utime(archive, ns=(n * 10**9, n * 10**9))

    deleted = keep_newest(tmp_path, 3)

    assert sorted(path.name for path in deleted) == ["driver-0.jsa", "driver-1.jsa"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["driver-2.jsa", "driver-3.jsa", "driver-4.jsa"]


def test_a_session_still_resolving_packages_has_no_archive(tmp_path: Path) -> None:
    resolving = {**CONF, "spark.jars.packages": "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2"}

    assert archive_path(resolving, "/usr/bin/java", "3.5.8", tmp_path) is None


def test_a_recorded_archive_is_mapped_in_unless_the_driver_options_already_decide(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"

    assert archive_options(CONF, archive) is None  # not recorded yet
    assert archive_options(CONF, None) is None
    archive.write_bytes(b"")
    assert archive_options(CONF, archive) == f"-XX:SharedArchiveFile={archive} {QUIET}"
    assert archive_options({**CONF, DRIVER_OPTIONS: "-Dmine=1"}, archive) is not None
    for theirs in ("-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/dump.jsa"):
        assert archive_options({**CONF, DRIVER_OPTIONS: f"-Dmine=1 {theirs}"}, archive) is None


def test_an_archive_path_with_whitespace_is_not_handed_to_spark(tmp_path: Path) -> None:
    archive = tmp_path / "my cache" / "driver.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"")

    assert archive_options(CONF, archive) is None


def test_the_archive_goes_before_the_users_own_submit_options_and_then_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SUBMIT_OPTIONS, "-Xmine")
    with submit_options("-XX:SharedArchiveFile=/a.jsa"):
        assert os.environ[SUBMIT_OPTIONS] == "-XX:SharedArchiveFile=/a.jsa -Xmine"
    assert os.environ[SUBMIT_OPTIONS] == "-Xmine"

    monkeypatch.delenv(SUBMIT_OPTIONS)
    with submit_options("-XX:SharedArchiveFile=/a.jsa"):
        assert os.environ[SUBMIT_OPTIONS] == "-XX:SharedArchiveFile=/a.jsa"
    assert SUBMIT_OPTIONS not in os.environ
    with submit_options(None):
        assert SUBMIT_OPTIONS not in os.environ


def test_the_recorder_and_a_session_in_another_home_name_the_same_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ICEGROUP_ICEBERG_VERSION", raising=False)
    java = "/usr/bin/java"
    recorder = archive_path(spark_conf(lakehouse_in(tmp_path / "a")), java, "3.5.8", tmp_path)
    session = archive_path(spark_conf(load_lakehouse(env={ENV_HOME: str(tmp_path / "b")})), java, "3.5.8", tmp_path)

    assert recorder == session


def test_recording_writes_the_archive_at_exit(tmp_path: Path) -> None:
    options = recording_to({**CONF, DRIVER_OPTIONS: "-Dmine=1"}, tmp_path / "dump.jsa")[DRIVER_OPTIONS]

    assert options.startswith(f"-Dmine=1 -XX:ArchiveClassesAtExit={tmp_path / 'dump.jsa'}")


def test_archives_live_in_the_users_cache(tmp_path: Path) -> None:
    assert archive_folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "icegroup" / "class-archives"
    assert archive_folder({}) == Path.home() / ".cache" / "icegroup" / "class-archives"


def recorded(java: str, archive: Path, jar: Path) -> Path:
    """A small real archive: Java's own start, recorded with ``jar`` on the class path."""
    subprocess.run(
        [java, f"-XX:ArchiveClassesAtExit={archive}", "-cp", str(jar), "-version"], check=True, capture_output=True
    )
    return archive


@pytest.fixture
def java() -> str:
    found = spark_java()
    if found is None:
        pytest.skip("no java on this machine")
    return found


def test_an_archive_checks_out_and_one_cut_short_is_refused(java: str, tmp_path: Path) -> None:
    jars = sorted(spark_jars_dir().glob("*.jar"))
    archive = recorded(java, tmp_path / "driver.jsa", jars[0])
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])

    assert archive_loads(java, archive)
    assert not archive_loads(java, cut)


def test_java_starts_quietly_from_an_archive_recorded_for_other_jars(java: str, tmp_path: Path) -> None:
    """A stale archive (another class path) costs nothing: Java starts, says nothing, and exits cleanly."""
    jars = sorted(spark_jars_dir().glob("*.jar"))
    archive = recorded(java, tmp_path / "driver.jsa", jars[0])
    command = [java, f"-XX:SharedArchiveFile={archive}", *QUIET.split(), "-cp", str(jars[1]), "-version"]

    done = subprocess.run(command, capture_output=True, text=True, timeout=60)

    assert done.returncode == 0
    assert "archive" not in (done.stdout + done.stderr).lower()
