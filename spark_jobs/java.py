"""Finding the Java that Spark will start, so that a machine without one gets the remedy instead of a JVM trace.

PySpark starts its JVM with ``spark-submit``, which runs ``$JAVA_HOME/bin/java`` when ``JAVA_HOME``
is set and the first ``java`` on ``PATH`` otherwise. With neither, PySpark fails with
``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number``, which names
no cause. icegroup looks the same way first and says what is missing and where it looked.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from icegroup.iceberg.errors import ConfigError

JAVA_NEEDED = "Spark needs Java 17 (Spark 3.5 also runs on Java 11, Spark 4.0 needs 17 or newer)"


def spark_java(env: Mapping[str, str] | None = None) -> str | None:
    """The ``java`` that ``spark-submit`` would run, or None when there is none."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java", path=env.get("PATH", ""))


def check_java(env: Mapping[str, str] | None = None) -> None:
    """Refuse to start Spark without a Java, saying where icegroup looked and how to fix it."""
    env = os.environ if env is None else env
    if spark_java(env) is not None:
        return
    home = env.get("JAVA_HOME")
    looked = f"JAVA_HOME is {home}, which has no bin/java" if home else "JAVA_HOME is not set and no java is on PATH"
    raise ConfigError(
        f"java: {JAVA_NEEDED}, and none was found ({looked}). Install a JDK 17 (Debian: apt-get install "
        "openjdk-17-jre-headless; in a checkout, make system) and set JAVA_HOME to it or put its bin on PATH"
    )


def gateway_exited(exc: BaseException) -> ConfigError:
    """The error for a JVM that would not start although a ``java`` was found: its own output says why."""
    return ConfigError(
        f"java: the Spark JVM ({spark_java() or 'java'}) exited before it started ({exc}). {JAVA_NEEDED}; the lines "
        "Java printed above say what went wrong. Check `java -version`, or set JAVA_HOME to a JDK 17"
    )
