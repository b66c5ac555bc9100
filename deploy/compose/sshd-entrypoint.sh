#!/bin/bash
# Puts the compose secrets where sshd wants them (owned by root or the user,
# mode 0600: secrets are mounted with the host file's owner and mode), then
# runs sshd in the foreground with key-only logins for `agent`.
set -euo pipefail
install -m 0600 /run/secrets/ssh_host_key /etc/ssh/ssh_host_ed25519_key
install -d -m 0700 -o agent -g agent /home/agent/.ssh
install -m 0600 -o agent -g agent /run/secrets/ssh_authorized_keys /home/agent/.ssh/authorized_keys
exec /usr/sbin/sshd -D -e \
  -o HostKey=/etc/ssh/ssh_host_ed25519_key \
  -o PasswordAuthentication=no \
  -o KbdInteractiveAuthentication=no \
  -o PermitRootLogin=no \
  -o AllowUsers=agent
