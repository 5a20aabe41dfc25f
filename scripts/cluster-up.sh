#!/usr/bin/env bash
# Starts a local Redis Cluster on loopback: CLUSTER_PRIMARIES primaries
# (default 3) with CLUSTER_REPLICAS replicas each (default 1), on ports from
# CLUSTER_PORT (default 7000) up; each node's bus is on port+10000. Keeps
# nothing on disk. cluster-down.sh stops it.
set -euo pipefail
. "$(dirname "$0")/topology-lib.sh"
first="${CLUSTER_PORT:-7000}"; primaries="${CLUSTER_PRIMARIES:-3}"; replicas="${CLUSTER_REPLICAS:-1}"
dir="${TMPDIR:-/tmp}/ratelimit-cluster-$first"
n=$((primaries * (1 + replicas)))
ports=$(seq "$first" $((first + n - 1)))
if [ -d "$dir" ]; then
  echo "cluster-up: $dir exists; is a cluster already up? (cluster-down.sh stops it)" >&2; exit 1
fi
for p in $ports; do
  port_free "$p" && port_free $((p + 10000)) || { echo "cluster-up: port $p or $((p + 10000)) is in use" >&2; exit 1; }
done
trap 'echo "cluster-up: failed; cleaning up" >&2; CLUSTER_PORT=$first "$(dirname "$0")/cluster-down.sh" >/dev/null' ERR
addrs=()
for p in $ports; do
  start_node "$dir" "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000
  addrs+=("127.0.0.1:$p")
done
redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log"
for p in $ports; do
  for i in $(seq 300); do
    redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' && break
    [ "$i" = 300 ] && { echo "cluster-up: node $p not ok after 30s" >&2; false; }
    sleep 0.1
  done
done
echo "cluster-up: $primaries primaries, $replicas replicas each, on 127.0.0.1:$first-$((first + n - 1))"
echo "export REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${addrs[*]}")"
