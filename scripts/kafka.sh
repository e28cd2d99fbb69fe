#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft) on localhost, from Maven Central, no Docker.
#
#   scripts/kafka.sh start    fetch (once, cached), format storage (once), start, wait ready
#   scripts/kafka.sh stop     stop the broker started by this script
#   scripts/kafka.sh status   print whether it runs and answers
#   scripts/kafka.sh fetch    only download the jars
#
# Environment: KAFKA_VERSION (default 4.0.1), KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093),
# DPSTREAM_KAFKA_HOME (jar cache, default ~/.cache/dpstream/kafka-<version>),
# DPSTREAM_KAFKA_STATE (logs and data, default /tmp/dpstream-kafka-<port>), PYTHON (for the
# readiness check; default: the repo's .venv, else python3).
# Facts relied on (design.md section 3): node id 1 with roles broker,controller; PLAINTEXT on
# 9092 and CONTROLLER on 9093; quorum voter 1@localhost:9093; replication factor 1 and min ISR 1
# for the offsets and transaction-state topics; storage formatted once with a cluster id.
set -euo pipefail

VERSION="${KAFKA_VERSION:-4.0.1}"
PORT="${KAFKA_PORT:-9092}"
CPORT="${KAFKA_CONTROLLER_PORT:-9093}"
HOME_DIR="${DPSTREAM_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/dpstream/kafka-$VERSION}"
STATE="${DPSTREAM_KAFKA_STATE:-/tmp/dpstream-kafka-$PORT}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
else PY=python3; fi
LIBS="$HOME_DIR/libs"

die() { echo "kafka.sh: $*" >&2; exit 1; }

need_tools() {
  command -v java >/dev/null || die "Java is missing: install a JDK >= 17 (Debian: apt-get install openjdk-17-jre-headless)"
  command -v mvn >/dev/null || die "Maven is missing: install it (Debian: apt-get install maven)"
}

fetch() {
  [ -f "$LIBS/.complete" ] && return 0
  need_tools
  mkdir -p "$HOME_DIR"
  cat > "$HOME_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dpstream</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
  echo "kafka.sh: fetching Apache Kafka $VERSION and its runtime jars into $LIBS" >&2
  mvn -q -B -f "$HOME_DIR/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$LIBS" || die "mvn could not fetch org.apache.kafka:kafka_2.13:$VERSION"
  touch "$LIBS/.complete"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running() { [ -f "$STATE/kafka.pid" ] && kill -0 "$(cat "$STATE/kafka.pid")" 2>/dev/null; }

metadata_ok() {
  # A metadata request through aiokafka when the interpreter has it; else the open port.
  "$PY" -c "import aiokafka" 2>/dev/null || { port_open "$PORT"; return; }
  "$PY" - "$PORT" <<'PYEOF' 2>/dev/null
import asyncio, sys
from aiokafka.admin import AIOKafkaAdminClient
async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{sys.argv[1]}", request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.list_topics()
    finally:
        await admin.close()
asyncio.run(main())
PYEOF
}

write_config() {
  mkdir -p "$STATE/data"
  cat > "$STATE/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$STATE/data
num.partitions=4
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
PROPS
  cat > "$STATE/log4j2.properties" <<LOG
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $STATE/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
LOG
}

start() {
  if running && port_open "$PORT"; then echo "kafka.sh: already running on 127.0.0.1:$PORT"; return 0; fi
  fetch
  need_tools
  write_config
  local cp="$LIBS/*"
  if [ ! -f "$STATE/data/meta.properties" ]; then
    local cid
    cid=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    java -cp "$cp" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool \
      format -t "$cid" -c "$STATE/server.properties" >"$STATE/format.log" 2>&1 \
      || { cat "$STATE/format.log" >&2; die "storage format failed"; }
  fi
  nohup java -Xmx512m -Xms256m -XX:+UseG1GC -cp "$cp" \
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" \
    kafka.Kafka "$STATE/server.properties" >"$STATE/stdout.log" 2>&1 &
  echo $! > "$STATE/kafka.pid"
  for _ in $(seq 1 120); do
    if port_open "$PORT" && metadata_ok; then
      echo "kafka.sh: Kafka $VERSION ready on 127.0.0.1:$PORT (state in $STATE)"; return 0
    fi
    running || { tail -n 40 "$STATE/stdout.log" "$STATE/server.log" >&2 2>/dev/null; die "broker exited during start"; }
    sleep 1
  done
  die "broker did not answer a metadata request within 120 s (see $STATE/server.log)"
}

stop() {
  if running; then
    local pid; pid=$(cat "$STATE/kafka.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "kafka.sh: stopped"
  fi
  rm -f "$STATE/kafka.pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  fetch) fetch ;;
  status) if running && port_open "$PORT"; then echo "running on 127.0.0.1:$PORT"; else echo "not running"; exit 1; fi ;;
  reset) stop; rm -rf "$STATE" ;;
  *) echo "usage: $0 start|stop|status|fetch|reset" >&2; exit 2 ;;
esac
