"""Spark without Java: the error says what is missing, where icegroup looked, and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.java import check_java, spark_java


def test_no_java_home_and_no_java_on_path_is_refused_with_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        check_java({"PATH": str(tmp_path)})

    message = str(info.value)
    assert message.startswith("java: Spark needs Java 17")
    assert "JAVA_HOME is not set and no java is on PATH" in message
    assert "set JAVA_HOME" in message


def test_a_java_home_without_java_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"JAVA_HOME is {tmp_path}, which has no bin/java"):
        check_java({"JAVA_HOME": str(tmp_path), "PATH": ""})


def test_java_home_wins_over_path_as_spark_submit_has_it(tmp_path: Path) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "bin" / "java").chmod(0o755)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "java").write_text("#!/bin/sh\n")
    (other / "java").chmod(0o755)

    assert spark_java({"JAVA_HOME": str(home), "PATH": str(other)}) == str(home / "bin" / "java")
    assert spark_java({"PATH": str(other)}) == str(other / "java")
    check_java({"PATH": str(other)})
