#!/usr/bin/env bash
# Builds caduceus' small Debian sandbox image without a container registry:
# debootstrap a minimal rootfs from Debian's packages, then `docker import` it.
#
#   deploy/base-image.sh                 # builds caduceus-base:bookworm unless it exists
#   deploy/base-image.sh --force         # rebuilds it
#   IMAGE=myorg/sandbox:1 SUITE=trixie deploy/base-image.sh
#
# Environment:
#   IMAGE          tag to build (default caduceus-base:<SUITE>)
#   SUITE          Debian suite (default bookworm)
#   DEBIAN_MIRROR  package mirror; default: the one this host's apt uses, else
#                  debootstrap's own default
#   EXTRA_PACKAGES extra packages, comma-separated (e.g. "python3,git")
#
# Contents: bash, coreutils, grep, sed, findutils, tar, procps, ripgrep (all
# from Debian). The image's default command is `bash`; caduceus starts it with
# `sleep infinity` and Docker's init anyway.
#
# Needs: root (debootstrap), a Docker engine, and debootstrap (installed with
# apt-get when missing and apt-get is there). Idempotent: exits 0 at once when
# the image already exists.
set -euo pipefail

SUITE=${SUITE:-bookworm}
IMAGE=${IMAGE:-caduceus-base:${SUITE}}
# python3: execute_code runs its script with the environment's own interpreter, as hermes.
PACKAGES="bash,coreutils,grep,sed,findutils,tar,gzip,procps,ripgrep,ca-certificates,python3"
if [[ -n ${EXTRA_PACKAGES:-} ]]; then
  PACKAGES="${PACKAGES},${EXTRA_PACKAGES}"
fi

force=0
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "base-image.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

log() { echo "base-image.sh: $*" >&2; }

if ! docker version >/dev/null 2>&1; then
  log "no reachable Docker engine (is dockerd running, and may this user use its socket?)"
  exit 1
fi

if [[ $force == 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "$IMAGE already exists; nothing to do (--force rebuilds it)"
  exit 0
fi

if [[ $(id -u) != 0 ]]; then
  log "debootstrap needs root; run this script as root (or with sudo)"
  exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing debootstrap"
    apt-get install -y -qq debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  else
    log "debootstrap is missing and there is no apt-get to install it; install debootstrap and run again"
    exit 1
  fi
fi

# The mirror this host already uses, so that a machine with a local or proxied
# mirror builds from it.
host_mirror() {
  local line
  if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
    line=$(grep -m1 -E '^URIs:' /etc/apt/sources.list.d/debian.sources || true)
    [[ -n $line ]] && { echo "${line#URIs: }" | awk '{print $1}'; return; }
  fi
  if [[ -r /etc/apt/sources.list ]]; then
    grep -m1 -E '^deb [^ ]*://[^ ]+ ' /etc/apt/sources.list | awk '{print $2}' || true
  fi
}
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
# A security-only mirror cannot debootstrap; fall back to debootstrap's default.
[[ $mirror == *security* ]] && mirror=

work=$(mktemp -d "${TMPDIR:-/tmp}/caduceus-rootfs.XXXXXX")
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
rootfs=$work/rootfs

log "debootstrap $SUITE (${mirror:-default mirror}) into $rootfs"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" ${mirror:+"$mirror"} >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  log "debootstrap failed (full log above)"
  exit 1
}

# Slim it: package caches, docs, manuals and locales are not needed in a sandbox.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
  "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old
find "$rootfs"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true
# The sandbox's hostname and resolver come from Docker at run time.
: >"$rootfs/etc/hostname"
rm -f "$rootfs/etc/resolv.conf"

log "importing as $IMAGE"
tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'CMD ["bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'WORKDIR /root' \
  --change "LABEL org.caduceus.base-image=${SUITE}" \
  - "$IMAGE" >/dev/null

docker run --rm "$IMAGE" bash -c 'rg --version >/dev/null && grep --version >/dev/null && ps --version >/dev/null' || {
  log "the imported image $IMAGE does not run bash, rg, grep and ps"
  exit 1
}
log "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
