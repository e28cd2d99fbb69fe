#!/bin/bash
# Entrypoint of docker-compose.yml's secured broker (profile "secure"): format the log
# directory once with the SCRAM users that `scripts/kafka.sh compose-secrets` made, then
# start Kafka with its server.properties. The same steps, and the same generated
# configuration, as `KAFKA_SECURE=1 scripts/kafka.sh start` runs on this machine.
set -euo pipefail
cfg=/etc/dpstream/kafka
scram=()
while read -r user password; do
  for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
    scram+=(--add-scram "$mechanism=[name=$user,password=$password]")
  done
done < "$cfg/users"
/opt/kafka/bin/kafka-storage.sh format --ignore-formatted -t "$(cat "$cfg/cluster.id")" \
  -c "$cfg/server.properties" "${scram[@]}" > /dev/null
exec /opt/kafka/bin/kafka-server-start.sh "$cfg/server.properties"
