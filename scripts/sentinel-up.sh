#!/usr/bin/env bash
# Starts a local Sentinel setup on loopback: a primary on SENTINEL_DATA_PORT
# (default 6390), its replica on the next port, and three sentinels from
# SENTINEL_PORT (default 26390) up, monitoring it as SENTINEL_MASTER
# (default mymaster) with quorum 2. Keeps nothing on disk but the
# sentinels' own config files. sentinel-down.sh stops it.
set -euo pipefail
. "$(dirname "$0")/topology-lib.sh"
data="${SENTINEL_DATA_PORT:-6390}"; first="${SENTINEL_PORT:-26390}"; name="${SENTINEL_MASTER:-mymaster}"
dir="${TMPDIR:-/tmp}/ratelimit-sentinel-$first"
if [ -d "$dir" ]; then
  echo "sentinel-up: $dir exists; is a setup already up? (sentinel-down.sh stops it)" >&2; exit 1
fi
for p in "$data" $((data + 1)) "$first" $((first + 1)) $((first + 2)); do
  port_free "$p" || { echo "sentinel-up: port $p is in use" >&2; exit 1; }
done
trap 'echo "sentinel-up: failed; cleaning up" >&2; SENTINEL_PORT=$first "$(dirname "$0")/sentinel-down.sh" >/dev/null' ERR
start_node "$dir" "$data"
start_node "$dir" $((data + 1)) --replicaof 127.0.0.1 "$data"
# Sentinels read the primary's INFO at once and then every 10s: attach the
# replica first, so they see it from the start.
for i in $(seq 100); do
  redis-cli -p $((data + 1)) info replication | grep -q 'master_link_status:up' && break
  [ "$i" = 100 ] && { echo "sentinel-up: replica not in sync after 10s" >&2; false; }
  sleep 0.1
done
sentinels=()
for p in "$first" $((first + 1)) $((first + 2)); do
  mkdir -p "$dir/$p"
  cat >"$dir/$p/sentinel.conf" <<CONF
sentinel monitor $name 127.0.0.1 $data 2
sentinel down-after-milliseconds $name 1000
sentinel failover-timeout $name 3000
sentinel parallel-syncs $name 1
CONF
  redis-server "$dir/$p/sentinel.conf" --sentinel --daemonize yes --bind 127.0.0.1 --port "$p" \
    --dir "$dir/$p" --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log"
  wait_ping "$p"
  sentinels+=("127.0.0.1:$p")
done
for p in "$first" $((first + 1)) $((first + 2)); do
  for i in $(seq 300); do
    redis-cli -p "$p" sentinel master "$name" | grep -A1 '^num-other-sentinels$' | grep -qx 2 && break
    [ "$i" = 300 ] && { echo "sentinel-up: sentinel $p does not see the others after 30s" >&2; false; }
    sleep 0.1
  done
done
echo "sentinel-up: primary 127.0.0.1:$data, replica 127.0.0.1:$((data + 1)), master name $name"
echo "export REDIS_SENTINEL_ADDRS=$(IFS=,; echo "${sentinels[*]}") REDIS_SENTINEL_MASTER=$name"
