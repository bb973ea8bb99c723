#!/usr/bin/env bash
# Installs from Debian what is missing: a JDK 17 and Maven (icegroup's Java is a Maven build; Spark's jars come
# from Maven Central by coordinates), and PostgreSQL and Chromium for the test tiers.
# Stops with a message naming what to install where it cannot (no apt-get, or not root).
set -euo pipefail

need=()
# A JDK, not just a JRE, and Maven: they build icegroup-spark.jar (spark_jobs/sink/jvm) and the stack's REST server.
if ! command -v java >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  need+=(openjdk-17-jdk-headless)
fi
command -v mvn >/dev/null 2>&1 || need+=(maven)
# A PostgreSQL server: the catalog beyond one machine, and the tests' PostgreSQL tier.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need+=(postgresql)
# A browser: the UI test (tests/e2e/test_ui.py) opens the Dagster UI in Chromium through Playwright.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  need+=(python3-venv)
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  echo "icegroup needs: ${need[*]}" >&2
  echo "Install them (Debian: sudo apt-get install ${need[*]}; any Java 17 runtime works), then re-run." >&2
  exit 1
fi
echo "installing from Debian: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if ! apt-get install -y -qq --no-install-recommends "${need[@]}"; then
  # Newer Debian releases ship another default JDK; Spark 3.5 runs on it too.
  apt-get install -y -qq --no-install-recommends "${need[@]/openjdk-17-jdk-headless/default-jdk-headless}"
fi
