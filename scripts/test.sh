#!/usr/bin/env bash
# Runs the whole test suite. Installs what the tests need when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> cargo test (workspace, all targets and doc tests)"
cargo test --workspace --all-targets --quiet
cargo test --workspace --doc --quiet
