#!/usr/bin/env bash
# The gateway benchmark (docs/benchmarks.md, "Gateway"): nginx with
# limit_req, nginx without, the gateway with the equivalent policy, and the
# gateway without limits, all in front of the same upstream, driven by wrk.
#
# Layout on a 2-core machine: the proxy under test on core 0 (one worker);
# wrk (one thread) and the upstream (one worker) on core 1.
#
#   [ROUNDS=3] crates/floodgate-gateway/bench/run.sh [DURATION] [CONNECTIONS]
#
# Ends with a summary: medians over the rounds, and the targets' ratios
# paired within each round (bench/summary.py).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DUR=${1:-15s}
CONNS=${2:-64}
BENCH=crates/floodgate-gateway/bench
BIN=${CARGO_TARGET_DIR:-target}/release/floodgate
NGINX=${NGINX:-/usr/sbin/nginx}
cargo build --release -p floodgate-cli --quiet
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

taskset -c 1 "$BIN" bench upstream --listen 127.0.0.1:9000 --workers 1 >/dev/null 2>&1 &
PIDS+=($!)

nginx_conf() { # $1: the limit_req line (or nothing)
    sed -e "s#@DIR@#$WORK#g" -e "s#@LIMIT@#$1#" "$BENCH/nginx.conf" > "$WORK/nginx.conf"
}
wait_port() { for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not open" >&2; return 1; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system ticks
load() { # $1: label, $2: port, $3: the proxy's pid
    wait_port "$2"
    # Warm up (connections, the upstream pool, the key tables).
    taskset -c 1 wrk -t1 -c"$CONNS" -d3s -s "$BENCH/keys.lua" "http://127.0.0.1:$2/" >/dev/null
    echo "== $1" | tee -a "$WORK/run.txt"
    local before; before=$(cpu "$3")
    taskset -c 1 wrk -t1 -c"$CONNS" -d"$DUR" --latency -s "$BENCH/keys.lua" "http://127.0.0.1:$2/" > "$WORK/wrk.txt"
    local after; after=$(cpu "$3")
    grep -E "Requests/sec|Latency |50%|90%|99%|Non-2xx|requests in" "$WORK/wrk.txt" | tee -a "$WORK/run.txt"
    local n; n=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    local hz; hz=$(getconf CLK_TCK)
    awk -v t=$((after - before)) -v n="$n" -v hz="$hz" \
        'BEGIN { printf "  proxy CPU: %.1f s, %.1f us per request\n", t / hz, t / hz * 1e6 / n }' \
        | tee -a "$WORK/run.txt"
}
wait_port 9000

# The same limit as the gateway's, headers on rejections only (as nginx):
# the decision's cost without the contract's extra response bytes.
sed -e 's/responses: {status: 503}/responses: {status: 503, on_success: false}/' \
    "$BENCH/gateway-limited.yaml" > "$WORK/gateway-quiet.yaml"

run_nginx() { # $1: label, $2: the limit_req line
    nginx_conf "$2"
    taskset -c 0 "$NGINX" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" &
    local pid=$!; PIDS+=($pid)
    load "$1" 8081 "$pid"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}
run_gateway() { # $1: label, $2: config, $3: port, then extra arguments
    taskset -c 0 "$BIN" gateway --config "$2" "${@:4}" &
    local pid=$!; PIDS+=($pid)
    load "$1" "$3" "$pid"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

# Interleaved rounds, so that a disturbance (the machine is shared) hits
# every configuration alike, each round starting one configuration later
# than the last (no configuration always runs after the same one); the
# summary pairs the configurations of each round (bench/summary.py).
CONFIGS=(nginx_limit gw_shaper gw_quiet gw_plain nginx_plain)
run_config() {
    case $1 in
        nginx_limit) run_nginx "nginx 1.22, limit_req" "limit_req zone=bench burst=20 nodelay;" ;;
        gw_shaper) run_gateway "floodgate gateway, shaper" "$BENCH/gateway-limited.yaml" 8082 ;;
        gw_quiet) run_gateway "floodgate gateway, shaper, headers on rejections only" "$WORK/gateway-quiet.yaml" 8082 ;;
        gw_plain) run_gateway "floodgate gateway, no limit" "$BENCH/gateway-plain.yaml" 8083 --allow-empty-config ;;
        nginx_plain) run_nginx "nginx 1.22, no limit" "" ;;
    esac
}
for round in $(seq "${ROUNDS:-1}"); do
    echo "#### round $round" | tee -a "$WORK/run.txt"
    for i in $(seq 0 $((${#CONFIGS[@]} - 1))); do
        run_config "${CONFIGS[$(((i + round - 1) % ${#CONFIGS[@]}))]}"
    done
done
echo
python3 "$BENCH/summary.py" "$WORK/run.txt"
