#!/usr/bin/env bash
# User-space instructions per request of each proxy in the gateway
# benchmark (docs/benchmarks.md, "Instructions per request"), counted by
# valgrind's callgrind: unlike time, the count does not move with the
# machine's load. The same five configurations as run.sh, at low load
# (wrk, 8 connections, 100 000 keys); kernel time is not counted.
#
#   crates/floodgate-gateway/bench/instructions.sh [DURATION]
#
# Prints, per configuration, the requests served and the instructions per
# request; with TOP=N also the N functions that cost most per request;
# with CACHE=1 also the cache misses of callgrind's cache simulation
# (I1mr: instruction-cache read misses, D1mr/D1mw: data-cache ones).
# CACHE=1 changes no instruction count.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DUR=${1:-10s}
BENCH=crates/floodgate-gateway/bench
BIN=${CARGO_TARGET_DIR:-target}/release/floodgate
NGINX=${NGINX:-/usr/sbin/nginx}
need=()
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
scripts/apt-install "${need[@]}"
cargo build --release -p floodgate-cli --quiet
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

"$BIN" bench upstream --listen 127.0.0.1:9000 --workers 1 >/dev/null 2>&1 &
PIDS+=($!)
sed -e 's/responses: {status: 503}/responses: {status: 503, on_success: false}/' \
    "$BENCH/gateway-limited.yaml" > "$WORK/gateway-quiet.yaml"

wait_port() { for _ in $(seq 600); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 not open" >&2; return 1; }

measure() { # $1: label, $2: port, then the command
    local label=$1 port=$2; shift 2
    valgrind --tool=callgrind ${CACHE:+--cache-sim=yes} --compress-strings=no --compress-pos=no \
        --callgrind-out-file="$WORK/cg.out" "$@" >"$WORK/valgrind.log" 2>&1 &
    local pid=$!
    wait_port "$port"
    wrk -t1 -c8 -d3s -s "$BENCH/keys.lua" "http://127.0.0.1:$port/" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    wrk -t1 -c8 -d"$DUR" -s "$BENCH/keys.lua" "http://127.0.0.1:$port/" >"$WORK/wrk.txt"
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill -INT "$pid" 2>/dev/null || true
    sleep 2
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    local n; n=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    echo "== $label: $n requests"
    scripts/callgrind-cost "$WORK/cg.out.1" "$n" request "${TOP:-0}"
    rm -f "$WORK"/cg.out*
}

nginx_conf() { # $1: the limit_req line (or nothing)
    sed -e "s#@DIR@#$WORK#g" -e "s#@LIMIT@#$1#" "$BENCH/nginx.conf" > "$WORK/nginx.conf"
}
wait_port 9000
nginx_conf "limit_req zone=bench burst=20 nodelay;"
measure "nginx, limit_req" 8081 "$NGINX" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf"
nginx_conf ""
measure "nginx, no limit" 8081 "$NGINX" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf"
measure "gateway, shaper" 8082 "$BIN" gateway --config "$BENCH/gateway-limited.yaml"
measure "gateway, shaper, headers on rejections only" 8082 "$BIN" gateway --config "$WORK/gateway-quiet.yaml"
measure "gateway, no limit" 8083 "$BIN" gateway --config "$BENCH/gateway-plain.yaml" --allow-empty-config
