#!/usr/bin/env bash
# Copies the pinned ElasticMQ server (tools/elasticmq/pom.xml) and its
# dependencies from Maven Central into .elasticmq/lib, for the tests that
# need SQS message move tasks. Needs java and mvn (scripts/deps.sh installs
# them). Does nothing when the copied set matches the pom; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

pom=tools/elasticmq/pom.xml
lib=.elasticmq/lib
stamp=.elasticmq/installed.sha256
want=$(sha256sum "$pom" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && compgen -G "$lib/elasticmq-server_*.jar" >/dev/null; then
  exit 0
fi
echo "deps: ElasticMQ into $lib (Maven Central)"
rm -rf "$lib"
mvn -q -B -C -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DoutputDirectory="$PWD/$lib"
echo "$want" > "$stamp"
