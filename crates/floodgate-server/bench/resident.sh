#!/usr/bin/env bash
# The decision service's resident size with a rule per tenant
# (docs/benchmarks.md, "Memory per rule"): `floodgate serve` on the
# in-memory store, release build, VmRSS and VmHWM from /proc/PID/status
# once it is ready, after each reload that changes one limit, and after
# reloads of unchanged files; the same for a one-rule service.
#
#   crates/floodgate-server/bench/resident.sh [RULES] [RELOADS]
#
# BIN=path/to/floodgate measures that binary instead of building one.
# Each figure is read a second after the reload was counted
# (floodgate_config_reloads_total). Needs curl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RULES=${1:-100000}
RELOADS=${2:-3}
if [ -z "${BIN:-}" ]; then
    BIN=${CARGO_TARGET_DIR:-target}/release/floodgate
    cargo build --release -p floodgate-cli --quiet
fi
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

tenants() { # $1: rules, $2: file
    awk -v n="$1" 'BEGIN {
        print "domains:\n  - domain: tenants\n    descriptors:"
        for (i = 0; i < n; i++)
            printf "      - key: tenant\n        value: tenant-%d\n        rate_limit: {requests_per_unit: %d, unit: second}\n", i, 100 + i % 50
    }' > "$2"
}
status() { awk '/^VmRSS|^VmHWM/ {v[$1] = $2} END {printf "resident %.1f MB (peak %.1f MB)", v["VmRSS:"] / 1024, v["VmHWM:"] / 1024}' "/proc/$PID/status"; }
reloads() { # $1: result
    curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v r="floodgate_config_reloads_total{result=\"$1\"}" '$1 == r {print $2}'
}
reload() { # $1: the result it counts as
    local before; before=$(reloads "$1")
    kill -HUP "$PID"
    for _ in $(seq 1200); do [ "$(reloads "$1")" != "$before" ] && break; sleep 0.1; done
    sleep 1
}

measure() { # $1: rules
    local file="$WORK/floodgate.yaml"
    tenants "$1" "$file"
    ADMIN=$((20000 + RANDOM % 20000))
    "$BIN" serve -c "$file" --reload-interval 0 --store memory --grpc-addr off --http-addr off \
        --admin-addr "127.0.0.1:$ADMIN" --log-level warn 2>"$WORK/serve.log" &
    PID=$!
    for _ in $(seq 1200); do curl -sf "http://127.0.0.1:$ADMIN/ready" >/dev/null && break; sleep 0.1; done
    sleep 1
    echo "$1 rules, after start-up: $(status)"
    for r in $(seq "$RELOADS"); do
        # One limit changed: the whole file is compiled and replaces the policy.
        sed -i "0,/requests_per_unit: [0-9]*/s//requests_per_unit: $((200 + r))/" "$file"
        reload ok
        echo "$1 rules, after reload $r (one limit changed): $(status)"
    done
    reload unchanged
    echo "$1 rules, after a reload of unchanged files: $(status)"
    kill "$PID"
    wait "$PID" || true
    PID=
}

measure 1
measure "$RULES"
