#!/usr/bin/env bash
# Builds Floodgate's image from this checkout (Containerfile), with podman
# when it is installed, else docker. docs/deploy.md, "The image".
#
#   scripts/image.sh [--tag TAG] [--from-binary PATH] [--base IMAGE]
#
#   --tag TAG            the image's name (default: localhost/floodgate:latest)
#   --from-binary PATH   pack this floodgate binary (built outside, for the
#                        base's C library) instead of compiling the release
#                        build in a Rust stage
#   --base IMAGE         the runtime base (default: the Containerfile's,
#                        gcr.io/distroless/cc-debian12:nonroot)
#
# Prints the built image's reference on its last line.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

usage() {
    echo "usage: scripts/image.sh [--tag TAG] [--from-binary PATH] [--base IMAGE]" >&2
    [ $# -eq 0 ] || echo "scripts/image.sh: $*" >&2
    exit 2
}

tag="localhost/floodgate:latest"
binary=""
base=""
while [ $# -gt 0 ]; do
    case "$1" in
        --tag | --from-binary | --base)
            [ $# -ge 2 ] && [ -n "$2" ] || usage "$1 needs a value"
            case "$1" in
                --tag) tag="$2" ;;
                --from-binary) binary="$2" ;;
                --base) base="$2" ;;
            esac
            shift 2
            ;;
        -h | --help) usage ;;
        *) usage "unknown argument: $1" ;;
    esac
done
if [ -n "$binary" ]; then
    [ -f "$binary" ] || usage "--from-binary: no such file: $binary"
    binary="$(realpath "$binary")"
fi
cd "$repo"

if command -v podman >/dev/null 2>&1; then
    # HEALTHCHECK exists in the docker image format only: podman's default
    # (OCI) would drop it, with a warning.
    build=(podman build --format docker)
elif command -v docker >/dev/null 2>&1; then
    build=(docker build)
else
    echo "scripts/image.sh: neither podman nor docker is installed" >&2
    exit 1
fi
build+=(-f "$PWD/Containerfile" -t "$tag")
[ -z "$base" ] || build+=(--build-arg "BASE=$base")

if [ -n "$binary" ]; then
    # A context of its own: the binary and the configuration, laid out as
    # the Rust stage lays them out.
    context=$(mktemp -d)
    trap 'rm -rf "$context"' EXIT
    mkdir -p "$context/rootfs/bin" "$context/rootfs/etc/floodgate"
    cp "$binary" "$context/rootfs/bin/floodgate"
    ln -s floodgate "$context/rootfs/bin/ratelimit"
    cp examples/floodgate.yaml "$context/rootfs/etc/floodgate/floodgate.yaml"
    build+=(--target prebuilt "$context")
else
    build+=(--target image .)
fi

"${build[@]}" >&2
echo "$tag"
