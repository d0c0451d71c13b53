#!/usr/bin/env bash
# Start or stop a Dask scheduler and two workers on this machine (for the --scheduler path).
# Usage: bash deploy/local-cluster.sh start|stop [port]
set -euo pipefail
cmd=${1:-start}
port=${2:-8786}
run_dir=${DASKCLUST_CLUSTER_DIR:-/tmp/daskclust-cluster}
mkdir -p "$run_dir"
case "$cmd" in
  start)
    dask scheduler --port "$port" --dashboard-address :0 >"$run_dir/scheduler.log" 2>&1 &
    echo $! >"$run_dir/scheduler.pid"
    sleep 2
    for i in 1 2; do
      dask worker "tcp://127.0.0.1:$port" --nthreads 1 --memory-limit 4GiB >"$run_dir/worker$i.log" 2>&1 &
      echo $! >"$run_dir/worker$i.pid"
    done
    echo "scheduler: tcp://127.0.0.1:$port (logs in $run_dir)"
    ;;
  stop)
    for f in "$run_dir"/*.pid; do
      [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
      rm -f "$f"
    done
    ;;
  *)
    echo "usage: $0 start|stop [port]" >&2
    exit 2
    ;;
esac
