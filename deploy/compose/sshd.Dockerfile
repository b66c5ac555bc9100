# The SSH target of docker-compose.yml: OpenSSH's sshd FROM the local base
# image, an `agent` account, and no keys: the host key and the authorized key
# are compose secrets, put in place by the entrypoint at start.
ARG BASE_IMAGE=caduceus-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* \
 && useradd --create-home --shell /bin/bash agent \
 && mkdir -p /run/sshd
COPY deploy/compose/sshd-entrypoint.sh /usr/local/bin/sshd-entrypoint
EXPOSE 22
ENTRYPOINT ["/usr/local/bin/sshd-entrypoint"]
