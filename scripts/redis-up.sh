#!/usr/bin/env bash
# Starts a redis-server on REDIS_ADDR (default 127.0.0.1:6379) unless one
# already answers there. Keeps nothing on disk. redis-down.sh stops it.
set -euo pipefail
addr="${REDIS_ADDR:-127.0.0.1:6379}"
host="${addr%:*}"; port="${addr##*:}"
if redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then
  echo "redis-up: Redis already answers at $addr"; exit 0
fi
dir="${TMPDIR:-/tmp}/ratelimit-redis-$port"
mkdir -p "$dir"
redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no \
  --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
for _ in $(seq 50); do
  redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1 && { echo "redis-up: started Redis at $addr"; exit 0; }
  sleep 0.1
done
echo "redis-up: Redis did not start at $addr; see $dir/redis.log" >&2; exit 1
