#!/usr/bin/env bash
# Makes the secrets of docker-compose.yml, once: the shared token and the SSH
# keys of the worker-ssh -> sshd pair. Idempotent: existing files are kept.
#
#   deploy/compose/secrets.sh [DIR]     # default deploy/compose/secrets (git ignores it)
#
# Files (mode 0600): token, ssh_client_key (+ .pub), ssh_authorized_keys,
# ssh_host_key (+ .pub), ssh_known_hosts.
set -euo pipefail
dir=${1:-$(dirname "$0")/secrets}
mkdir -p "$dir"
chmod 0700 "$dir"
cd "$dir"
umask 077
if [[ ! -s token ]]; then
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >token
fi
if [[ ! -s ssh_client_key ]]; then
  ssh-keygen -q -t ed25519 -N '' -C caduceus-compose-worker -f ssh_client_key
fi
if [[ ! -s ssh_host_key ]]; then
  ssh-keygen -q -t ed25519 -N '' -C caduceus-compose-sshd -f ssh_host_key
fi
cp ssh_client_key.pub ssh_authorized_keys
# The worker dials the service name `sshd`, port 22.
echo "sshd $(cut -d' ' -f1,2 ssh_host_key.pub)" >ssh_known_hosts
echo "secrets.sh: secrets in $(pwd)" >&2
