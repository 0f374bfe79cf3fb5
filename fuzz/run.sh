#!/usr/bin/env bash
# Fuzzes every target for SECONDS each, two at a time, from seeds made of
# the repository's own configuration files and docs examples (plus what
# earlier runs left in fuzz/corpus/). A crash, a timeout or a leak of
# memory stops its target, leaves the input under fuzz/artifacts/TARGET/
# and fails the run.
#
#   fuzz/run.sh [--quick] [SECONDS] [TARGET...]
#
# A campaign (the default, 60 s per target): cargo-fuzz, installed when
# missing, builds the targets optimised and with AddressSanitizer;
# cargo-fuzz needs nightly features, and RUSTC_BOOTSTRAP=1 lets the stable
# toolchain build them.
#
# --quick (what scripts/test.sh runs, 5 s per target by default): the same
# libFuzzer targets with the same coverage instrumentation, built by plain
# cargo on the stable toolchain (every flag is a stable one), lightly
# optimised, with debug assertions and overflow checks and without a
# sanitizer: nothing to install, and a fraction of a campaign's build.
set -euo pipefail
cd "$(dirname "$0")"
# The fuzz builds stay in fuzz/target, whatever the workspace's is.
export CARGO_TARGET_DIR="$PWD/target"
QUICK=0
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
    shift
fi
SECS=${1:-$([ $QUICK = 1 ] && echo 5 || echo 60)}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(policy_config http_section config_check request_head client_signals rls_wire rls_response http_api upstream_response request_authority request_path proxy_header hpack_decoder)

if [ $QUICK = 1 ]; then
    HOST=$(rustc -vV | sed -n 's/^host: //p')
    # cargo-fuzz's instrumentation: libFuzzer's coverage counters, the
    # comparison tracing that guides it through magic values, and the
    # `fuzzing` cfg. With --target, build scripts and proc macros stay
    # uninstrumented.
    export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cdebug-assertions"
    cargo build --quiet --target "$HOST" --bins
    BIN=target/$HOST/debug
else
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
    export RUSTC_BOOTSTRAP=1
    cargo fuzz build -O
fi

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

# Request paths: spellings of one path, and of a climb out of a prefix;
# each with encoded slashes refused (first byte 0) and kept (1).
mkdir -p corpus/request_path
for p in '/login' '/x/../login' '/a/%2e%2E/login' '//login/./' '/%6Cogin%3a' '/a%2F..%2F..%2Fb' '/a\..\b' '/../x'; do
    for keep in 0 1; do
        { printf "\\00$keep"; printf '%s' "$p"; } > "corpus/request_path/seed-$keep-$(printf '%s' "$p" | sha1sum | cut -c1-12)"
    done
done

# PROXY protocol headers: v1 (TCP4, TCP6, UNKNOWN) then a request, v2
# (TCP over IPv4 with a TLV, LOCAL).
mkdir -p corpus/proxy_header
printf 'PROXY TCP4 192.0.2.1 198.51.100.1 4711 443\r\nGET / HTTP/1.1\r\n' > corpus/proxy_header/seed-v1-tcp4
printf 'PROXY TCP6 2001:db8::1 2001:db8::2 4711 443\r\n' > corpus/proxy_header/seed-v1-tcp6
printf 'PROXY UNKNOWN\r\n' > corpus/proxy_header/seed-v1-unknown
printf '\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x13\xc0\x00\x02\x01\xc6\x33\x64\x01\x12\x67\x01\xbb\xea\x00\x04\x01vpc' > corpus/proxy_header/seed-v2-tcp4
printf '\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00' > corpus/proxy_header/seed-v2-local

# HPACK: RFC 7541's requests (C.3, C.4; a 4096-byte table) and responses
# (C.6; 256 bytes), each block after its length.
mkdir -p corpus/hpack_decoder
hpack_seed() { # $1: name, $2: the table size's index in the target's SIZES, then the blocks' hex
    python3 - "$@" <<'PY'
import pathlib, sys
name, size, *blocks = sys.argv[1:]
data = bytes([int(size)]) + b"".join(bytes([len(bytes.fromhex(b))]) + bytes.fromhex(b) for b in blocks)
pathlib.Path(f"corpus/hpack_decoder/seed-{name}").write_bytes(data)
PY
}
hpack_seed c3 3 828684410f7777772e6578616d706c652e636f6d 828684be58086e6f2d6361636865 \
    828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565
hpack_seed c4 3 828684418cf1e3c2e5f23a6ba0ab90f4ff 828684be5886a8eb10649cbf \
    828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf
hpack_seed c6 2 488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3 \
    4883640effc1c0bf \
    88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007

failed=0
run() {
    mkdir -p "corpus/$1" "artifacts/$1"
    local dict=()
    [ -f "dict/$1.dict" ] && dict=(-dict="dict/$1.dict")
    local args=(-max_total_time="$SECS" -max_len=16384 "${dict[@]}" -timeout=10
        -rss_limit_mb=2048 -print_final_stats=1)
    local ok=1
    if [ $QUICK = 1 ]; then
        "$BIN/$1" "corpus/$1" -artifact_prefix="artifacts/$1/" "${args[@]}" \
            >"corpus/$1.log" 2>&1 || ok=0
    else
        cargo fuzz run -O "$1" "corpus/$1" -- "${args[@]}" >"corpus/$1.log" 2>&1 || ok=0
    fi
    if [ $ok = 0 ]; then
        echo "!! $1 failed: fuzz/corpus/$1.log (its end below) and fuzz/artifacts/$1/"
        tail -n 40 "corpus/$1.log" | sed "s/^/   $1| /"
        return 1
    fi
    echo "== $1: $(grep -E 'stat::number_of_executed_units' "corpus/$1.log" | awk '{print $2}') runs, no crash"
}
for ((i = 0; i < ${#TARGETS[@]}; i += 2)); do
    run "${TARGETS[i]}" & a=$!
    b=""
    if [ $((i + 1)) -lt ${#TARGETS[@]} ]; then run "${TARGETS[i + 1]}" & b=$!; fi
    wait $a || failed=$((failed + 1))
    [ -z "$b" ] || wait $b || failed=$((failed + 1))
done
echo "fuzz: $((${#TARGETS[@]} - failed)) passed, $failed failed"
[ $failed = 0 ]
