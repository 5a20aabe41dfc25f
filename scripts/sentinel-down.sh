#!/usr/bin/env bash
# Stops the Sentinel setup that sentinel-up.sh started (same SENTINEL_PORT)
# and removes its directory. Never touches a process it did not start.
set -euo pipefail
. "$(dirname "$0")/topology-lib.sh"
dir="${TMPDIR:-/tmp}/ratelimit-sentinel-${SENTINEL_PORT:-26390}"
stop_dir "$dir" || echo "sentinel-down: no setup started by sentinel-up at $dir"
