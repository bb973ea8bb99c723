#!/usr/bin/env bash
# Builds icegroup's Java with Maven, against the Iceberg API of the runtime in use, when a source is newer
# than its jar: spark_jobs/sink/jvm (the fenced commit, lineage's file reference and the SQLite shim: icegroup-spark.jar, the one jar
# the wheel carries) and infra/rest_catalog (the stack's REST server, with its runtime jars in lib/); then it
# copies the classpath of Iceberg's REST test fixture (infra/rest_fixture/pom.xml) into infra/rest_fixture/lib.
# Usage: build_jvm.sh ICEBERG_VERSION SPARK_RUNTIME   (e.g. 1.10.1 3.5_2.12)
set -euo pipefail
iceberg=${1:?usage: build_jvm.sh ICEBERG_VERSION SPARK_RUNTIME}
runtime=${2:?usage: build_jvm.sh ICEBERG_VERSION SPARK_RUNTIME}
command -v mvn >/dev/null || { echo "mvn missing: run make system (apt-get install maven)" >&2; exit 1; }
stamp_of() { echo "$iceberg $runtime"; }

build() {  # MODULE_DIR JAR [GOALS...]
  local dir=$1 jar=$2; shift 2
  local stamp="$dir/target/.built-for"
  if [ -f "$jar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(stamp_of)" ] \
     && [ -z "$(find "$dir/src" "$dir/pom.xml" -newer "$jar" -type f | head -1)" ]; then
    return 0
  fi
  rm -rf "$dir/lib"
  mvn -q -B -f "$dir/pom.xml" -Diceberg.version="$iceberg" -Dspark.runtime="$runtime" clean package "$@"
  stamp_of >"$stamp"
  echo "built $jar (Iceberg $iceberg, Spark runtime $runtime)"
}

build spark_jobs/sink/jvm spark_jobs/sink/jvm/target/icegroup-spark.jar
cp -p spark_jobs/sink/jvm/target/icegroup-spark.jar spark_jobs/sink/jvm/icegroup-spark.jar
build infra/rest_catalog infra/rest_catalog/target/icegroup-rest-catalog.jar dependency:copy-dependencies

fixture=infra/rest_fixture
if [ "$(cat "$fixture/lib/.copied-for" 2>/dev/null)" != "$iceberg" ] || [ "$fixture/pom.xml" -nt "$fixture/lib/.copied-for" ]; then
  rm -rf "$fixture/lib"
  mvn -q -B -f "$fixture/pom.xml" -Diceberg.version="$iceberg" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory=lib
  echo "$iceberg" >"$fixture/lib/.copied-for"
  echo "copied the classpath of Iceberg's REST fixture $iceberg into $fixture/lib"
fi
