#!/bin/bash
# Entrypoint of docker-compose.yml's secured broker (profile "secure"): format the log
# directory once, start Kafka with the server.properties `scripts/kafka.sh compose-secrets`
# made, then set the SCRAM users of kafka/users through the admin API, as the broker's own
# certificate on its internal listener (broker-admin.properties; 127.0.0.1 inside the
# container), and wait for the broker. No password is ever on a command line: the image
# has a JRE only (no javac for scripts/ScramUsers.java), so each password goes to
# kafka-configs.sh through a pipe (--add-config-file /dev/fd/N, written by printf, a shell
# builtin). The same broker configuration as `KAFKA_SECURE=1 scripts/kafka.sh start`.
# KAFKA_BIN and DPSTREAM_KAFKA_CONFIG_DIR move it (tests/streams/test_compose.py runs it on
# a local Kafka).
set -euo pipefail
umask 077
cfg="${DPSTREAM_KAFKA_CONFIG_DIR:-/etc/dpstream/kafka}"
bin="${KAFKA_BIN:-/opt/kafka/bin}"
"$bin/kafka-storage.sh" format --ignore-formatted -t "$(cat "$cfg/cluster.id")" \
  -c "$cfg/server.properties" > /dev/null
"$bin/kafka-server-start.sh" "$cfg/server.properties" &
broker=$!
trap 'kill -TERM "$broker" 2>/dev/null; wait "$broker"; exit' TERM INT
internal=$(sed -n 's/^bootstrap.servers=//p' "$cfg/broker-admin.properties")
set_user() {        # $1 mechanism, $2 user, $3 password; retried until the broker answers
  until "$bin/kafka-configs.sh" --bootstrap-server "$internal" --command-config "$cfg/broker-admin.properties" \
      --alter --entity-type users --entity-name "$2" \
      --add-config-file <(printf '%s=iterations=8192,password=%s\n' "$1" "$3") < /dev/null > /dev/null 2>&1; do
    kill -0 "$broker" 2>/dev/null || return 1
    sleep 2
  done
}
until (exec 3<>"/dev/tcp/${internal%:*}/${internal##*:}") 2>/dev/null; do     # the listener is up
  kill -0 "$broker" 2>/dev/null || { echo "compose-kafka.sh: the broker exited during start" >&2; exit 1; }
  sleep 1
done
# one mechanism per request: a KRaft controller takes one alteration per user and request;
# the users of one mechanism in parallel (one JVM each)
for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
  pids=()
  while read -r user password; do
    set_user "$mechanism" "$user" "$password" & pids+=($!)
  done < "$cfg/users"
  for pid in "${pids[@]}"; do
    wait "$pid" || { echo "compose-kafka.sh: the broker exited during start" >&2; exit 1; }
  done
done
echo "compose-kafka.sh: SCRAM users set: $(cut -d ' ' -f 1 "$cfg/users" | tr '\n' ' ')"
wait "$broker"
