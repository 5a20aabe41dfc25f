#!/usr/bin/env bash
# Stops the redis-server that redis-up.sh started (never one it did not start).
set -euo pipefail
addr="${REDIS_ADDR:-127.0.0.1:6379}"; port="${addr##*:}"
pidfile="${TMPDIR:-/tmp}/ratelimit-redis-$port/redis.pid"
if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" && rm -f "$pidfile" && echo "redis-down: stopped Redis at $addr"
else echo "redis-down: no Redis started by redis-up at $addr"; fi
