#!/usr/bin/env bash
# Makes a distroless-style `cc` base image from Debian's packages, without
# pulling anything: what gcr.io/distroless/cc-debian12:nonroot holds that
# Floodgate's binary uses (the C library and libgcc_s, which
# `ldd floodgate` lists; the CA bundle for TLS to Redis; the time zones;
# a `nonroot` user 65532), and no shell. The image tests build Floodgate's
# image on it (scripts/image.sh --base); a machine that can pull uses the
# distroless base instead.
#
#   scripts/image-base.sh [TAG]     (default: localhost/floodgate-test-base)
#
# Built once: a base already present is reused (`podman rmi` it, and the
# images built on it, to make it again). Prints the image's reference on
# its last line. Needs podman and apt-get (the packages are
# downloaded from the configured Debian mirror, not installed).
set -euo pipefail
tag="${1:-localhost/floodgate-test-base}"

if podman image exists "$tag"; then
    echo "$tag"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"
(cd "$work/debs" && apt-get download -qq libc6 libgcc-s1 ca-certificates tzdata netbase)
for deb in "$work"/debs/*.deb; do
    dpkg-deb -x "$deb" "$work/root"
done

root="$work/root"
# The packages' maintainer scripts do not run: make what they would.
mkdir -p "$root/etc/ssl/certs" "$root/bin" "$root/tmp" "$root/home/nonroot"
find "$root/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z |
    xargs -0 cat >"$root/etc/ssl/certs/ca-certificates.crt"
ln -sf /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"
# Names from /etc/hosts first (a container's added hosts), as distroless.
echo "hosts: files dns" >"$root/etc/nsswitch.conf"
# distroless' users: root, nobody and nonroot (65532), none with a shell.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
nonroot:x:65532:
EOF
chown 65532:65532 "$root/home/nonroot"
chmod 1777 "$root/tmp"
# Documentation is not needed at run time.
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian"

tar -C "$root" -c . | podman import --quiet \
    --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$tag" >/dev/null
echo "$tag"
