#!/usr/bin/env bash
# Stops the cluster that cluster-up.sh started (same CLUSTER_PORT) and
# removes its directory. Never touches a process it did not start.
set -euo pipefail
. "$(dirname "$0")/topology-lib.sh"
dir="${TMPDIR:-/tmp}/ratelimit-cluster-${CLUSTER_PORT:-7000}"
stop_dir "$dir" || echo "cluster-down: no cluster started by cluster-up at $dir"
