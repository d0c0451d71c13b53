#!/usr/bin/env bash
# Start or stop a Dask scheduler and two workers on this machine (for the --scheduler path).
# Usage: bash deploy/local-cluster.sh start|stop [port]
#
# Everything (scheduler, workers, nannies, dashboards) listens on 127.0.0.1 only: a Dask
# scheduler runs any code a client sends it. DASKCLUST_CLUSTER_HOST changes the interface;
# never bind it beyond loopback without TLS (see deploy/README.md, "Running securely").
set -euo pipefail
cmd=${1:-start}
port=${2:-8786}
host=${DASKCLUST_CLUSTER_HOST:-127.0.0.1}
run_dir=${DASKCLUST_CLUSTER_DIR:-/tmp/daskclust-cluster}
start_timeout=${DASKCLUST_CLUSTER_START_TIMEOUT:-30}  # seconds for the scheduler to come up (~2 s here)
mkdir -p "$run_dir"

stop_pids() {
  # TERM the processes whose pid files are given, wait up to 10 s for them to exit, then KILL.
  local pids=() f pid alive
  for f in "$@"; do
    [ -e "$f" ] || continue
    pids+=("$(cat "$f")")
    rm -f "$f"
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ "$alive" -eq 0 ] && return 0
    sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

stop_all() {
  # Workers first: a worker whose scheduler is gone waits for it ~8 s before it gives up.
  stop_pids "$run_dir"/worker*.pid
  stop_pids "$run_dir"/scheduler.pid
}

case "$cmd" in
  start)
    rm -f "$run_dir/scheduler.json"
    dask scheduler --host "$host" --port "$port" --dashboard-address "$host:0" \
      --scheduler-file "$run_dir/scheduler.json" >"$run_dir/scheduler.log" 2>&1 &
    echo $! >"$run_dir/scheduler.pid"
    for _ in $(seq 1 $((start_timeout * 10))); do
      [ -s "$run_dir/scheduler.json" ] && break
      sleep 0.1
    done
    if [ ! -s "$run_dir/scheduler.json" ]; then
      echo "the scheduler did not start within $start_timeout s; its log:" >&2
      tail -n 20 "$run_dir/scheduler.log" >&2 || true
      stop_all
      exit 1
    fi
    for i in 1 2; do
      dask worker --scheduler-file "$run_dir/scheduler.json" --host "$host" --dashboard-address "$host:0" \
        --nthreads 1 --memory-limit 4GiB --local-directory "$run_dir" >"$run_dir/worker$i.log" 2>&1 &
      echo $! >"$run_dir/worker$i.pid"
    done
    echo "scheduler: tcp://$host:$port (logs in $run_dir)"
    ;;
  stop)
    stop_all
    ;;
  *)
    echo "usage: $0 start|stop [port]" >&2
    exit 2
    ;;
esac
