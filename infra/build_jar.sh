#!/usr/bin/env bash
# Builds one of icegroup's jars from its Java sources, when a source is newer than the jar.
# Usage: build_jar.sh SRC_DIR OUT_JAR PYTHON [EXTRA_CLASSPATH]
#   SRC_DIR          a folder of .java files (and an optional META-INF/)
#   OUT_JAR          the jar to write
#   PYTHON           the venv's python, to find the Iceberg runtime jar to compile against
#   EXTRA_CLASSPATH  optional: more jars to compile against, ':'-separated (the REST catalog needs Hadoop's)
set -euo pipefail
src=${1:?usage: build_jar.sh SRC_DIR OUT_JAR PYTHON}
out=${2:?usage: build_jar.sh SRC_DIR OUT_JAR PYTHON}
py=${3:?usage: build_jar.sh SRC_DIR OUT_JAR PYTHON}
extra=${4:-}
out=$(realpath -m "$out")
newest=$(find "$src" -type f -newer "$out" 2>/dev/null | head -1 || true)
[ -f "$out" ] && [ -z "$newest" ] && exit 0
command -v javac >/dev/null || { echo "javac missing: install a JDK 17 (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
runtime=$("$py" -c "from spark_jobs.session import runtime_jar; print(runtime_jar())")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
javac --release 11 -nowarn -cp "$runtime${extra:+:$extra}" -d "$tmp" $(find "$src" -name '*.java')
[ -d "$src/META-INF" ] && cp -r "$src/META-INF" "$tmp/"
(cd "$tmp" && jar cf "$out" .)
echo "built $out"
