#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft) on localhost, from Maven Central, no Docker.
#
#   scripts/kafka.sh start    fetch (once, cached), format storage (once), start, wait ready
#   scripts/kafka.sh stop     stop the broker started by this script
#   scripts/kafka.sh status   print whether it runs and answers
#   scripts/kafka.sh fetch    only download the jars (prints their directory)
#   scripts/kafka.sh cluster-ids [N]   N fresh KRaft cluster ids (as start and compose-secrets make them)
#   scripts/kafka.sh reset    stop, then delete the state directory
#   scripts/kafka.sh compose-secrets [DIR]   TLS material, users and configs for the
#                             secured docker-compose profile (default DIR: ./secrets)
# With KAFKA_SECURE=1 also:
#   scripts/kafka.sh clients          print the directory of the users' client configs
#   scripts/kafka.sh users NAME...    add SCRAM users (a fresh random password each, its
#                                     client config 0600 in that directory)
#   scripts/kafka.sh rotate NAME      a new password for NAME: the old one is refused at its next
#                                     login, and its live sessions end within 60 s
#                                     (KAFKA_REAUTH_MS below)
#   scripts/kafka.sh remove NAME      delete NAME's SCRAM credentials and client config (its
#                                     live sessions end within 60 s too)
#
# KAFKA_SECURE=1 starts a secured broker instead (default ports 9094, controller 9095,
# internal 9096): one SASL_SSL listener for clients (SCRAM-SHA-512 and SCRAM-SHA-256 over
# TLS; no PLAIN), a local CA and a broker certificate for 127.0.0.1 / localhost made on
# the spot, the users admin, worker, producer, querier, consumer and auditor with random
# passwords, and the StandardAuthorizer with allow.everyone.if.no.acl.found=false. The
# CONTROLLER and the internal BROKER listener (inter-broker traffic) are TLS with client
# certificates required: the only super users are User:admin and the broker's own
# certificate (User:CN=dpstream-broker); no anonymous principal has any right. The SCRAM
# users are created after the start through the admin API (scripts/ScramUsers.java, as the
# broker's certificate on the internal listener; compiled once, so a JDK is needed) from
# the 0600 client configs: no password is ever on a command line. Each user's client
# config (Kafka's standard property names, mode 0600) is $STATE/clients/<user>.properties,
# the CA $STATE/tls/ca.pem. Give the users their rights
# with `dpstream acls --apply` (docs/deployment.md; threat model: docs/security.md).
#
# The state directory (logs, data, TLS key, passwords) must be yours and mode 0700, the
# compose secrets directory and the jar cache yours (or root's) and writable by no one
# else, each under directories only you or root may change (safe_dir below), else this
# script refuses it: another local user who owns one, or a directory above it, could read
# every topic, the key and the passwords, or run their own code as you. Everything it
# writes is made under umask 077 (the broker's log segments included), each config as a
# new file renamed into place, never through a name that was already there.
#
# Environment: KAFKA_VERSION (default 4.0.1), KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093),
# KAFKA_INTERNAL_PORT (secured broker only; default 9096), KAFKA_REAUTH_MS (the secured
# and compose brokers' connections.max.reauth.ms, default 60000: how long a revoked
# password's live sessions may go on),
# DPSTREAM_KAFKA_HOME (jar cache, default ~/.cache/dpstream/kafka-<version>),
# DPSTREAM_KAFKA_STATE (logs and data, default $XDG_STATE_HOME/dpstream/kafka-<port>, that is
# ~/.local/state/dpstream/kafka-<port>), PYTHON (for the TLS material and the readiness check;
# default: the repo's .venv, else python3), KAFKA_GC_OPTS (the broker's collector options,
# default -XX:+UseZGC).
# Facts relied on (docs/development.md): node id 1 with roles broker,controller; PLAINTEXT on
# 9092 and CONTROLLER on 9093; quorum voter 1@localhost:9093; replication factor 1 and min ISR 1
# for the offsets and transaction-state topics; storage formatted once with a cluster id.
#
# A three-node cluster on this machine, for fault drills (docs/development.md, "A
# three-node cluster"):
#   scripts/kafka.sh cluster start        fetch, format (once), start the nodes not running,
#                                         and wait until each answers a metadata request
#                                         listing all 3 brokers
#   scripts/kafka.sh cluster stop         SIGTERM to every node at once, wait (a node still
#                                         running after 20 s is killed, and said so)
#   scripts/kafka.sh cluster status       one line per node, key=value (node=N running=yes|
#                                         starting|no pid=PID|- client=127.0.0.1:PORT
#                                         controller=...), then bootstrap=... and state=...;
#                                         exits 0 when all three run, else 1
#   scripts/kafka.sh cluster bootstrap    the client bootstrap servers, comma-separated
#   scripts/kafka.sh cluster kill N       kill -9 of node N's JVM; returns once it is gone
#   scripts/kafka.sh cluster stop-node N  SIGTERM to node N (a controlled shutdown), wait
#                                         (killed, and said so, if still running after 60 s)
#   scripts/kafka.sh cluster start-node N start node N on its own storage; returns once it
#                                         answers a metadata request listing itself (its
#                                         replicas then rejoin the ISRs by themselves)
#   scripts/kafka.sh cluster reset        stop, then delete the cluster's state directory
# Each of kill, stop-node and start-node is idempotent (a node already down or up is
# left as it is, and says so) and takes one node, 1, 2 or 3. With KAFKA_SECURE=1 also
# `cluster clients`, `cluster users NAME...`, `cluster rotate NAME` and `cluster remove
# NAME`, as for the secured broker; they also make, change or delete the user's PLAIN
# password and client certificate, which the nodes read at start: a rolling restart
# follows (each running node started with an older configuration in turn: stopped,
# started, back in the cluster, every partition fully replicated again), about a minute.
#
# Every node has the roles broker and controller (combined mode), in one static quorum
# of the three: controller.quorum.voters lists every controller, the same on each node,
# and each node's storage is formatted with the one cluster id (no --standalone or
# --initial-controllers: those bootstrap a KIP-853 dynamic quorum; Kafka 4.0's KRaft
# operations docs, "Static versus Dynamic KRaft Quorums" and "Provisioning Nodes").
# Every topic gets replication factor 3 and min.insync.replicas 2, the offsets and
# transaction-state topics too (transaction.state.log.min.isr 2), and
# unclean.leader.election.enable=false. Each node's JVM is the broker's (512 MiB heap,
# KAFKA_GC_OPTS), so the three take at most 1.5 GiB. Ports: a base, KAFKA_CLUSTER_PORT
# (default 19092; 29092 secured), plus 0 for node 1's client listener, 1 and 2 for
# nodes 2 and 3, and plus 100 for their controller listeners (19192-19194); secured,
# also the internal (+200), PLAIN (+300) and mTLS (+400) listeners. The state directory,
# DPSTREAM_KAFKA_CLUSTER_STATE (default ~/.local/state/dpstream/kafka-cluster-<base>),
# is judged like the broker's (safe_dir, 0700) and holds node1/, node2/ and node3/ (each
# node's server.properties, data, logs and kafka.pid) and what the cluster was made with
# (cluster.env, cluster.id): a later command given only that directory acts on the same
# ports, and one whose KAFKA_CLUSTER_PORT or KAFKA_SECURE differs is refused.
# Secured (KAFKA_SECURE=1): each node as the secured broker (SASL_SSL with SCRAM for
# clients, TLS with client certificates on the internal and controller listeners, the
# StandardAuthorizer, no ACL no access, super users User:admin and the broker
# certificate, which covers all three nodes: they all listen on 127.0.0.1), and two more
# client listeners in the shapes managed Kafka services give: SASL_SSL with PLAIN
# (an API key and secret, Confluent Cloud's shape) and SSL with a client certificate
# required (Amazon MSK's and Aiven's), whose subject CN=<user>,OU=<tag> becomes
# User:<user> (ssl.principal.mapping.rules), so the same ACLs apply to all three shapes.
# Each user's client configs, 0600 in $DPSTREAM_KAFKA_CLUSTER_STATE/clients:
# <user>.properties (SCRAM), <user>.plain.properties (PLAIN, a password of its own) and
# <user>.mtls.properties (its certificate and key beside it), with the property names
# dpstream reads (--command-config). The PLAIN passwords are in the 0600 JAAS file
# tls/plain.jaas, never on a command line; the cluster keeps its CA's key (tls/ca.key,
# 0600) to sign the users' certificates.
set -euo pipefail
umask 077
# Python never imports from the current directory (or the script's): `python -` and
# `python -c` put '' first on sys.path, so a uuid.py another user planted in a shared
# working directory (/tmp) ran as you. PYTHONSAFEPATH (Python 3.11+) for every Python
# started from here, and -P on each call below (an older Python refuses -P: it fails
# rather than run unsafely).
export PYTHONSAFEPATH=1

VERSION="${KAFKA_VERSION:-4.0.1}"
SECURE="${KAFKA_SECURE:-0}"
if [ "$SECURE" = 1 ]; then
  PORT="${KAFKA_PORT:-9094}"; CPORT="${KAFKA_CONTROLLER_PORT:-9095}"; IPORT="${KAFKA_INTERNAL_PORT:-9096}"
else
  PORT="${KAFKA_PORT:-9092}"; CPORT="${KAFKA_CONTROLLER_PORT:-9093}"; IPORT=""
fi
USERS="admin worker producer querier consumer auditor"
# A SASL session lasts at most this long (connections.max.reauth.ms, KIP-368): then the
# client logs in again (Kafka's Java clients on the same connection; aiokafka, which does
# not re-authenticate, on a new one after the broker closes the old), so a password
# rotated or removed ends the sessions logged in with it within this window. Without it a
# session logged in before `rotate` goes on for as long as its connection stays open.
# Shorter: a revoked password dies sooner; longer: aiokafka clients (the worker) reconnect,
# and log that they did, less often.
REAUTH_MS="${KAFKA_REAUTH_MS:-60000}"
BROKER_CN="dpstream-broker"    # the broker's certificate: its identity on the CONTROLLER and BROKER listeners
HOME_DIR="${DPSTREAM_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/dpstream/kafka-$VERSION}"
STATE="${DPSTREAM_KAFKA_STATE:-${XDG_STATE_HOME:-$HOME/.local/state}/dpstream/kafka-$PORT}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
else PY=python3; fi
# Kafka 4.0.1 logs through SLF4J 1.7 (its pom pulls slf4j-api 1.7.36): the binding is
# log4j-slf4j-impl (SLF4J 1.x), not log4j-slf4j2-impl, which SLF4J 1.7 never finds (the
# broker then wrote no log at all). The jar directory is named by this list, so a cache
# fetched for another list is never taken as complete.
LOG4J=2.24.3
DEPS="org.apache.kafka:kafka_2.13:$VERSION org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J org.apache.logging.log4j:log4j-core:$LOG4J"
LIBS_NAME="libs-$(echo "$DEPS" | cksum | cut -d ' ' -f 1)"
LIBS="$HOME_DIR/$LIBS_NAME"      # both set again from the checked path by check_cache

KRAFT_NODE=""; KRAFT_VOTERS=""; KRAFT_REPLICAS=""    # a cluster node's (base_properties); none from the environment
die() { echo "kafka.sh: $*" >&2; exit 1; }
[[ "$REAUTH_MS" =~ ^[1-9][0-9]{3,8}$ ]] || die "KAFKA_REAUTH_MS=$REAUTH_MS: give milliseconds, from 1000 to 999999999"

cluster_ids() {
  # $1 (default 1) KRaft cluster ids, one a line: 16 random bytes in URL-safe base64
  # without padding, as Kafka's Uuid.randomUuid makes them and, like it, never starting
  # with '-' (Kafka's argument parser reads such a value as an option: "argument
  # --cluster-id/-t: expected one argument", about one format in 64 failed so).
  "$PY" -P - "${1:-1}" <<'PY'
import base64, sys, uuid
for _ in range(int(sys.argv[1])):
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            print(cid)
            break
PY
}

need_tools() {
  command -v java >/dev/null || die "Java is missing: install a JDK >= 17 (Debian: apt-get install openjdk-17-jdk-headless)"
  command -v mvn >/dev/null || die "Maven is missing: install it (Debian: apt-get install maven)"
}

fetch() {
  check_cache
  if [ ! -f "$LIBS/.complete" ]; then
    need_tools
    local dep deps=""
    for dep in $DEPS; do
      IFS=: read -r g a v <<<"$dep"
      deps="$deps<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
    done
    write_new "$HOME_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dpstream</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>$deps</dependencies>
</project>
POM
    echo "kafka.sh: fetching Apache Kafka $VERSION and its runtime jars into $LIBS" >&2
    # Maven takes JVM options (.mvn/jvm.config), its own options and extensions from the
    # first directory with a .mvn, searched upward from the pom: from a directory above
    # the cache another user may write to (/tmp), their -javaagent ran as you. The cache
    # (checked above) is the project's base directory: its own .mvn ends the search, and
    # MAVEN_BASEDIR skips it.
    mkdir -p "$HOME_DIR/.mvn"
    MAVEN_BASEDIR="$HOME_DIR" mvn -q -B -Dstyle.color=never -f "$HOME_DIR/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$LIBS" >&2 || die "mvn could not fetch org.apache.kafka:kafka_2.13:$VERSION"
    touch "$LIBS/.complete"
  fi
  [ "${1:-}" = print ] && echo "$LIBS"
  return 0
}

# ----------------------------------------------------------------- directories it trusts
# One rule for every directory this script takes secrets or code from or writes them into
# (the state directory, the compose secrets, the jar cache), as ssh judges its files and
# streams/tools/outdir.py an --out directory; another local user must not be able to read,
# plant or swap anything there:
#  - every directory on the way to it belongs to you or root and, if others may write to
#    it, has the sticky bit (as /tmp): else its owner (or writer) could move the
#    directory away and put their own in its place; a symbolic link on the way belongs
#    to you or root (its owner could repoint it); .. after a missing name is refused;
#  - so does every directory passed through but not on the resolved path: the one
#    holding a link that is followed, and one left by .. (else its owner could replace
#    it, or the link or directory looked up in it, with their own);
#  - the directory itself is a directory (not a link), yours or root's, writable by no
#    one else ("private": yours, mode 0700);
#  - nothing in it is a symbolic link, another user's, or writable by group or others;
#  - group-writable counts as yours alone when the group's only member is you (a user
#    private group, outdir.py's _private_group), never when a POSIX ACL is on it (its
#    group bits are then the mask of every user and group the ACL lets write).
# Missing directories are made (0700, umask 077) only once all this holds for the rest.
# The callers then use the resolved path (SAFE_DIR), never the name as given: a link on
# the way is not followed a second time.
SAFE_DIR=""     # the checked directory, links resolved (set by safe_dir)

refuse_dir() {    # $1 what, $2 the path as given, $3 what is wrong ("(owner ..., mode ...): ..." or a sentence), $4 the fix
  case "$3" in "("*) die "refusing $1 $2 $3; $4" ;; *) die "refusing $1 $2: $3; $4" ;; esac
}

private_group() {
  # Whether $1 (group-writable, not world-writable) has a group whose only member,
  # by primary group or by the group's member list, is $1's owner. Never with a POSIX
  # access ACL (ls's trailing "+"): its group bits are then the ACL's mask, which
  # covers every named user and group it lets write (setfacl -m u:OTHER:rwx).
  local gid uid owner members
  (( (8#$(stat -c %a "$1") & 8#002) == 0 )) || return 1
  [[ "$(LC_ALL=C ls -ld -- "$1")" != ??????????+* ]] || return 1
  gid=$(stat -c %g "$1"); uid=$(stat -c %u "$1")
  owner=$(getent passwd "$uid" | cut -d: -f1) && [ -n "$owner" ] || return 1
  getent group "$gid" >/dev/null || return 1
  members=$( { getent group "$gid" | cut -d: -f4 | tr ',' '\n'; getent passwd | awk -F: -v g="$gid" '$4 == g { print $1 }'; } \
             | sed '/^$/d' | sort -u)
  [ "$members" = "$owner" ]
}

opened_to_others() {   # $1 a path whose group or others may write to it (no private group, no sticky bit)
  local mode; mode=$(stat -c %a "$1")
  (( (8#$mode & 8#022) != 0 )) && ! private_group "$1"
}

safe_dir() {
  # $1 directory, $2 what it is and $3 how to fix a refusal (for the one line), $4 create
  # (make it when missing) or "", $5 private (yours, 0700) or "". Dies with one line
  # unless the rule above holds; returns 1 when it is missing and not to be made; sets
  # SAFE_DIR to its path with every link resolved (a missing one's too).
  local dir="$1" what="$2" fix="$3" create="${4:-}" private="${5:-}"
  local me here="" step name owner mode target links=0 d where harm bad found
  local -a pending missing=() parts passed=()
  local -A seen=()
  me=$(id -u)
  [[ "$dir" = /* ]] || dir="$(pwd -P)/$dir"
  IFS=/ read -ra pending <<<"$dir"
  while [ ${#pending[@]} -gt 0 ]; do
    name="${pending[0]}"; pending=("${pending[@]:1}")
    case "$name" in ""|.) continue ;; esac
    if [ ${#missing[@]} -gt 0 ]; then
      [ "$name" = .. ] && refuse_dir "$what" "$1" "it climbs (..) out of a directory that does not exist yet" "$fix"
      missing+=("$name"); continue
    fi
    passed+=("${here:-/}")        # a name (.. too) is looked up in it: judged below
    if [ "$name" = .. ]; then here="${here%/*}"; continue; fi
    step="$here/$name"
    if [ -L "$step" ] && [ ${#pending[@]} -gt 0 ]; then        # a link on the way (the last name is judged below)
      owner=$(stat -c %u "$step")
      [ "$owner" = "$me" ] || [ "$owner" = 0 ] \
        || refuse_dir "$what" "$1" "$step is a symbolic link owned by uid $owner, not by you or root (its owner could repoint it)" "$fix"
      links=$((links + 1))
      [ "$links" -le 40 ] || refuse_dir "$what" "$1" "more than 40 symbolic links" "$fix"
      target=$(readlink "$step")
      [[ "$target" = /* ]] && here=""
      IFS=/ read -ra parts <<<"$target"
      pending=("${parts[@]}" "${pending[@]}")
      continue
    fi
    if [ ! -e "$step" ] && [ ! -L "$step" ]; then missing+=("$name"); continue; fi
    here="$step"
  done
  local last="$here" path="$here"
  for name in "${missing[@]}"; do path="$path/$name"; done
  [ ${#missing[@]} -eq 0 ] && last="${here%/*}"       # the directory itself is judged apart
  d=""                                                # the directories above it, then those only passed through
  IFS=/ read -ra parts <<<"$last"
  for name in "" "${parts[@]}"; do
    [ -n "$name" ] || [ -z "$d" ] || continue
    d="${d%/}/$name"
    passed+=("$d")
  done
  for d in "${passed[@]}"; do
    [ -z "${seen[$d]:-}" ] || continue
    seen[$d]=1
    harm="move the directory away and put their own in its place"
    if [ "$d" = "${path%/*}" ] || { [ "$d" = / ] && [ -z "${path%/*}" ]; }; then where="its parent $d"
    elif [ "$d" = / ] || [[ "$path/" = "$d/"* ]]; then where="$d, on the way to it,"
    else where="$d, passed through on the way to it (a link in it followed, or left by ..),"
         harm="replace it, or a link or directory in it, with their own"; fi
    owner=$(stat -c %u "$d"); mode=$(stat -c %a "$d")
    [ "$owner" = "$me" ] || [ "$owner" = 0 ] \
      || refuse_dir "$what" "$1" "$where belongs to uid $owner, who could $harm" "$fix"
    if opened_to_others "$d" && (( (8#$mode & 8#1000) == 0 )); then
      refuse_dir "$what" "$1" "$where is writable by other users without the sticky bit (mode $mode), who could $harm" "$fix"
    fi
  done
  SAFE_DIR="$path"
  if [ ${#missing[@]} -gt 0 ]; then
    [ "$create" = create ] || return 1
    mkdir -p "$path" || die "cannot create $what $1"
  fi
  owner=$(stat -c %u "$path"); mode=$(stat -c %a "$path")
  if [ "$private" = private ]; then
    if [ -L "$path" ] || [ ! -d "$path" ] || [ "$owner" != "$me" ] || [ "$mode" != 700 ]; then
      refuse_dir "$what" "$1" "(owner uid $owner, mode $mode): it must be a directory owned by you (uid $me) with mode 0700" "$fix"
    fi
  elif [ -L "$path" ] || [ ! -d "$path" ] || { [ "$owner" != "$me" ] && [ "$owner" != 0 ]; } || opened_to_others "$path"; then
    refuse_dir "$what" "$1" "(owner uid $owner, mode $mode): it must be a directory (not a link) owned by you (uid $me) or root and writable by no one else" "$fix"
  fi
  while IFS= read -r -d '' found; do
    if [ -L "$found" ]; then bad="a symbolic link"
    elif owner=$(stat -c %u "$found") && [ "$owner" != "$me" ] && [ "$owner" != 0 ]; then bad="owned by uid $owner"
    elif opened_to_others "$found"; then bad="writable by other users (mode $(stat -c %a "$found"))"
    else continue; fi                                  # group-writable, in a private group
    refuse_dir "$what" "$1" "$found in it is $bad: someone else could have planted or changed it" "$fix"
  done < <(find "$path" -mindepth 1 \( -type l -o \( ! -user "$me" ! -user 0 \) -o -perm /022 \) -print0 2>/dev/null)
}

write_new() {
  # stdin into the file $1, never through whatever is at that name: a new file in the same
  # directory (mktemp: O_EXCL, mode 0600) renamed over it. A symbolic link, or anything but
  # a regular file of yours, at $1 is refused. (Its directory passed safe_dir, so this
  # only guards against a mistake: no one else can plant a name there.)
  local target="$1" tmp
  if [ -L "$target" ] || { [ -e "$target" ] && { [ ! -f "$target" ] || [ "$(stat -c %u "$target")" != "$(id -u)" ]; }; }; then
    die "refusing to write $target: it is a symbolic link or not a regular file of yours; remove it"
  fi
  tmp=$(mktemp "$(dirname "$target")/.$(basename "$target").XXXXXX") || die "cannot write $target"
  if ! cat > "$tmp"; then rm -f "$tmp"; die "cannot write $target"; fi
  mv -fT "$tmp" "$target"
}

check_state() {
  # The state directory (logs, data, TLS key, passwords) by the rule above, yours and
  # 0700; $1=create: made when missing. STATE is then its resolved path.
  safe_dir "$STATE" "the state directory" \
    "remove it or set DPSTREAM_KAFKA_STATE to a new one (mkdir -m 700 DIR) under a directory of yours" "${1:-}" private || true
  STATE="$SAFE_DIR"
}

check_cache() {
  # The jar cache: the broker and every tool here run its jars, so it is judged by the
  # same rule (yours or root's, writable by no one else), made when missing.
  safe_dir "$HOME_DIR" "the jar cache" \
    "remove it or set DPSTREAM_KAFKA_HOME to a directory of your own (a missing one is made 0700)" create
  HOME_DIR="$SAFE_DIR"; LIBS="$HOME_DIR/$LIBS_NAME"     # the resolved path from here on
}

# ----------------------------------------------------------------- the broker process
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

broker_pid() { cat "$STATE/kafka.pid" 2>/dev/null; }

running() {
  # The pid file's process is alive and is this state directory's broker JVM (not a
  # recycled pid, not another broker). No pipe into grep -q: with pipefail, grep's early
  # exit can end tr with SIGPIPE and the pipeline "fails" while the JVM runs (a flaky
  # "the broker exited during start" under load).
  local pid cmd; pid=$(broker_pid) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ "$cmd" == *"kafka.Kafka $STATE/server.properties"* ]]
}

holds_port() {
  # Our broker JVM holds the listening socket of 127.0.0.1:$1 (Linux: /proc/net/tcp gives
  # the socket's inode, /proc/PID/fd the sockets the process has open).
  local pid inode hex
  pid=$(broker_pid) || return 1
  hex=$(printf ':%04X' "$1")
  for inode in $(awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
                   /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    [ -n "$(find "/proc/$pid/fd" -lname "socket:\[$inode\]" -print -quit 2>/dev/null)" ] && return 0
  done
  return 1
}

metadata_ok() {
  # This broker answers a metadata request (brokers_answer).
  local client=""
  [ "$SECURE" = 1 ] && client="$STATE/clients/admin.properties"
  brokers_answer count=1 "$client" "127.0.0.1:$PORT"
}

brokers_answer() {
  # Each address $3... answers a metadata request of its own, as the client config $2
  # (none: plaintext), and that answer lists, by $1, count=N: at least N live brokers;
  # node=N: node N among them (a KRaft broker lists only the registered, unfenced
  # ones). Through aiokafka when the interpreter has it, else only the open ports.
  local expect="$1" client="$2" address; shift 2
  if ! "$PY" -P -c "import aiokafka" 2>/dev/null; then
    for address in "$@"; do port_open "${address##*:}" || return 1; done
    return 0
  fi
  "$PY" -P - "$expect" "$client" "$@" <<'PYEOF' 2>/dev/null
import asyncio, sys
from aiokafka.client import AIOKafkaClient
from dpstream.streams.worker.kafka import Kafka
what, number = sys.argv[1].split("=")
async def answers(address):
    # one bootstrap address: the client's first metadata request goes to that node
    kafka = Kafka.from_settings(address, sys.argv[2] or None, environ={})
    client = AIOKafkaClient(**kafka.client_args(), request_timeout_ms=5000)
    try:
        await client.bootstrap()
        brokers = client.cluster.brokers()
    finally:
        await client.close()
    if what == "count":
        return len(brokers) >= int(number)
    return any(b.nodeId == int(number) for b in brokers)
async def main():
    return all(await asyncio.gather(*(answers(a) for a in sys.argv[3:])))
sys.exit(0 if asyncio.run(main()) else 1)
PYEOF
}

broker_error() {
  # The broker's own last error, one line (the log4j2 "errors" appender below), else the
  # JVM's last output line.
  local line=""
  [ -s "$STATE/errors.log" ] && line=$(tail -n 1 "$STATE/errors.log")
  [ -z "$line" ] && [ -s "$STATE/stdout.log" ] && line=$(grep -v '^\s*$' "$STATE/stdout.log" | tail -n 1)
  echo "${line:-no error logged}"
}

# ----------------------------------------------------------------- secrets and users
make_secrets() {
  # A CA and a broker certificate (CN=dpstream-broker, its host names as subject
  # alternative names), once per directory; the CA's key is thrown away, so no other
  # certificate can ever be signed by it, unless the first argument is --keep-ca-key
  # (the cluster's, which signs its users' client certificates: ca.key, 0600).
  # Then: $1 TLS directory, $2...: the broker's host names.
  local keep=""
  [ "$1" = --keep-ca-key ] && { keep=1; shift; }
  local tls="$1"; shift
  [ -f "$tls/broker.pem" ] && return 0
  mkdir -p "$tls"
  "$PY" -P - "$tls" "$BROKER_CN" "$*" "$keep" <<'PYEOF' || die "could not make the TLS material (needs the cryptography package)"
import datetime, ipaddress, os, sys, tempfile
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
tls, cn, hosts = sys.argv[1], sys.argv[2], sys.argv[3].split()
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
cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([alt(h) for h in hosts]), critical=False)
        .sign(ca_key, hashes.SHA256()))
pem = lambda c: c.public_bytes(serialization.Encoding.PEM)
def write(path, data, mode):
    # a new file (O_EXCL) renamed over the name: never written through what is there
    fd, new = tempfile.mkstemp(dir=tls, prefix=".new-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(new, mode)
    os.replace(new, path)
write(f"{tls}/ca.pem", pem(ca), 0o644)
if sys.argv[4]:
    write(f"{tls}/ca.key", ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
          serialization.NoEncryption()), 0o600)
write(f"{tls}/broker.pem", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
      serialization.NoEncryption()) + pem(cert) + pem(ca), 0o600)
PYEOF
  chmod 644 "$tls/ca.pem"
}

new_password() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

write_client() {
  # A user's client config with a fresh random password (0600). $1 directory, $2 user,
  # $3 bootstrap servers, $4 the CA path written into it, $5 the SASL mechanism (default
  # SCRAM-SHA-512) and $6 the file's name (default <user>.properties). printf is a shell
  # builtin: the password is never an argument of a process.
  printf 'bootstrap.servers=%s\nsecurity.protocol=SASL_SSL\nsasl.mechanism=%s\nsasl.username=%s\nsasl.password=%s\nssl.ca.location=%s\n' \
    "$3" "${5:-SCRAM-SHA-512}" "$2" "$(new_password)" "$4" | write_new "$1/${6:-$2.properties}"
}

password_of() { sed -n 's/^sasl.password=//p' "${2:-$STATE/clients}/$1.properties"; }

valid_user() {
  [[ "$1" =~ ^[A-Za-z0-9._-]+$ ]] || die "user name '$1': use letters, digits, '.', '_' and '-' only"
}

scram() {
  # Set (or delete) SCRAM users through the internal listener: $1 set|delete, $2... users.
  local action="$1"; shift
  local files=() u
  check_cache                      # its jars run here, as you
  for u in "$@"; do files+=("$STATE/clients/$u.properties"); done
  local tools="$STATE/tools"
  if [ ! -f "$tools/ScramUsers.class" ] || [ "$ROOT/scripts/ScramUsers.java" -nt "$tools/ScramUsers.class" ]; then
    command -v javac >/dev/null || die "javac is missing: the secured broker needs a JDK (Debian: apt-get install openjdk-17-jdk-headless)"
    mkdir -p "$tools"
    javac -nowarn -cp "$LIBS/*" -d "$tools" "$ROOT/scripts/ScramUsers.java" 2>"$STATE/scram.err" \
      || die "could not compile scripts/ScramUsers.java: $(head -n 1 "$STATE/scram.err")"
  fi
  java -cp "$tools:$LIBS/*" ScramUsers "$STATE/tls/broker-admin.properties" \
    "$action" "${files[@]}" 2>"$STATE/scram.err" >/dev/null \
    || die "could not $action the SCRAM users ($*): $(grep -v '^\s*$' "$STATE/scram.err" | tail -n 1)"
}

need_secure_broker() {
  [ "$SECURE" = 1 ] || die "'$1' is for the secured broker: KAFKA_SECURE=1 scripts/kafka.sh $1 ..."
  check_state
  running || die "no secured broker of $STATE runs: KAFKA_SECURE=1 scripts/kafka.sh start"
  BOOTSTRAP=$(sed -n 's/^bootstrap.servers=//p' "$STATE/clients/admin.properties")
}

# ----------------------------------------------------------------- configuration
write_config() {
  mkdir -p "$STATE/data"
  if [ "$SECURE" = 1 ]; then write_secure_config; else write_plain_config; fi
  write_log_config
}

write_log_config() {
  # Warnings and errors, refused logins (org.apache.kafka.common.network.Selector, INFO)
  # and every denied operation (the StandardAuthorizer's kafka.authorizer.logger, INFO for
  # a denial, as in Kafka's own config/log4j2.yaml) are logged; errors also go, one line
  # each, to errors.log, which a failed start prints. Not the rest of INFO: on this 2-core
  # machine a broker logging every INFO line made a fresh worker's start-up race its
  # changelog topics' creation (aiokafka's "Topic ... not found in cluster metadata" at
  # ERROR in the quick start, 3 runs of 4; 0 of 2 at WARN).
  write_new "$STATE/log4j2.properties" <<LOG
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $STATE/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.authorizer.type = File
appender.authorizer.name = authorizer
appender.authorizer.fileName = $STATE/authorizer.log
appender.authorizer.layout.type = PatternLayout
appender.authorizer.layout.pattern = [%d] %p %m (%c)%n
appender.errors.type = File
appender.errors.name = errors
appender.errors.fileName = $STATE/errors.log
appender.errors.layout.type = PatternLayout
appender.errors.layout.alwaysWriteExceptions = false
appender.errors.layout.pattern = %m%notEmpty{: %ex{short.message}}%n
appender.errors.filter.threshold.type = ThresholdFilter
appender.errors.filter.threshold.level = error
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.logins.name = org.apache.kafka.common.network.Selector
logger.logins.level = info
rootLogger.appenderRef.errors.ref = errors
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = info
logger.authorizer.additivity = false
logger.authorizer.appenderRef.authorizer.ref = authorizer
LOG
}

write_secure_config() {
  make_secrets "$STATE/tls" localhost 127.0.0.1
  "$PY" -P - "$STATE/tls/broker.pem" "CN=$BROKER_CN" <<'PYEOF' \
    || die "$STATE was made by an older kafka.sh (its broker certificate is not CN=$BROKER_CN, the super user of this layout): start over in a new state directory (scripts/kafka.sh reset, or set DPSTREAM_KAFKA_STATE)"
import sys
from cryptography import x509
cert = x509.load_pem_x509_certificates(open(sys.argv[1], "rb").read())[0]
sys.exit(cert.subject.rfc4514_string() != sys.argv[2])
PYEOF
  mkdir -p "$STATE/clients"
  local u
  for u in $USERS; do
    [ -f "$STATE/clients/$u.properties" ] || write_client "$STATE/clients" "$u" "127.0.0.1:$PORT" "$STATE/tls/ca.pem"
  done
  broker_admin_config "127.0.0.1:$IPORT" "$STATE/tls" | write_new "$STATE/tls/broker-admin.properties"
  secure_server_properties "$STATE/tls" "$STATE/data" "$CPORT" \
    "SASL_SSL://127.0.0.1:$PORT,BROKER://127.0.0.1:$IPORT,CONTROLLER://127.0.0.1:$CPORT" \
    "SASL_SSL://127.0.0.1:$PORT,BROKER://127.0.0.1:$IPORT" "SASL_SSL:SASL_SSL,BROKER:SSL,CONTROLLER:SSL" \
    | write_new "$STATE/server.properties"
}

broker_admin_config() {
  # A Java admin client config for the internal BROKER listener ($1), as the broker's own
  # certificate (TLS directory $2, as the client sees it): what creates the SCRAM users.
  # (Not the controller listener: the Java admin client does not send
  # AlterUserScramCredentials to controllers, "This Admin API is not yet supported when
  # communicating directly with the controller quorum".)
  cat <<PROPS
bootstrap.servers=$1
security.protocol=SSL
ssl.keystore.type=PEM
ssl.keystore.location=$2/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$2/ca.pem
PROPS
}

base_properties() {
  # What every broker here shares: a KRaft node with the roles broker and controller.
  # $1 controller port, $2 listeners, $3 advertised listeners, $4 protocol map, $5
  # inter-broker listener, $6 log directory. One broker: node 1, a quorum of itself,
  # replication factor 1 for every topic. A cluster node sets KRAFT_NODE, KRAFT_VOTERS
  # (every controller, the same on each node: a static quorum) and KRAFT_REPLICAS (3,
  # and so min.insync.replicas 2) first (cluster_node_properties).
  local node="${KRAFT_NODE:-1}" voters="${KRAFT_VOTERS:-1@127.0.0.1:$1}" rf="${KRAFT_REPLICAS:-1}"
  local isr=$(( rf > 1 ? rf - 1 : 1 ))
  cat <<PROPS
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=$2
advertised.listeners=$3
listener.security.protocol.map=$4
controller.listener.names=CONTROLLER
inter.broker.listener.name=$5
log.dirs=$6
num.partitions=4
default.replication.factor=$rf
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
min.insync.replicas=$isr
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
PROPS
}

secure_server_properties() {
  # The secured broker's server.properties on stdout, for this script's broker and for
  # docker-compose.yml's (compose-secrets): $1 TLS directory and $2 log directory as the
  # broker sees them, $3 controller port, $4 listeners, $5 advertised listeners, $6
  # listener protocol map. Client listeners are SASL_SSL with SCRAM only: PLAIN checks
  # static passwords kept in this file, which rotating or deleting a SCRAM credential
  # does not revoke. CONTROLLER and BROKER (inter-broker) are TLS with client
  # certificates required (ssl.client.auth, per listener): a KRaft controller cannot
  # check SCRAM (the credentials live in the metadata log it serves; KIP-554, KIP-900),
  # and the broker's own certificate is its identity on both. This file holds no password.
  local tls="$1" data="$2" cport="$3" listeners="$4" advertised="$5" map="$6" l
  base_properties "$cport" "$listeners" "$advertised" "$map" BROKER "$data"
  echo "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256"
  # (the cluster's PLAIN listener, SASL_SSL too, takes PLAIN only: cluster_node_properties)
  for l in $(echo "$map" | tr ',' '\n' | sed -n 's/:SASL_SSL$//p' | grep -vx PLAIN | tr 'A-Z' 'a-z'); do
    cat <<PROPS
listener.name.$l.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.$l.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
PROPS
  done
  cat <<PROPS
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
ssl.client.auth=none
listener.name.broker.ssl.client.auth=required
listener.name.controller.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:CN=$BROKER_CN
connections.max.reauth.ms=$REAUTH_MS
auto.create.topics.enable=false
PROPS
}

write_plain_config() {
  { base_properties "$CPORT" "PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT" \
      "PLAINTEXT://127.0.0.1:$PORT" "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" PLAINTEXT "$STATE/data"
    echo "auto.create.topics.enable=true"; } | write_new "$STATE/server.properties"
}

# ----------------------------------------------------------------- commands
format_storage() {
  # Format $STATE/data for the KRaft cluster id $1, once (a formatted one is kept as it is).
  [ -f "$STATE/data/meta.properties" ] && return 0
  java -cp "$LIBS/*" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool \
    format -t "$1" -c "$STATE/server.properties" >"$STATE/format.log" 2>&1 \
    || die "storage format failed: $(grep -v '^\s*$' "$STATE/format.log" | tail -n 1)"
}

launch() {
  # Start the broker of $STATE/server.properties in the background, its pid in
  # $STATE/kafka.pid; $@: more JVM options (system properties). Returns at once.
  : > "$STATE/errors.log"
  # The broker's collector is ZGC (pauses of ~0.01 ms). G1's young pauses (10-18 ms every
  # few seconds here) were in flight for most of the worker's slowest 1% in many bench
  # runs; in an interleaved A/B at fixed rates (docs/performance.md, "The broker's collector") every
  # one of 8 ZGC runs had a lower p99 than its G1 counterpart. All of it, pauses and
  # concurrent phases, is logged (gc, gc+phases): bench/trace_worker.py lines it up with
  # the worker's slowest events.
  # shellcheck disable=SC2086  # KAFKA_GC_OPTS is a list of JVM options
  nohup java -Xmx512m -Xms256m ${KAFKA_GC_OPTS:--XX:+UseZGC} \
    -Xlog:gc,gc+phases:file="$STATE/gc.log":time,uptime -cp "$LIBS/*" \
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" "$@" \
    kafka.Kafka "$STATE/server.properties" >"$STATE/stdout.log" 2>&1 &
  echo $! > "$STATE/kafka.pid"
}

start() {
  check_state create
  if running; then
    holds_port "$PORT" && { echo "kafka.sh: already running on 127.0.0.1:$PORT (state in $STATE)"; return 0; }
    die "the broker of $STATE (pid $(broker_pid)) runs but does not hold 127.0.0.1:$PORT: stop it first (scripts/kafka.sh stop)"
  fi
  local p
  for p in "$PORT" "$CPORT" $IPORT; do
    port_open "$p" && die "127.0.0.1:$p is taken by another process (not the broker of $STATE): stop it, or choose free ports (KAFKA_PORT, KAFKA_CONTROLLER_PORT${IPORT:+, KAFKA_INTERNAL_PORT})"
  done
  fetch
  need_tools
  write_config
  format_storage "$(cluster_ids)"
  launch
  local users_set=0
  for _ in $(seq 1 120); do
    running || die "the broker exited during start: $(broker_error) (log: $STATE/server.log)"
    if [ "$SECURE" = 1 ] && [ "$users_set" = 0 ] && holds_port "$IPORT"; then
      # shellcheck disable=SC2086  # USERS is a list
      scram set $USERS
      users_set=1
    fi
    if [ "$SECURE" != 1 ] || [ "$users_set" = 1 ]; then
      if holds_port "$PORT" && metadata_ok && running; then
        if [ "$SECURE" = 1 ]; then
          echo "kafka.sh: Kafka $VERSION ready on 127.0.0.1:$PORT, SASL_SSL (client configs in $STATE/clients, CA $STATE/tls/ca.pem)"
        else
          echo "kafka.sh: Kafka $VERSION ready on 127.0.0.1:$PORT (state in $STATE)"
        fi
        return 0
      fi
    fi
    sleep 1
  done
  kill "$(broker_pid)" 2>/dev/null || true      # not left running behind a failed start
  die "broker did not answer a metadata request within 120 s (stopped it; see $STATE/server.log)"
}

stop() {
  check_state
  if running; then
    local pid; pid=$(broker_pid)
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "kafka.sh: stopped"
  fi
  rm -f "$STATE/kafka.pid"
}

users() {
  need_secure_broker users
  [ $# -gt 0 ] || die "usage: KAFKA_SECURE=1 scripts/kafka.sh users NAME..."
  local u
  for u in "$@"; do
    valid_user "$u"
    [ -f "$STATE/clients/$u.properties" ] || write_client "$STATE/clients" "$u" "$BOOTSTRAP" "$STATE/tls/ca.pem"
  done
  scram set "$@"
  echo "kafka.sh: SCRAM users $* ready (client configs in $STATE/clients)"
}

rotate() {
  need_secure_broker rotate
  [ $# = 1 ] || die "usage: KAFKA_SECURE=1 scripts/kafka.sh rotate NAME"
  valid_user "$1"
  [ -f "$STATE/clients/$1.properties" ] || die "no user $1 (no $STATE/clients/$1.properties)"
  write_new "$STATE/clients/$1.properties.old" < "$STATE/clients/$1.properties"
  write_client "$STATE/clients" "$1" "$BOOTSTRAP" "$STATE/tls/ca.pem"
  scram set "$1"
  rm -f "$STATE/clients/$1.properties.old"
  echo "kafka.sh: new password for $1 in $STATE/clients/$1.properties; the old one is refused at its next login, $(live_sessions)"
}

live_sessions() {
  # What a revoked password leaves running, from the running broker's own
  # server.properties: the end of rotate's and remove's line.
  local ms; ms=$(sed -n 's/^connections.max.reauth.ms=//p' "$STATE/server.properties")
  if [ -n "$ms" ]; then
    echo "and sessions logged in with it end within $((ms / 1000)) s (connections.max.reauth.ms)"
  else
    echo "but this broker was started without connections.max.reauth.ms: sessions logged in with it go on until they disconnect (restart it to bound them: scripts/kafka.sh stop, then start)"
  fi
}

remove_user() {
  need_secure_broker remove
  [ $# = 1 ] && [ "$1" != admin ] || die "usage: KAFKA_SECURE=1 scripts/kafka.sh remove NAME (not admin)"
  valid_user "$1"
  [ -f "$STATE/clients/$1.properties" ] || die "no user $1 (no $STATE/clients/$1.properties)"
  scram delete "$1"
  rm -f "$STATE/clients/$1.properties"
  echo "kafka.sh: SCRAM user $1 deleted; its password is refused at its next login, $(live_sessions)"
}

compose_secrets() {
  # The secured docker-compose profile's material (docs/deployment.md, "With Docker"), once, in
  # $1 (default ./secrets): kafka/ for the broker container (TLS, server.properties, the
  # SCRAM users, a cluster id, the internal admin's and the healthcheck's Java client
  # configs), worker/ and admin/ for the worker and the one-shot ACL container, clients/
  # for you on the host (localhost:9094). Every file holding a secret is 0600 and every
  # directory 0700; the containers run as your uid ($DPSTREAM_UID, default 1000) to read
  # them. The broker container creates the SCRAM users after its start
  # (scripts/compose-kafka.sh), from kafka/users, never on a command line.
  # The directory is judged by safe_dir's rule (made 0700 when missing): one another user
  # made, or could write to or swap, is refused before anything is written or reused.
  local out u role
  safe_dir "${1:-$ROOT/secrets}" "the compose secrets directory" \
    "give compose-secrets a new directory (it is made 0700) under a directory of yours" create
  out="$SAFE_DIR"
  if [ -f "$out/kafka/server.properties" ]; then
    echo "kafka.sh: $out already holds the compose secrets"
    grep -q '^connections.max.reauth.ms=' "$out/kafka/server.properties" \
      || echo "kafka.sh: note: its kafka/server.properties (from an older kafka.sh) has no connections.max.reauth.ms, so a revoked password's live sessions go on: add connections.max.reauth.ms=$REAUTH_MS to it, or make the secrets anew in a new directory" >&2
    return 0
  fi
  make_secrets "$out/kafka" kafka localhost 127.0.0.1
  mkdir -p "$out/clients"
  for u in $USERS; do write_client "$out/clients" "$u" "localhost:9094" "$out/kafka/ca.pem"; done
  secure_server_properties /etc/dpstream/kafka /var/lib/kafka/data 9095 \
    "SASL_SSL://0.0.0.0:9094,INTERNAL://0.0.0.0:19094,BROKER://127.0.0.1:9096,CONTROLLER://127.0.0.1:9095" \
    "SASL_SSL://localhost:9094,INTERNAL://kafka:19094,BROKER://127.0.0.1:9096" \
    "SASL_SSL:SASL_SSL,INTERNAL:SASL_SSL,BROKER:SSL,CONTROLLER:SSL" | write_new "$out/kafka/server.properties"
  for u in $USERS; do printf '%s %s\n' "$u" "$(password_of "$u" "$out/clients")"; done | write_new "$out/kafka/users"
  cluster_ids | write_new "$out/kafka/cluster.id"
  broker_admin_config 127.0.0.1:9096 /etc/dpstream/kafka | write_new "$out/kafka/broker-admin.properties"
  write_new "$out/kafka/healthcheck.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(password_of admin "$out/clients")";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/dpstream/kafka/ca.pem
PROPS
  for role in worker admin; do
    mkdir -p "$out/$role"
    write_new "$out/$role/ca.pem" < "$out/kafka/ca.pem"
    sed -e 's#^bootstrap.servers=.*#bootstrap.servers=kafka:19094#' \
        -e "s#^ssl.ca.location=.*#ssl.ca.location=/etc/dpstream/$role/ca.pem#" \
        "$out/clients/$role.properties" | write_new "$out/$role/client.properties"
  done
  echo "kafka.sh: compose secrets in $out (your client configs: $out/clients/<user>.properties)"
}

# ----------------------------------------------------------------- the three-node cluster
# `scripts/kafka.sh cluster VERB` (the header lists the verbs). Each node is a broker of
# its own as above (its STATE a directory node<N> in the cluster's state directory,
# running, holds_port, broker_error and launch act on it after on_node), all three in
# one static KRaft quorum. Ports: the base (KAFKA_CLUSTER_PORT) plus the listener's
# offset plus N-1.
NODES="1 2 3"
declare -A OFFSET=([client]=0 [controller]=100 [internal]=200 [plain]=300 [mtls]=400)
CBASE=""
CSTATE=""

cluster_setup() {
  # CBASE, SECURE and CSTATE (the checked, resolved state directory; $1=create: made when
  # missing) for the cluster verbs. A cluster keeps what it was made with (cluster.env):
  # a later command given only DPSTREAM_KAFKA_CLUSTER_STATE acts on the nodes as they were
  # started, and one whose KAFKA_CLUSTER_PORT or KAFKA_SECURE says otherwise is refused.
  local default=19092 base secure
  [ "$SECURE" = 1 ] && default=29092
  CBASE="${KAFKA_CLUSTER_PORT:-$default}"
  CSTATE="${DPSTREAM_KAFKA_CLUSTER_STATE:-${XDG_STATE_HOME:-$HOME/.local/state}/dpstream/kafka-cluster-$CBASE}"
  safe_dir "$CSTATE" "the cluster's state directory" \
    "remove it or set DPSTREAM_KAFKA_CLUSTER_STATE to a new one (mkdir -m 700 DIR) under a directory of yours" "${1:-}" private || true
  CSTATE="$SAFE_DIR"
  [ -f "$CSTATE/server.properties" ] \
    && die "$CSTATE is a single broker's state directory: give the cluster its own (DPSTREAM_KAFKA_CLUSTER_STATE)"
  if [ -f "$CSTATE/cluster.env" ]; then
    base=$(sed -n 's/^base=//p' "$CSTATE/cluster.env"); secure=$(sed -n 's/^secure=//p' "$CSTATE/cluster.env")
    [ -z "${KAFKA_CLUSTER_PORT:-}" ] || [ "$KAFKA_CLUSTER_PORT" = "$base" ] \
      || die "the cluster of $CSTATE was made with KAFKA_CLUSTER_PORT=$base, not $KAFKA_CLUSTER_PORT"
    [ -z "${KAFKA_SECURE:-}" ] || [ "$SECURE" = "$secure" ] \
      || die "the cluster of $CSTATE was made with KAFKA_SECURE=$secure, not $SECURE"
    CBASE="$base"; SECURE="$secure"
  fi
  [[ "$CBASE" =~ ^[1-9][0-9]{3,4}$ ]] && [ "$CBASE" -ge 1024 ] && [ "$CBASE" -le 65000 ] \
    || die "KAFKA_CLUSTER_PORT=$CBASE: give a port from 1024 to 65000 (the nodes use it and up to 402 above it)"
}

need_cluster() {
  # The verbs that act on an existing cluster: its state directory holds one.
  cluster_setup
  [ -f "$CSTATE/cluster.env" ] || die "no cluster in $CSTATE: start one (scripts/kafka.sh cluster start)"
}

port_of() { echo $((CBASE + OFFSET[$2] + $1 - 1)); }          # node $1's listener $2

addresses() {     # the three nodes' addresses of listener $1, comma-separated
  local n out=""
  for n in $NODES; do out="${out:+$out,}127.0.0.1:$(port_of "$n" "$1")"; done
  echo "$out"
}

kinds() { if [ "$SECURE" = 1 ]; then echo client controller internal plain mtls; else echo client controller; fi; }

on_node() {
  # The single-broker functions act on node $1 from here: its STATE, PORT, CPORT, IPORT.
  STATE="$CSTATE/node$1"; PORT=$(port_of "$1" client); CPORT=$(port_of "$1" controller); IPORT=""
  [ "$SECURE" = 1 ] && IPORT=$(port_of "$1" internal)
  return 0
}

node_arg() {
  [[ "${1:-}" =~ ^[1-3]$ ]] || die "give a node: 1, 2 or 3 (scripts/kafka.sh cluster $VERB N)"
}

alive() {
  # Whether process $1 still runs: its command line is readable and not empty (a zombie's
  # is empty, and kill -0 would still find it until its parent reaps it).
  local cmd
  cmd=$(tr -d '\0' 2>/dev/null < "/proc/$1/cmdline") && [ -n "$cmd" ]
}

admin_config() { if [ "$SECURE" = 1 ]; then echo "$CSTATE/clients/admin.properties"; fi; }

node_in_cluster() {
  # Node $1 answers a metadata request, and its answer lists node $1 itself as a live broker.
  on_node "$1"
  holds_port "$PORT" && brokers_answer "node=$1" "$(admin_config)" "127.0.0.1:$PORT"
}

# ----------------------------------------------------------------- the cluster's configuration
cluster_node_properties() {
  # Node $1's server.properties on stdout (after on_node $1). A static quorum of the three
  # controllers, the same controller.quorum.voters on every node (Kafka 4.0's KRaft docs,
  # "Static versus Dynamic KRaft Quorums"); replication factor 3 and min ISR 2 for every
  # topic, the internal ones included.
  local n="$1" m voters=""
  for m in $NODES; do voters="${voters:+$voters,}$m@127.0.0.1:$(port_of "$m" controller)"; done
  local KRAFT_NODE="$n" KRAFT_VOTERS="$voters" KRAFT_REPLICAS=3
  if [ "$SECURE" != 1 ]; then
    base_properties "$CPORT" "PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT" \
      "PLAINTEXT://127.0.0.1:$PORT" "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" PLAINTEXT "$STATE/data"
    echo "auto.create.topics.enable=true"
    return
  fi
  local plain="127.0.0.1:$(port_of "$n" plain)" mtls="127.0.0.1:$(port_of "$n" mtls)"
  secure_server_properties "$CSTATE/tls" "$STATE/data" "$CPORT" \
    "SASL_SSL://127.0.0.1:$PORT,PLAIN://$plain,MTLS://$mtls,BROKER://127.0.0.1:$IPORT,CONTROLLER://127.0.0.1:$CPORT" \
    "SASL_SSL://127.0.0.1:$PORT,PLAIN://$plain,MTLS://$mtls,BROKER://127.0.0.1:$IPORT" \
    "SASL_SSL:SASL_SSL,PLAIN:SASL_SSL,MTLS:SSL,BROKER:SSL,CONTROLLER:SSL"
  # Two more client listeners, in the shapes managed Kafka services give: PLAIN (an API key
  # and secret, Confluent Cloud's shape), its users and passwords in the JAAS file
  # tls/plain.jaas (0600; its section plain.KafkaServer, Kafka's listener-prefixed JAAS
  # context), and TLS with a client certificate (Amazon MSK's and Aiven's), whose subject
  # CN=<user>,OU=<tag> becomes User:<user> by one rule per user (mtls_rules). Any other
  # certificate, the brokers' own included, matches no rule and is refused there.
  cat <<PROPS
listener.name.plain.sasl.enabled.mechanisms=PLAIN
listener.name.mtls.ssl.client.auth=required
listener.name.mtls.ssl.principal.mapping.rules=$(mtls_rules)
PROPS
}

mtls_rules() {
  # ssl.principal.mapping.rules (KIP-371): for each user of tls/mtls-users ("<user> <tag>"
  # lines), its current certificate's exact subject to its name. A certificate a user
  # held before `rotate` (another tag), or after `remove`, maps to nothing. A '.' in a
  # name is matched as [.], without the backslash a properties file would eat.
  local u tag rules=""
  while read -r u tag; do
    rules="${rules:+$rules,}RULE:^CN=${u//./[.]},OU=$tag\$/$u/"
  done < "$CSTATE/tls/mtls-users"
  echo "$rules"
}

client_certs() {
  # $1 issue|revoke, $2... users: a new client certificate (CN=<user>, OU=a fresh random
  # tag; signed by the cluster's CA) and key in clients/<user>.mtls.crt and .key (0600),
  # or both removed; tls/mtls-users lists each user's current tag.
  "$PY" -P - "$CSTATE/tls" "$CSTATE/clients" "$@" <<'PYEOF' || die "could not $1 the client certificates (needs the cryptography package)"
import datetime, os, secrets, sys, tempfile
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
tls, clients, action, users = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def write(path, data):
    fd, new = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".new-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(new, path)
listed = f"{tls}/mtls-users"
tags = dict(line.split() for line in open(listed)) if os.path.exists(listed) else {}
if action == "issue":
    ca = x509.load_pem_x509_certificate(open(f"{tls}/ca.pem", "rb").read())
    ca_key = serialization.load_pem_private_key(open(f"{tls}/ca.key", "rb").read(), None)
    now = datetime.datetime.now(datetime.timezone.utc)
for user in users:
    if action == "revoke":
        tags.pop(user, None)
        for ext in ("crt", "key"):
            if os.path.exists(f"{clients}/{user}.mtls.{ext}"):
                os.remove(f"{clients}/{user}.mtls.{ext}")
        continue
    tags[user] = secrets.token_hex(6)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, tags[user]),
                         x509.NameAttribute(NameOID.COMMON_NAME, user)])   # RFC 2253: CN=<user>,OU=<tag>
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    write(f"{clients}/{user}.mtls.key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    write(f"{clients}/{user}.mtls.crt", cert.public_bytes(serialization.Encoding.PEM))
write(listed, "".join(f"{u} {t}\n" for u, t in sorted(tags.items())).encode())
PYEOF
}

cluster_clients() {
  # Each user's ($@) three client configs (0600), those missing made: SCRAM
  # (<user>.properties), PLAIN (<user>.plain.properties, a password of its own: one who
  # reads a PLAIN password, which crosses to the broker, learns nothing of the SCRAM one)
  # and mTLS (<user>.mtls.properties, with its certificate and key). The names are those
  # dpstream's client config reader takes (streams/worker/kafka.py).
  local u dir="$CSTATE/clients" ca="$CSTATE/tls/ca.pem" certs=()
  mkdir -p "$dir"
  for u in "$@"; do
    [ -f "$dir/$u.properties" ] || write_client "$dir" "$u" "$(addresses client)" "$ca"
    if [ ! -f "$dir/$u.plain.properties" ]; then
      write_client "$dir" "$u" "$(addresses plain)" "$ca" PLAIN "$u.plain.properties"
    fi
    [ -f "$dir/$u.mtls.properties" ] || certs+=("$u")
  done
  [ ${#certs[@]} -gt 0 ] || return 0
  client_certs issue "${certs[@]}"
  for u in "${certs[@]}"; do write_mtls_client "$u"; done
}

write_mtls_client() {
  printf 'bootstrap.servers=%s\nsecurity.protocol=SSL\nssl.ca.location=%s\nssl.certificate.location=%s\nssl.key.location=%s\n' \
    "$(addresses mtls)" "$CSTATE/tls/ca.pem" "$CSTATE/clients/$1.mtls.crt" "$CSTATE/clients/$1.mtls.key" \
    | write_new "$CSTATE/clients/$1.mtls.properties"
}

write_plain_jaas() {
  # The PLAIN listener's users (tls/plain.jaas, 0600), from their 0600 PLAIN client
  # configs; printf is a shell builtin, so no password is an argument of a process.
  local f u
  { echo "plain.KafkaServer {"
    echo "  org.apache.kafka.common.security.plain.PlainLoginModule required"
    for f in "$CSTATE"/clients/*.plain.properties; do
      [ -f "$f" ] || continue
      u="${f##*/}"; u="${u%.plain.properties}"
      printf '  user_%s="%s"\n' "$u" "$(password_of "$u.plain" "$CSTATE/clients")"
    done
    echo "  ;"
    echo "};"; } | write_new "$CSTATE/tls/plain.jaas"
}

write_cluster_config() {
  # Everything the nodes read, written anew (TLS material, client configs and cluster id
  # only once): the secured cluster's CA (its key kept: it signs the users' client
  # certificates) and broker certificate (one for the three nodes, all on 127.0.0.1),
  # each user's client configs, the PLAIN users, the internal admin's config, and each
  # node's server.properties and log4j2.properties.
  local n
  [ -f "$CSTATE/cluster.id" ] || cluster_ids | write_new "$CSTATE/cluster.id"
  if [ "$SECURE" = 1 ]; then
    make_secrets --keep-ca-key "$CSTATE/tls" localhost 127.0.0.1
    # shellcheck disable=SC2086  # USERS is a list
    cluster_clients $USERS
    write_plain_jaas
    broker_admin_config "$(addresses internal)" "$CSTATE/tls" | write_new "$CSTATE/tls/broker-admin.properties"
  fi
  for n in $NODES; do write_node_config "$n"; done
}

write_node_config() {
  on_node "$1"
  mkdir -p "$STATE/data"
  cluster_node_properties "$1" | write_new "$STATE/server.properties"
  write_log_config
}

cluster_scram() {       # scram (above) for the cluster's users, through the internal listeners
  local STATE="$CSTATE"
  scram "$@"
}

launch_node() {
  # Start node $1 (its storage formatted) in the background.
  on_node "$1"
  local -a opts=()
  [ "$SECURE" = 1 ] && opts=(-Djava.security.auth.login.config="$CSTATE/tls/plain.jaas")
  launch "${opts[@]}"
  node_config_sum > "$STATE/launched"
}

node_config_sum() {   # what node $STATE reads at start (its server.properties, the PLAIN users), as a checksum
  local files=("$STATE/server.properties")
  [ "$SECURE" = 1 ] && files+=("$CSTATE/tls/plain.jaas")
  cat "${files[@]}" | cksum
}

# ----------------------------------------------------------------- the cluster's verbs
cluster_start() {
  cluster_setup create
  [ -f "$CSTATE/cluster.env" ] || [ -z "$(ls -A "$CSTATE")" ] \
    || die "$CSTATE is not empty and holds no cluster (no cluster.env): give the cluster a new directory (DPSTREAM_KAFKA_CLUSTER_STATE)"
  [ -f "$CSTATE/cluster.env" ] || printf 'base=%s\nsecure=%s\n' "$CBASE" "$SECURE" | write_new "$CSTATE/cluster.env"
  local n kind p pid started=() pids=()
  for n in $NODES; do
    on_node "$n"
    running && continue                        # kept as it runs
    for kind in $(kinds); do
      p=$(port_of "$n" "$kind")
      port_open "$p" && die "127.0.0.1:$p (node $n's $kind listener) is taken by another process: stop it, or give the cluster other ports (KAFKA_CLUSTER_PORT, with a new DPSTREAM_KAFKA_CLUSTER_STATE)"
    done
    started+=("$n")
  done
  local users_set=0
  if [ ${#started[@]} -eq 0 ]; then
    users_set=1                                  # all three run: only wait until they answer
  else
    fetch
    need_tools
    write_cluster_config
  fi
  for n in "${started[@]}"; do
    ( on_node "$n"; format_storage "$(cat "$CSTATE/cluster.id")" ) & pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || exit 1; done      # the format's own line said why
  for n in "${started[@]}"; do launch_node "$n"; done
  local deadline=$((SECONDS + 180))
  while [ "$SECONDS" -lt "$deadline" ]; do
    for n in "${started[@]}"; do
      on_node "$n"
      running || { p="node $n exited during start: $(broker_error) (log: $STATE/server.log)"; kill_nodes "${started[@]}"; die "$p"; }
    done
    if [ "$SECURE" = 1 ] && [ "$users_set" = 0 ] && all_hold internal; then
      # shellcheck disable=SC2086  # USERS is a list
      cluster_scram set $USERS
      users_set=1
    fi
    if { [ "$SECURE" != 1 ] || [ "$users_set" = 1 ]; } && all_hold client \
        && brokers_answer count=3 "$(admin_config)" $(addresses client | tr , ' '); then
      echo "kafka.sh: a Kafka $VERSION cluster of 3 nodes ready: bootstrap $(addresses client)$([ "$SECURE" = 1 ] && echo ", SASL_SSL (client configs in $CSTATE/clients)") (state in $CSTATE)"
      return 0
    fi
    sleep 1
  done
  kill_nodes "${started[@]}"                    # not left running behind a failed start
  die "the cluster did not answer within 180 s, each node listing 3 brokers (stopped the nodes it started; see $CSTATE/node*/server.log)"
}

all_hold() {    # every node's listener $1 is held by that node
  local n
  for n in $NODES; do on_node "$n"; holds_port "$(port_of "$n" "$1")" || return 1; done
}

kill_nodes() {  # kill -9 the nodes $@ that run, and wait until they are gone
  local n pid
  for n in "$@"; do
    on_node "$n"
    running || { rm -f "$STATE/kafka.pid"; continue; }
    pid=$(broker_pid)
    kill -9 "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.1; done
    rm -f "$STATE/kafka.pid"
  done
}

stop_nodes() {
  # SIGTERM to the nodes $2... that run, all at once (a controlled shutdown each: their
  # partitions' leadership moves to the others first), and wait up to $1 s for them; one
  # still running then is killed (-9), and said so. A node's controlled shutdown waits
  # for the active controller's approval (Kafka's BrokerServer.shutdown, up to minutes):
  # when all three stop together, the last one now and then still waits after the other
  # two took the quorum with them (about 1 stop in 5 here), so `cluster stop` gives
  # them 20 s (a full stop takes 6-9 s here) and `stop-node` 60.
  local grace="$1" n pid pids=() nodes=(); shift
  local deadline=$((SECONDS + grace))
  for n in "$@"; do
    on_node "$n"
    if running; then pid=$(broker_pid); kill "$pid" 2>/dev/null || true; pids+=("$pid"); nodes+=("$n"); fi
    rm -f "$STATE/kafka.pid"
  done
  for i in "${!pids[@]}"; do
    while alive "${pids[$i]}" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if alive "${pids[$i]}"; then
      kill -9 "${pids[$i]}" 2>/dev/null || true
      while alive "${pids[$i]}"; do sleep 0.1; done
      echo "kafka.sh: node ${nodes[$i]} did not stop within $grace s: killed (-9)" >&2
    fi
  done
  [ ${#nodes[@]} -eq 0 ] || echo "kafka.sh: stopped node(s) ${nodes[*]}"
}

start_node() {
  # Node $1 again, from its own storage and configuration, back in the cluster: it answers
  # a metadata request that lists itself as a live broker (registered and unfenced by
  # the controller). Its replicas then catch up and rejoin the ISRs by themselves.
  local n="$1" kind p
  on_node "$n"
  [ -f "$STATE/data/meta.properties" ] || die "node $n has no storage in $STATE: start the cluster (scripts/kafka.sh cluster start)"
  if ! running; then
    for kind in $(kinds); do
      p=$(port_of "$n" "$kind")
      port_open "$p" && die "127.0.0.1:$p (node $n's $kind listener) is taken by another process"
    done
    fetch
    launch_node "$n"
  fi
  local deadline=$((SECONDS + 120))
  while [ "$SECONDS" -lt "$deadline" ]; do
    on_node "$n"
    running || die "node $n exited during start: $(broker_error) (log: $STATE/server.log)"
    if node_in_cluster "$n"; then echo "kafka.sh: node $n is in the cluster (pid $(broker_pid), 127.0.0.1:$PORT)"; return 0; fi
    sleep 0.5
  done
  die "node $n did not rejoin the cluster within 120 s (it still runs; see $STATE/server.log)"
}

cluster_status() {
  # One line per node (key=value, for scripts), then the bootstrap servers and the state
  # directory; exit 0 when all three run and hold their client port, else 1.
  local n pid run all=0 line
  for n in $NODES; do
    on_node "$n"
    pid=-; run=no
    if running; then
      pid=$(broker_pid); run=starting
      holds_port "$PORT" && run=yes
    fi
    [ "$run" = yes ] || all=1
    line="node=$n running=$run pid=$pid client=127.0.0.1:$PORT controller=127.0.0.1:$CPORT"
    [ "$SECURE" = 1 ] && line="$line internal=127.0.0.1:$IPORT plain=127.0.0.1:$(port_of "$n" plain) mtls=127.0.0.1:$(port_of "$n" mtls)"
    echo "$line"
  done
  echo "bootstrap=$(addresses client)"
  if [ "$SECURE" = 1 ]; then
    echo "bootstrap.plain=$(addresses plain)"
    echo "bootstrap.mtls=$(addresses mtls)"
    echo "clients=$CSTATE/clients"
  fi
  echo "state=$CSTATE"
  return $all
}

wait_replicated() {
  # Every partition of every topic has its full ISR again (up to 120 s): what a rolling
  # restart waits for before it stops the next node (min ISR 2 of 3 would otherwise refuse
  # acks=all writes while two replicas are away).
  "$PY" -P - "$(addresses client)" "$(admin_config)" <<'PYEOF' 2>/dev/null || die "some partitions were still under-replicated after 120 s"
import asyncio, sys, time
from dpstream.streams.worker.kafka import Kafka, running
async def replicated(kafka):
    async with running(kafka.admin(request_timeout_ms=10000)) as admin:
        topics = await admin.describe_topics(await admin.list_topics())
    return all(t["error_code"] == 0 and all(len(p["isr"]) == len(p["replicas"]) for p in t["partitions"])
               for t in topics)
async def main():
    kafka = Kafka.from_settings(sys.argv[1], sys.argv[2] or None, environ={})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if await replicated(kafka):
                return 0
        except Exception:              # a node restarting: asked again
            pass
        await asyncio.sleep(1)
    return 1
sys.exit(asyncio.run(main()))
PYEOF
}

roll() {
  # A rolling restart with the configuration written anew: each running node that was
  # started with another one (its "launched" checksum) in turn stopped cleanly, started,
  # back in the cluster, and every partition fully replicated again before the next.
  # What makes a changed PLAIN password or client certificate count (the nodes read them
  # at start); run again, it finishes what an interrupted one left.
  local n restarted=()
  write_plain_jaas
  for n in $NODES; do
    write_node_config "$n"
    running || continue
    [ "$(node_config_sum)" = "$(cat "$STATE/launched" 2>/dev/null)" ] && continue
    stop_nodes 60 "$n" >/dev/null
    start_node "$n" >/dev/null
    wait_replicated
    restarted+=("$n")
  done
  [ ${#restarted[@]} -eq 0 ] || echo "kafka.sh: restarted node(s) ${restarted[*]} so that they take the PLAIN users and client certificates as they are now" >&2
}

need_secure_cluster() {
  need_cluster
  [ "$SECURE" = 1 ] || die "'$VERB' is for the secured cluster: KAFKA_SECURE=1 scripts/kafka.sh cluster $VERB ..."
  local n
  for n in $NODES; do on_node "$n"; running && return 0; done
  die "no node of the cluster of $CSTATE runs: KAFKA_SECURE=1 scripts/kafka.sh cluster start"
}

cluster_users() {
  need_secure_cluster
  [ $# -gt 0 ] || die "usage: KAFKA_SECURE=1 scripts/kafka.sh cluster users NAME..."
  local u
  for u in "$@"; do valid_user "$u"; done
  cluster_clients "$@"
  cluster_scram set "$@"
  roll
  echo "kafka.sh: users $* ready, SCRAM, PLAIN and mTLS (client configs in $CSTATE/clients)"
}

cluster_rotate() {
  need_secure_cluster
  [ $# = 1 ] || die "usage: KAFKA_SECURE=1 scripts/kafka.sh cluster rotate NAME"
  valid_user "$1"
  local dir="$CSTATE/clients"
  [ -f "$dir/$1.properties" ] || die "no user $1 (no $dir/$1.properties)"
  write_new "$dir/$1.properties.old" < "$dir/$1.properties"
  write_client "$dir" "$1" "$(addresses client)" "$CSTATE/tls/ca.pem"
  cluster_scram set "$1"
  rm -f "$dir/$1.properties.old"
  write_client "$dir" "$1" "$(addresses plain)" "$CSTATE/tls/ca.pem" PLAIN "$1.plain.properties"
  client_certs issue "$1"
  write_mtls_client "$1"
  roll
  local STATE="$CSTATE/node1"
  echo "kafka.sh: new credentials for $1 in $dir/$1.{properties,plain.properties,mtls.properties}; the old ones are refused at their next login, $(live_sessions)"
}

cluster_remove() {
  need_secure_cluster
  [ $# = 1 ] && [ "$1" != admin ] || die "usage: KAFKA_SECURE=1 scripts/kafka.sh cluster remove NAME (not admin)"
  valid_user "$1"
  local dir="$CSTATE/clients"
  [ -f "$dir/$1.properties" ] || die "no user $1 (no $dir/$1.properties)"
  cluster_scram delete "$1"
  rm -f "$dir/$1.properties" "$dir/$1.plain.properties" "$dir/$1.mtls.properties"
  client_certs revoke "$1"
  roll
  local STATE="$CSTATE/node1"
  echo "kafka.sh: user $1 removed (SCRAM, PLAIN, mTLS); its credentials are refused at their next login, $(live_sessions)"
}

cluster_main() {
  VERB="${1:-}"
  case "$VERB" in
    start) cluster_start ;;
    stop) need_cluster; stop_nodes 20 $NODES ;;
    status) need_cluster; cluster_status ;;
    bootstrap) need_cluster; addresses client ;;
    reset) cluster_setup
           if [ -f "$CSTATE/cluster.env" ]; then stop_nodes 20 $NODES
           elif [ -d "$CSTATE" ] && [ -n "$(ls -A "$CSTATE")" ]; then
             die "$CSTATE holds no cluster (no cluster.env): not deleting it"
           fi
           rm -rf "$CSTATE" ;;
    kill) node_arg "${2:-}"; need_cluster
          on_node "$2"
          if running; then p=$(broker_pid); kill_nodes "$2"; echo "kafka.sh: node $2 killed (kill -9 of pid $p)"
          else echo "kafka.sh: node $2 is not running"; fi ;;
    stop-node) node_arg "${2:-}"; need_cluster
               on_node "$2"
               if running; then stop_nodes 60 "$2"; else echo "kafka.sh: node $2 is not running"; fi ;;
    start-node) node_arg "${2:-}"; need_cluster; start_node "$2" ;;
    clients) need_cluster
             [ "$SECURE" = 1 ] || die "'clients' is for the secured cluster: KAFKA_SECURE=1 scripts/kafka.sh cluster clients"
             safe_dir "$CSTATE/clients" "the client configs' directory" "start over in a new state directory (scripts/kafka.sh cluster reset)" "" private \
               || die "no client configs in $CSTATE/clients: start the secured cluster first (KAFKA_SECURE=1 scripts/kafka.sh cluster start)"
             echo "$SAFE_DIR" ;;
    users) shift; cluster_users "$@" ;;
    rotate) shift; cluster_rotate "$@" ;;
    remove) shift; cluster_remove "$@" ;;
    *) echo "usage: $0 cluster start|stop|status|bootstrap|reset|kill N|stop-node N|start-node N|clients|users NAME...|rotate NAME|remove NAME" >&2; exit 2 ;;
  esac
}

case "${1:-}" in
  start) start ;;
  compose-secrets) compose_secrets "${2:-}" ;;
  stop) stop ;;
  fetch) fetch print ;;
  cluster-ids) [[ "${2:-1}" =~ ^[1-9][0-9]{0,4}$ ]] || die "cluster-ids takes a count from 1 to 99999"
               cluster_ids "${2:-1}" ;;
  clients) [ "$SECURE" = 1 ] || die "'clients' is for the secured broker: KAFKA_SECURE=1 scripts/kafka.sh clients"
           check_state
           safe_dir "$STATE/clients" "the client configs' directory" "start over in a new state directory (scripts/kafka.sh reset, or set DPSTREAM_KAFKA_STATE)" "" private \
             || die "no client configs in $STATE/clients: start the secured broker first (KAFKA_SECURE=1 scripts/kafka.sh start)"
           echo "$SAFE_DIR" ;;
  users) shift; users "$@" ;;
  rotate) shift; rotate "$@" ;;
  remove) shift; remove_user "$@" ;;
  status) check_state
          if running && holds_port "$PORT"; then echo "running on 127.0.0.1:$PORT (state in $STATE)"
          else echo "not running (state in $STATE)"; exit 1; fi ;;
  reset) stop; rm -rf "$STATE" ;;
  cluster) shift; cluster_main "$@" ;;
  *) echo "usage: $0 start|stop|status|fetch|reset|compose-secrets [DIR]|cluster-ids [N]|clients|users NAME...|rotate NAME|remove NAME|cluster VERB" >&2; exit 2 ;;
esac
