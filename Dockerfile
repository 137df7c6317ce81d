# The queuebox image: the static release binary on an empty base, with CA
# certificates and an unprivileged user (65532), runnable with a read-only
# root file system. Built from local files only: `make image` builds
# dist/linux_<arch>/queuebox (scripts/release.sh) and copies the host's CA
# bundle to dist/ca-certificates.crt; .dockerignore sends nothing else.
#
#   make image IMAGE=queuebox:v0.1.0 CONTAINER_ENGINE=docker
#   docker run --read-only -v ./queuebox.yaml:/etc/queuebox/queuebox.yaml:ro queuebox:v0.1.0
FROM scratch

ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED

LABEL org.opencontainers.image.title="queuebox" \
      org.opencontainers.image.description="Relays transactional-outbox rows to NATS JetStream, Kafka, RabbitMQ and HTTP webhooks" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/queuebox/queuebox" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"

COPY deploy/image/passwd deploy/image/group /etc/
COPY dist/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY dist/${TARGETOS}_${TARGETARCH}/queuebox /queuebox

# The config file; --config or QUEUEBOX_CONFIG names another. In a container
# set server.listen to 0.0.0.0:9090 so that probes and scrapes reach it.
ENV QUEUEBOX_CONFIG=/etc/queuebox/queuebox.yaml
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/queuebox"]
CMD ["run"]
