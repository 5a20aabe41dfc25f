# Shared by cluster-up/down.sh and sentinel-up/down.sh: start and stop
# loopback redis-server processes that keep nothing on disk. Sourced, not run.

# port_free PORT: true when nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_ping PORT: wait up to 10s for PONG on 127.0.0.1:PORT.
wait_ping() {
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "$(basename "$0"): nothing answers on 127.0.0.1:$1" >&2; return 1
}

# start_node DIR PORT ARGS...: a daemonized redis-server on 127.0.0.1:PORT,
# its pid file, log and data in DIR/PORT.
start_node() {
  local dir="$1/$2" port="$2"; shift 2
  mkdir -p "$dir"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --repl-diskless-sync-delay 0 --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@"
  wait_ping "$port"
}

# stop_dir DIR: kill the redis-server processes whose pid files are under DIR
# (only those: the pid must still belong to a redis-server), then remove DIR.
stop_dir() {
  local dir="$1" pid pidfile n=0
  [ -d "$dir" ] || return 1
  for pidfile in "$dir"/*/redis.pid; do
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q redis-server; then
      kill "$pid" && n=$((n + 1))
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  done
  rm -rf "$dir"
  echo "$(basename "$0"): stopped $n processes, removed $dir"
}
