#!/usr/bin/env bash
# Random experiment pages: glassbox against nginx serving the same bytes as files, side by side
# in one run (the performance goal: >= 0.25x nginx's requests/s, p99 < 50 ms at 64
# connections). Both are measured with wrk (2 threads, 64 connections), alternately, ROUNDS
# times each, on the web load example's lab (10,000 experiments, 10M metric points).
#
# The lab is generated (or reused from $DIR), every experiment page is asked for once
# (`web_load --export`: each is drawn once, as its first view would, and the bytes are written
# for nginx), then glassbox keeps serving it (`web_load --serve`).
#
# Needs: nginx and wrk (Debian: apt-get install -y nginx-light wrk), a release build of the
# example (this script builds it). Usage: bench/web-pages.sh [DIR] (default target/web-pages).
# Prints wrk's summary for each round, then one line per server with requests/s and p99, the
# ratio, and the load average before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-target/web-pages}
RUNS=${RUNS:-10000}
POINTS=${POINTS:-10000000}
SECONDS_EACH=${SECONDS_EACH:-10}
ROUNDS=${ROUNDS:-2}
GB_PORT=${GB_PORT:-18081}
NGINX_PORT=${NGINX_PORT:-18082}
for tool in nginx wrk; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install -y nginx-light wrk" >&2; exit 2; }
done
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release -p glassbox-web --features bench --example web_load
BIN="$TARGET/release/examples/web_load"

rm -rf "$DIR/static"
# Emptied here, not by the redirection below: that happens in the child, possibly after the
# wait loop has read the previous run's log.
: >"$DIR/web_load.log"
"$BIN" --runs "$RUNS" --points "$POINTS" --dir "$DIR/lab" --export "$DIR/static" \
  --serve "127.0.0.1:$GB_PORT" 2>"$DIR/web_load.log" &
GB_PID=$!
cleanup() {
  kill "$GB_PID" 2>/dev/null || true
  [ -f "$DIR/nginx.pid" ] && kill "$(cat "$DIR/nginx.pid")" 2>/dev/null || true
}
trap cleanup EXIT
until grep -q "serving http" "$DIR/web_load.log"; do
  kill -0 "$GB_PID" 2>/dev/null || { cat "$DIR/web_load.log" >&2; exit 1; }
  sleep 1
done
cat "$DIR/web_load.log" >&2

# nginx: the exported pages as files, keep-alive, sendfile, no access log.
cat >"$DIR/nginx.conf" <<CONF
worker_processes 2;
pid $DIR/nginx.pid;
error_log $DIR/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  default_type text/html;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $DIR/static;
  }
}
CONF
nginx -c "$DIR/nginx.conf"
sleep 1
curl -fsS -o /dev/null "http://127.0.0.1:$NGINX_PORT/experiments/load/lab%231" \
  || { echo "nginx does not serve the exported pages" >&2; exit 1; }

export RUNS
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A RPS P99
for round in $(seq 1 "$ROUNDS"); do
  for server in nginx glassbox; do
    port=$NGINX_PORT; [ "$server" = glassbox ] && port=$GB_PORT
    out=$(wrk -t2 -c64 -d"${SECONDS_EACH}s" --latency -s bench/web-pages.lua "http://127.0.0.1:$port")
    echo "== $server, round $round"; echo "$out"
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    RPS[$server]="${RPS[$server]:-} $rps"
    P99[$server]="${P99[$server]:-} $p99"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
echo
echo "load average before: $load_before; after: $load_after"
for server in nginx glassbox; do
  echo "$server: req/s${RPS[$server]}; p99${P99[$server]}"
done
mean() { echo "$@" | tr ' ' '\n' | awk 'NF {s += $1; n++} END {printf "%.0f", s / n}'; }
n=$(mean ${RPS[nginx]}); g=$(mean ${RPS[glassbox]})
awk -v g="$g" -v n="$n" 'BEGIN {printf "glassbox / nginx: %.0f / %.0f req/s = %.2fx (goal >= 0.25x)\n", g, n, g / n}'
curl -fsS "http://127.0.0.1:$GB_PORT/metrics" | grep -E '^glassbox_(page|render)_cache' || true
