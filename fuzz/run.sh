#!/usr/bin/env bash
# Fuzzes every target for SECONDS each (default 60), two at a time, from
# seeds made of the repository's own configuration files and docs examples.
# A crash stops its target and leaves the input under fuzz/artifacts/.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 lets the stable
# toolchain build it.
set -euo pipefail
cd "$(dirname "$0")"
SECS=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(policy_config http_section config_check request_head client_signals rls_wire rls_response http_api upstream_response)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O

# Seeds: every YAML file and every fenced yaml block of the docs.
seed() { # $1: target, then files
    local dir=corpus/$1; shift
    mkdir -p "$dir"
    for f in "$@"; do cp "$f" "$dir/seed-$(sha1sum "$f" | cut -c1-12)"; done
}
BLOCKS=$(mktemp -d)
trap 'rm -rf "$BLOCKS"' EXIT
python3 - "$BLOCKS" ../docs/*.md ../README.md <<'PY'
import pathlib, re, sys
out = pathlib.Path(sys.argv[1]); n = 0
for doc in sys.argv[2:]:
    text = pathlib.Path(doc).read_text()
    for block in re.findall(r"```ya?ml\n(.*?)```", text, re.S):
        n += 1
        (out / f"block{n}.yaml").write_text(block)
    for block in re.findall(r"```json\n(.*?)```", text, re.S):
        n += 1
        (out / f"block{n}.json").write_text(block)
PY
mapfile -t YAML < <(find ../examples ../crates -name '*.yaml' -o -name '*.yml' | grep -v '/target/' | sort)
seed policy_config "${YAML[@]}" "$BLOCKS"/*.yaml
seed http_section "${YAML[@]}" "$BLOCKS"/*.yaml
seed config_check "${YAML[@]}" "$BLOCKS"/*.yaml
# The HTTP API's: a route selector byte (0 /json, 1 /v1/check, 2 /v1/release),
# then every JSON block of the service's docs.
mkdir -p corpus/http_api
for f in "$BLOCKS"/*.json; do
    for route in 0 1 2; do
        { printf "\\x0$route"; cat "$f"; } > "corpus/http_api/seed-$route-$(sha1sum "$f" | cut -c1-12)"
    done
done

# The upstream's answers: a few framed responses.
mkdir -p corpus/upstream_response
printf 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nx: 1\r\n\r\n' > corpus/upstream_response/seed-chunked
printf 'HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc' > corpus/upstream_response/seed-length
printf 'HTTP/1.0 200 OK\r\n\r\nuntil the end' > corpus/upstream_response/seed-close

status=0
run() {
    mkdir -p "corpus/$1"
    local dict=()
    [ -f "dict/$1.dict" ] && dict=(-dict="dict/$1.dict")
    cargo fuzz run -O "$1" "corpus/$1" -- -max_total_time="$SECS" -max_len=16384 "${dict[@]}" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"corpus/$1.log" 2>&1 \
        || { echo "!! $1 failed: see fuzz/corpus/$1.log and fuzz/artifacts/$1/"; return 1; }
    echo "== $1: $(grep -E 'stat::number_of_executed_units' "corpus/$1.log" | awk '{print $2}') runs, no crash"
}
for ((i = 0; i < ${#TARGETS[@]}; i += 2)); do
    run "${TARGETS[i]}" & a=$!
    b=""
    if [ $((i + 1)) -lt ${#TARGETS[@]} ]; then run "${TARGETS[i + 1]}" & b=$!; fi
    wait $a || status=1
    [ -z "$b" ] || wait $b || status=1
done
exit $status
