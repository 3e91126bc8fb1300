# mmcpd container image: the daemon and every bundled plugin.
#
#   docker build -t mmcpd .                      # distroless, the default
#   docker build --target node -t mmcpd:node .   # with Node.js, for MCP stdio
#                                                # servers started with npx
# An MCP server joins through its manifest in the plugins folder: mount it as
# /usr/local/lib/mmcpd/plugins/<name>.mcp.json (read-only is enough).
#   docker run -d -p 8787:8787 -v mmcpd-data:/data \
#     -e MMCP_API_TOKEN=$(openssl rand -hex 32) \
#     -e MMCP_OLLAMA_HOST=http://host.docker.internal:11434 mmcpd
#
# The image listens on 0.0.0.0:8787, so the daemon refuses to start (exit 2,
# one line saying so) without MMCP_API_TOKEN: anyone who reaches the port
# could otherwise drive the agent and its tools. Clients must call it by
# localhost, an IP address, or a name listed in MMCP_ALLOWED_HOSTS (the Host
# check against DNS rebinding); deploy/compose.yaml lists "mmcpd". /healthz
# needs neither, which is what the health check calls.
#
# The daemon runs as uid 65532, not root, so it runs its plugins as itself
# (MMCP_PLUGINS_USER applies only to a root daemon), each in a user and a
# pid namespace of its own where the runtime allows them (podman's default
# seccomp profile does); where it refuses them (Docker's default profile
# without CAP_SYS_ADMIN), the daemon logs one warning and starts them
# without.
#
# The base images are arguments so that a mirror or a pinned digest can
# stand in for them.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot
ARG NODE_IMAGE=node:22-bookworm-slim

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Cross-compiled on the build machine's own platform (no emulation for
# arm64): the binaries are static, CGO_ENABLED=0, as in "make dist".
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
# The plugins are what "make build" builds: every plugins/<name>/ holding Go
# files of its own (plugins/internal holds only shared packages).
RUN set -e; \
    export CGO_ENABLED=0 GOOS="$TARGETOS" GOARCH="${TARGETARCH:-$(go env GOARCH)}"; \
    go build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" \
        -o /out/usr/local/bin/mmcpd ./cmd/mmcpd; \
    for dir in plugins/*/; do \
        name=$(basename "$dir"); \
        ls "$dir"*.go >/dev/null 2>&1 || continue; \
        go build -trimpath -ldflags "-s -w" -o "/out/usr/local/lib/mmcpd/plugins/mmcp-plugin-$name" "./plugins/$name"; \
    done; \
    mkdir -p /out/data

# Node.js for MCP servers run over stdio (npx ...); otherwise the same image.
FROM ${NODE_IMAGE} AS node
RUN groupadd --gid 65532 mmcpd \
    && useradd --uid 65532 --gid 65532 --create-home --home-dir /home/mmcpd mmcpd
COPY --from=build /out/usr/local /usr/local
COPY --from=build --chown=65532:65532 /out/data /data
ENV MMCP_LISTEN_ADDR=0.0.0.0:8787 \
    MMCP_DATA_DIR=/data \
    MMCP_PLUGINS_DIR=/usr/local/lib/mmcpd/plugins
USER 65532:65532
VOLUME /data
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/mmcpd", "health"]
ENTRYPOINT ["/usr/local/bin/mmcpd"]
CMD ["serve"]

# The default image: no shell, no package manager, CA certificates and time
# zones only, and the "nonroot" user (65532).
FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=build /out/usr/local /usr/local
COPY --from=build --chown=65532:65532 /out/data /data
ENV MMCP_LISTEN_ADDR=0.0.0.0:8787 \
    MMCP_DATA_DIR=/data \
    MMCP_PLUGINS_DIR=/usr/local/lib/mmcpd/plugins
USER 65532:65532
VOLUME /data
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/mmcpd", "health"]
ENTRYPOINT ["/usr/local/bin/mmcpd"]
CMD ["serve"]
