# The caduceus image of docker-compose.yml: coordinator and workers. Built FROM
# the local base image (deploy/base-image.sh; no registry), with the caduceus
# binary built on the host copied in. No token or key is part of it: they are
# compose secrets, mounted at run time.
ARG BASE_IMAGE=caduceus-base:bookworm
FROM ${BASE_IMAGE}
# ssh: the SSH backend's client (OpenSSH, driven through a control master).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-client >/dev/null \
 && rm -rf /var/lib/apt/lists/*
ARG CADUCEUS_BIN=target/release/caduceus
COPY ${CADUCEUS_BIN} /usr/local/bin/caduceus
# Recorded sessions, for `caduceus run --model replay:/opt/caduceus/examples/…`.
COPY examples/ /opt/caduceus/examples/
# /work: the local backend's working directory, writable for whichever user
# the worker runs sandbox commands as.
RUN mkdir -p /work /var/lib/caduceus && chmod 1777 /work && caduceus --version
WORKDIR /work
# SIGINT is the graceful stop of every caduceus release (a worker finishes its
# running calls within its grace, ends every environment and sandbox, exits 0);
# `docker stop`, compose and container runtimes under Kubernetes send it.
STOPSIGNAL SIGINT
ENTRYPOINT ["caduceus"]
