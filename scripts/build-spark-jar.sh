#!/usr/bin/env bash
# Build the Spark source's JVM read path (jvm/src/main) into src/gregor/spark/jars/gregor-spark.jar,
# which gregor.spark.session puts on spark.jars and git ignores: built jars are never committed.
# It compiles against the jars of the PySpark installed in .venv, so the classes match the Spark
# that loads them; javac --release 17 keeps them loadable by any JVM Spark 4 runs on.
#
# Runs only when needed: the jar's sibling .built holds a hash of the sources, this script and
# the PySpark version, and nothing is compiled while it matches. Without javac it says so and
# exits 0: gregor.spark.register() then falls back to the Python data source.
set -euo pipefail
cd "$(dirname "$0")/.."
out=src/gregor/spark/jars
jar_file="$out/gregor-spark.jar"
if ! command -v javac >/dev/null 2>&1 || ! command -v jar >/dev/null 2>&1; then
  echo "note: no JDK (javac, jar) found, so the Spark source's JVM read path is not built;" \
       "format(\"gregor\") reads through the slower Python data source. Install a JDK 17+" \
       "(Debian: apt-get install openjdk-17-jdk-headless) and run scripts/build-spark-jar.sh" >&2
  exit 0
fi
spark_home=$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' \
  2>/dev/null) || {
  echo "error: PySpark is not installed in .venv: run scripts/setup.sh spark first" >&2
  exit 1
}
spark_version=$(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)')
mapfile -t sources < <(find jvm/src/main -type f | LC_ALL=C sort)
digest=$({ echo "$spark_version"; sha256sum scripts/build-spark-jar.sh "${sources[@]}"; } \
  | sha256sum | cut -c1-16)
if [ -f "$jar_file" ] && [ "$(cat "$out/.built" 2>/dev/null)" = "$digest" ]; then
  exit 0
fi
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
classpath=$(find "$spark_home/jars" -name '*.jar' | LC_ALL=C sort | tr '\n' :)
mapfile -t java_sources < <(find jvm/src/main/java -name '*.java' | LC_ALL=C sort)
# -Xlint:all except "processing" (no annotation processors here), "serial" (Spark's
# interfaces extend Serializable; a serialVersionUID on each class would be noise) and "path"
# (some of PySpark's jars name jars in their manifests' Class-Path that it does not ship).
javac --release 17 -encoding UTF-8 -Xlint:all,-processing,-serial,-path -Werror \
  -cp "$classpath" -d "$classes" "${java_sources[@]}"
cp -r jvm/src/main/resources/. "$classes/"
mkdir -p "$out"
jar --create --file "$jar_file.tmp" -C "$classes" .
mv "$jar_file.tmp" "$jar_file"
echo "$digest" > "$out/.built"
echo "built the Spark source's JVM read path into $jar_file" >&2
