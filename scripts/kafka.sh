#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft) on localhost, from Maven Central, no Docker.
#
#   scripts/kafka.sh start    fetch (once, cached), format storage (once), start, wait ready
#   scripts/kafka.sh stop     stop the broker started by this script
#   scripts/kafka.sh status   print whether it runs and answers
#   scripts/kafka.sh fetch    only download the jars
#   scripts/kafka.sh compose-secrets [DIR]   TLS material, users and configs for the
#                             secured docker-compose profile (default DIR: ./secrets)
#
# KAFKA_SECURE=1 starts a secured broker instead (default port 9094, controller 9095): one
# SASL_SSL listener (SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN over TLS), a local CA and a
# broker certificate for 127.0.0.1 / localhost made on the spot, the users admin, worker,
# producer, querier, consumer and auditor with random passwords (SCRAM credentials made
# at format time), and the StandardAuthorizer with allow.everyone.if.no.acl.found=false
# and admin as super user. Each user's client config (Kafka's standard property names,
# mode 0600) is written to $DPSTREAM_KAFKA_STATE/clients/<user>.properties, the CA to
# $DPSTREAM_KAFKA_STATE/tls/ca.pem. Give the users their rights with
# `dpstream acls --apply` (README, "Secure deployment"). The controller listener stays
# PLAINTEXT on 127.0.0.1, its ANONYMOUS principal a super user: a local development and
# test broker, not a production layout.
#
# Environment: KAFKA_VERSION (default 4.0.1), KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093),
# DPSTREAM_KAFKA_HOME (jar cache, default ~/.cache/dpstream/kafka-<version>),
# DPSTREAM_KAFKA_STATE (logs and data, default /tmp/dpstream-kafka-<port>), PYTHON (for the
# readiness check; default: the repo's .venv, else python3), KAFKA_GC_OPTS (the broker's
# collector options, default -XX:+UseZGC).
# Facts relied on (design.md section 3): node id 1 with roles broker,controller; PLAINTEXT on
# 9092 and CONTROLLER on 9093; quorum voter 1@localhost:9093; replication factor 1 and min ISR 1
# for the offsets and transaction-state topics; storage formatted once with a cluster id.
set -euo pipefail

VERSION="${KAFKA_VERSION:-4.0.1}"
SECURE="${KAFKA_SECURE:-0}"
if [ "$SECURE" = 1 ]; then
  PORT="${KAFKA_PORT:-9094}"; CPORT="${KAFKA_CONTROLLER_PORT:-9095}"
else
  PORT="${KAFKA_PORT:-9092}"; CPORT="${KAFKA_CONTROLLER_PORT:-9093}"
fi
USERS="admin worker producer querier consumer auditor"
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
  # A metadata request through aiokafka when the interpreter has it (as admin over
  # SASL_SSL on a secured broker); else the open port.
  "$PY" -c "import aiokafka" 2>/dev/null || { port_open "$PORT"; return; }
  local client=""
  [ "$SECURE" = 1 ] && client="$STATE/clients/admin.properties"
  "$PY" - "$PORT" "$client" <<'PYEOF' 2>/dev/null
import asyncio, sys
from dpstream.streams.kafka import Kafka
async def main():
    kafka = Kafka.from_settings(f"127.0.0.1:{sys.argv[1]}", sys.argv[2] or None, environ={})
    admin = kafka.admin(request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.list_topics()
    finally:
        await admin.close()
asyncio.run(main())
PYEOF
}

make_secrets() {
  # A CA, a broker certificate, a random password per user and each user's client config
  # (0600), once per directory. $1: TLS directory, $2: client config directory, $3: the
  # clients' bootstrap servers, $4: the CA path written into the client configs, $5...:
  # the broker's host names (its certificate's subject alternative names).
  local tls="$1" clients="$2" bootstrap="$3" ca_path="$4"; shift 4
  [ -f "$tls/broker.pem" ] && return 0
  mkdir -p "$tls" "$clients"
  chmod 700 "$tls" "$clients"
  "$PY" - "$tls" "$clients" "$bootstrap" "$ca_path" "$*" $USERS <<'PYEOF' || die "could not make the TLS material (needs the cryptography package)"
import datetime, ipaddress, os, secrets, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
tls, clients, bootstrap, ca_path, hosts, users = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split(), sys.argv[6:]
now = datetime.datetime.now(datetime.timezone.utc)
def name(cn): return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
def alt(host):
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
ca_key = ec.generate_private_key(ec.SECP256R1())
ca = (x509.CertificateBuilder().subject_name(name("dpstream local CA")).issuer_name(name("dpstream local CA"))
      .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
      .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
      .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
      .sign(ca_key, hashes.SHA256()))
key = ec.generate_private_key(ec.SECP256R1())
cert = (x509.CertificateBuilder().subject_name(name(hosts[0])).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([alt(h) for h in hosts]), critical=False)
        .sign(ca_key, hashes.SHA256()))
pem = lambda c: c.public_bytes(serialization.Encoding.PEM)
def secret_file(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
open(f"{tls}/ca.pem", "wb").write(pem(ca))
secret_file(f"{tls}/broker.pem", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()).decode() + pem(cert).decode() + pem(ca).decode())
for user in users:
    secret_file(f"{clients}/{user}.properties",
                f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                f"sasl.username={user}\nsasl.password={secrets.token_hex(16)}\nssl.ca.location={ca_path}\n")
PYEOF
}

password_of() { sed -n 's/^sasl.password=//p' "${2:-$STATE/clients}/$1.properties"; }

write_config() {
  mkdir -p "$STATE/data"
  chmod 700 "$STATE"        # the log directory holds every topic, private ones included, unencrypted
  if [ "$SECURE" = 1 ]; then write_secure_config; else write_plain_config; fi
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

write_secure_config() {
  make_secrets "$STATE/tls" "$STATE/clients" "127.0.0.1:$PORT" "$STATE/tls/ca.pem" localhost 127.0.0.1
  ( umask 077
    secure_server_properties "$STATE/clients" "$STATE/tls" "$STATE/data" "$CPORT" \
      "SASL_SSL://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT" "SASL_SSL://127.0.0.1:$PORT" \
      "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT" SASL_SSL > "$STATE/server.properties" )
}

base_properties() {
  # What every broker here shares: one KRaft node, replication factor 1 for the internal
  # topics. $1 controller port, $2 listeners, $3 advertised listeners, $4 protocol map,
  # $5 inter-broker listener, $6 log directory.
  cat <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$1
listeners=$2
advertised.listeners=$3
listener.security.protocol.map=$4
controller.listener.names=CONTROLLER
inter.broker.listener.name=$5
log.dirs=$6
num.partitions=4
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
PROPS
}

secure_server_properties() {
  # The secured broker's server.properties on stdout, for this script's broker and for
  # docker-compose.yml's (compose-secrets): $1 client config directory (the passwords),
  # $2 TLS directory and $3 log directory as the broker sees them, $4 controller port,
  # $5 listeners, $6 advertised listeners, $7 listener protocol map, $8 the inter-broker
  # listener; every listener but CONTROLLER is SASL_SSL.
  local clients="$1" tls="$2" data="$3" cport="$4" listeners="$5" advertised="$6" map="$7" inter="$8"
  local admin plain="" u l
  admin=$(password_of admin "$clients")
  for u in $USERS; do plain="$plain user_$u=\"$(password_of "$u" "$clients")\""; done
  base_properties "$cport" "$listeners" "$advertised" "$map" "$inter" "$data"
  cat <<PROPS
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
PROPS
  for l in $(echo "$advertised" | sed 's#://[^,]*##g; s#,# #g'); do
    l=$(echo "$l" | tr 'A-Z' 'a-z')
    cat <<PROPS
listener.name.$l.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin";
listener.name.$l.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.$l.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin"$plain;
PROPS
  done
  cat <<PROPS
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:ANONYMOUS
auto.create.topics.enable=false
PROPS
}

write_plain_config() {
  { base_properties "$CPORT" "PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT" \
      "PLAINTEXT://127.0.0.1:$PORT" "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" PLAINTEXT "$STATE/data"
    echo "auto.create.topics.enable=true"; } > "$STATE/server.properties"
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
    local scram=() u m
    if [ "$SECURE" = 1 ]; then
      for u in $USERS; do
        for m in SCRAM-SHA-512 SCRAM-SHA-256; do
          scram+=(--add-scram "$m=[name=$u,password=$(password_of "$u")]")
        done
      done
    fi
    java -cp "$cp" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool \
      format -t "$cid" -c "$STATE/server.properties" "${scram[@]}" >"$STATE/format.log" 2>&1 \
      || { cat "$STATE/format.log" >&2; die "storage format failed"; }
  fi
  # The broker's collector is ZGC (pauses of ~0.01 ms). G1's young pauses (10-18 ms every
  # few seconds here) were in flight for most of the worker's slowest 1% in many bench
  # runs; in an interleaved A/B at fixed rates (README, "The broker's collector") every
  # one of 8 ZGC runs had a lower p99 than its G1 counterpart. All of it, pauses and
  # concurrent phases, is logged (gc, gc+phases): bench/trace_worker.py lines it up with
  # the worker's slowest events.
  # shellcheck disable=SC2086  # KAFKA_GC_OPTS is a list of JVM options
  nohup java -Xmx512m -Xms256m ${KAFKA_GC_OPTS:--XX:+UseZGC} \
    -Xlog:gc,gc+phases:file="$STATE/gc.log":time,uptime -cp "$cp" \
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" \
    kafka.Kafka "$STATE/server.properties" >"$STATE/stdout.log" 2>&1 &
  echo $! > "$STATE/kafka.pid"
  for _ in $(seq 1 120); do
    if port_open "$PORT" && metadata_ok; then
      if [ "$SECURE" = 1 ]; then
        echo "kafka.sh: Kafka $VERSION ready on 127.0.0.1:$PORT, SASL_SSL (client configs in $STATE/clients, CA $STATE/tls/ca.pem)"
      else
        echo "kafka.sh: Kafka $VERSION ready on 127.0.0.1:$PORT (state in $STATE)"
      fi
      return 0
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

compose_secrets() {
  # The secured docker-compose profile's material (README, "Secure deployment"), once, in
  # $1 (default ./secrets): kafka/ for the broker container (TLS, server.properties, the
  # SCRAM users, a cluster id, the healthcheck's Java client config), worker/ and admin/
  # for the worker and the one-shot ACL container, clients/ for you on the host
  # (localhost:9094). Every file holding a secret is 0600 and every directory 0700; the
  # containers run as your uid ($DPSTREAM_UID, default 1000) to read them.
  local out="${1:-$ROOT/secrets}" u role
  out="$(mkdir -p "$out" && cd "$out" && pwd)"
  [ -f "$out/kafka/server.properties" ] && { echo "kafka.sh: $out already holds the compose secrets"; return 0; }
  make_secrets "$out/kafka" "$out/clients" "localhost:9094" "$out/kafka/ca.pem" kafka localhost 127.0.0.1
  ( umask 077
    secure_server_properties "$out/clients" /etc/dpstream/kafka /var/lib/kafka/data 9095 \
      "SASL_SSL://0.0.0.0:9094,INTERNAL://0.0.0.0:19094,CONTROLLER://127.0.0.1:9095" \
      "SASL_SSL://localhost:9094,INTERNAL://kafka:19094" \
      "SASL_SSL:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT" INTERNAL > "$out/kafka/server.properties"
    for u in $USERS; do echo "$u $(password_of "$u" "$out/clients")"; done > "$out/kafka/users"
    "$PY" -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))' \
      > "$out/kafka/cluster.id"
    cat > "$out/kafka/healthcheck.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(password_of admin "$out/clients")";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/dpstream/kafka/ca.pem
PROPS
    for role in worker admin; do
      mkdir -p "$out/$role"
      cp "$out/kafka/ca.pem" "$out/$role/ca.pem"
      sed -e 's#^bootstrap.servers=.*#bootstrap.servers=kafka:19094#' \
          -e "s#^ssl.ca.location=.*#ssl.ca.location=/etc/dpstream/$role/ca.pem#" \
          "$out/clients/$role.properties" > "$out/$role/client.properties"
    done )
  chmod 700 "$out/worker" "$out/admin"
  echo "kafka.sh: compose secrets in $out (your client configs: $out/clients/<user>.properties)"
}

case "${1:-}" in
  start) start ;;
  compose-secrets) compose_secrets "${2:-}" ;;
  stop) stop ;;
  fetch) fetch ;;
  status) if running && port_open "$PORT"; then echo "running on 127.0.0.1:$PORT"; else echo "not running"; exit 1; fi ;;
  reset) stop; rm -rf "$STATE" ;;
  *) echo "usage: $0 start|stop|status|fetch|reset|compose-secrets [DIR]" >&2; exit 2 ;;
esac
