#!/usr/bin/env bash
# Builds icegroup-jvm.jar: the SQLite JDBC shim and the fenced sink commit (see their sources for why).
# Usage: build.sh PYTHON  (the venv's python, to find the Iceberg runtime jar to compile against)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/icegroup-jvm.jar"
py=${1:?usage: build.sh PYTHON}
newest=$(find "$here/src" -type f -newer "$out" 2>/dev/null | head -1 || true)
[ -f "$out" ] && [ -z "$newest" ] && exit 0
command -v javac >/dev/null || { echo "javac missing: install a JDK 17 (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
runtime=$("$py" -c "from spark_jobs.session import runtime_jar; print(runtime_jar())")
tmp=$(mktemp -d)
javac --release 11 -nowarn -cp "$runtime" -d "$tmp" $(find "$here/src" -name '*.java')
cp -r "$here/src/META-INF" "$tmp/"
(cd "$tmp" && jar cf "$out" .)
rm -rf "$tmp"
echo "built $out"
