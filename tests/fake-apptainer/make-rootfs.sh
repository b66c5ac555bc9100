#!/usr/bin/env bash
# Builds the Debian root file system the Apptainer stand-in serves images
# from (minbase + procps), once, into /var/cache/caduceus/rootfs-bookworm
# (or $CADUCEUS_TEST_ROOTFS). Needs root and debootstrap (installed with
# apt-get when missing). Idempotent.
set -euo pipefail
target=${CADUCEUS_TEST_ROOTFS:-/var/cache/caduceus/rootfs-bookworm}
if [[ -x $target/bin/bash ]]; then echo "make-rootfs.sh: $target exists"; exit 0; fi
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
mkdir -p "$(dirname "$target")"
rm -rf "$target.tmp"
debootstrap --variant=minbase --include=procps bookworm "$target.tmp" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mv "$target.tmp" "$target"
echo "make-rootfs.sh: built $target"
