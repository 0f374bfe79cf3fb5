#!/usr/bin/env bash
# Runs the whole test suite. Installs what the tests need when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- The Redis backend (crates/floodgate-redis) -----------------------------
# Its tests start real servers (standalone, TLS, and a six-node cluster
# created with redis-cli; the TLS test makes its certificates with openssl)
# and fail, never skip, when a tool is missing; its benchmark also uses
# redis-benchmark (installed with redis-cli).
redis_apt=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    redis_apt+=(redis-server)
fi
command -v openssl >/dev/null 2>&1 || redis_apt+=(openssl)
scripts/apt-install "${redis_apt[@]}"

# ---- The decision service (floodgate serve) ---------------------------------
# Its tests (crates/floodgate-cli/tests/serve_*.rs, run with the workspace
# below) drive the real binary with independent clients: Python grpcio with
# Envoy's generated gRPC client code (xds-protos), curl, and a real redis-server.
need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
scripts/apt-install "${need_apt[@]}"
VENV=.venv
# The deployment examples (deploy/, crates/floodgate-cli/tests/deploy.rs) are
# read with PyYAML, validated against Kubernetes' schemas with
# kubernetes-validate and rendered with `kubectl kustomize` (kubectl is not
# in Debian's archive: the test fails, naming it, when it is missing). The
# xDS tests generate envoyproxy/ratelimit's RateLimitConfig code from
# crates/floodgate-runtime/proto with grpcio-tools; the tracing tests receive
# spans with OpenTelemetry's protocol code (opentelemetry-proto). xds-protos
# carries an older copy of OpenTelemetry's modules under the same names:
# opentelemetry-proto is installed after it, so that its own files win (the
# check below asks for a field the old copy lacks).
PY_PINS=(grpcio==1.85.1 grpcio-tools==1.85.1 protobuf==7.36.2 xds-protos==1.85.0 h2==4.4.1
         PyYAML==6.0.4 kubernetes-validate==1.37.0)
OTEL_PROTO=opentelemetry-proto==1.45.2
if ! "$VENV/bin/python" -c 'import grpc, grpc_tools.protoc, h2.connection, yaml, kubernetes_validate; from envoy.service.ratelimit.v3 import rls_pb2_grpc; from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc; from opentelemetry.proto.trace.v1 import trace_pb2; trace_pb2.ResourceSpans.DESCRIPTOR.fields_by_name["scope_spans"]' >/dev/null 2>&1; then
    echo "==> creating $VENV with ${PY_PINS[*]} $OTEL_PROTO"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_PINS[@]}"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$OTEL_PROTO"
fi
export FLOODGATE_PYTHON="$PWD/$VENV/bin/python"

# ---- The gateway (floodgate gateway) ----------------------------------------
# Its differential tests (crates/floodgate-gateway/tests/nginx_*.rs) run a
# real nginx (Debian's, limit_req) against the gateway; its benchmark uses
# wrk. The node-expiry case runs nginx's clocks ten times as fast with
# libfaketime (Debian's faketime), so that nginx's minute takes six seconds.
# The tests fail, never skip, when nginx or libfaketime is missing.
need_gw=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_gw+=(nginx-light)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need_gw+=(faketime)
command -v wrk >/dev/null 2>&1 || need_gw+=(wrk)
scripts/apt-install "${need_gw[@]}"

# ---- The image (Containerfile, scripts/image.sh) ----------------------------
# Its tests (crates/floodgate-cli/tests/image.rs) build the image from the
# test build's binary with Debian's podman, on a base made from Debian's
# packages (scripts/image-base.sh: apt-get download and dpkg-deb, nothing
# pulled), and run it with Debian's runc (crun refuses this machine's cgroup
# layout), as root: each container's network namespace is entered to reach
# it. They fail, never skip, when podman or runc is missing.
need_image=()
command -v podman >/dev/null 2>&1 || need_image+=(podman)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || need_image+=(runc)
scripts/apt-install "${need_image[@]}"

# ---- Pages in a real browser ------------------------------------------------
# The replay's HTML report and the admin dashboard are opened in Debian's
# headless Chromium by the tests (crates/floodgate-replay/tests/browser.rs,
# crates/floodgate-cli/tests/dashboard.rs), which fail, never skip, when it is
# missing.
if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
    scripts/apt-install chromium
fi

# Incremental caches only grow the target directory on a one-off run.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# A clean test build takes about 1 GiB; a linker that runs out of disk dies
# with a bus error, so say so first.
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
free_kib=$(df -Pk "$target_dir" | awk 'NR==2 {print $4}')
if [ "${free_kib:-0}" -lt 1572864 ]; then
    echo "==> warning: only $((free_kib / 1024)) MiB free under $target_dir;" \
         "a clean test build needs about 1 GiB" >&2
fi

echo "==> cargo test (workspace, all targets and doc tests)"
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
# The crates' guides: every intra-doc link must resolve to an item the
# reader can see.
echo "==> cargo doc (workspace, links checked)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# The workspace's lints (Cargo.toml), warnings denied.
echo "==> cargo clippy (workspace, all targets)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Dependencies point one way, and the offline replay links no server part.
echo "==> layers"
scripts/check-layers

# ---- Fuzzing ----------------------------------------------------------------
# Every fuzz target (fuzz/, docs/fuzzing.md) runs for FUZZ_SECONDS (5 by
# default) from the repository's seeds, two at a time, so that a regression
# in a parser fails the next change: a crash fails the suite and leaves its
# input in fuzz/artifacts/. Built by plain cargo on the stable toolchain, in
# fuzz/target; libfuzzer-sys compiles libFuzzer itself with a C++ compiler.
if ! command -v c++ >/dev/null 2>&1; then
    scripts/apt-install g++
fi
echo "==> fuzzing (fuzz/run.sh --quick: every target for ${FUZZ_SECONDS:-5} s)"
./fuzz/run.sh --quick "${FUZZ_SECONDS:-5}"
