#!/usr/bin/env bash
# User-space instructions per RLS decision of `floodgate serve`
# (examples/bench.yaml: every call a full decision that passes), counted by
# valgrind's callgrind under the load generator of `floodgate bench rls`:
# unlike time, the count does not move with the machine's load.
#
#   crates/floodgate-server/bench/instructions.sh [DURATION]
#   SERVE_ARGS="--grpc-http2 direct" crates/floodgate-server/bench/instructions.sh
#
# Prints the decisions counted and the instructions per decision; with
# TOP=N also the N functions that cost most per decision. The count covers
# the measured window only (counters zeroed after a warm-up) and the
# decisions are read from the service's own floodgate_requests_total.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DUR=${1:-5s}
BIN=${CARGO_TARGET_DIR:-target}/release/floodgate
need=()
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
command -v curl >/dev/null 2>&1 || need+=(curl)
scripts/apt-install "${need[@]}"
cargo build --release -p floodgate-cli --quiet
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$WORK/cg.out" \
    "$BIN" serve --config examples/bench.yaml --workers 1 ${SERVE_ARGS:-} >"$WORK/valgrind.log" 2>&1 &
PID=$!
for _ in $(seq 600); do (echo > /dev/tcp/127.0.0.1/18181) 2>/dev/null && break; sleep 0.1; done
load() { # $1: duration
    "$BIN" bench rls --addr 127.0.0.1:18181 --concurrency 64 --connections 4 \
        --keys 10000 --warmup 0s --duration "$1"
}
decisions() {
    curl -s 127.0.0.1:16170/metrics |
        awk '/^floodgate_requests_total\{api="grpc"/ {s += $2} END {print s + 0}'
}
load 3s >/dev/null
callgrind_control -z "$PID" >/dev/null 2>&1
n0=$(decisions)
load "$DUR"
n1=$(decisions)
callgrind_control -d "$PID" >/dev/null 2>&1
kill -INT "$PID" 2>/dev/null || true
wait "$PID" 2>/dev/null || true
PID=

n=$((n1 - n0))
echo "== $n decisions"
scripts/callgrind-cost "$WORK/cg.out.1" "$n" decision "${TOP:-0}"
