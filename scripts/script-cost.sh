#!/bin/sh
# Counts the Redis instructions per decision of the token-bucket script:
# redis-server under valgrind's callgrind, a fixed load (internal/transport's
# TestScriptLoad: 9 600 decisions in 300 calls; SCRIPT_COST_BATCH=1 for
# 9 600 calls of one; SCRIPT_COST_ACROSS=1 for AllowAll's of one check, =3 of three), less the server's idle
# instructions. Instruction counts move less than 1 % with the machine's load,
# so two versions of internal/transport/scripts.go compare in one number each.
# REDIS names another redis-server (one built with symbols, to profile);
# SCRIPT_COST_OUT keeps the loaded run's callgrind output there, for
# callgrind_annotate.
set -eu
cd "$(dirname "$0")/.."
port=${SCRIPT_COST_PORT:-26999}
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
go test -c -o "$dir/transport.test" ./internal/transport
count() { # $1: whether to send the load
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
    "${REDIS:-redis-server}" --port "$port" --save "" --appendonly no --dir "$dir" >"$dir/vg.log" 2>&1 &
  i=0
  until redis-cli -p "$port" ping >/dev/null 2>&1; do
    i=$((i + 1)); [ "$i" -lt 100 ] || { echo "redis-server did not start" >&2; exit 1; }; sleep 0.2
  done
  if [ "$1" = load ]; then
    RATELIMIT_SCRIPT_LOAD_BATCH=${SCRIPT_COST_BATCH:-32} RATELIMIT_SCRIPT_LOAD_ACROSS=${SCRIPT_COST_ACROSS:-} RATELIMIT_SCRIPT_LOAD_ADDR=127.0.0.1:$port "$dir/transport.test" -test.run '^TestScriptLoad$' -test.count 1 >/dev/null
  fi
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait
  callgrind_annotate "$dir/cg.out" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}
idle=$(count idle)
busy=$(count load)
# EVALSHA's own instructions do not count the event loop's, which move a
# little with the machine's speed.
script=$(callgrind_annotate --inclusive=yes "$dir/cg.out" | awk '/:evalShaCommand / { gsub(",", "", $1); print $1; exit }')
[ -z "${SCRIPT_COST_OUT:-}" ] || cp "$dir/cg.out" "$SCRIPT_COST_OUT"
echo "redis-server instructions: $busy with the load, $idle idle, $script in EVALSHA"
echo "per decision: $(( (busy - idle) / 9600 )), of which the script call $(( script / 9600 ))"
