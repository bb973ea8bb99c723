#!/usr/bin/env bash
# Builds icegroup-sqlite-jdbc.jar (see src/icegroup/jdbc/SqliteDriver.java for why it exists).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/icegroup-sqlite-jdbc.jar"
[ "$out" -nt "$here/src/icegroup/jdbc/SqliteDriver.java" ] && exit 0
command -v javac >/dev/null || { echo "javac missing: install a JDK 17 (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
tmp=$(mktemp -d)
javac --release 11 -d "$tmp" "$here/src/icegroup/jdbc/SqliteDriver.java"
cp -r "$here/src/META-INF" "$tmp/"
(cd "$tmp" && jar cf "$out" .)
rm -rf "$tmp"
echo "built $out"
