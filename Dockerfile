# fnbridge: the bridge binary plus the python3 and bash its built-in
# adapters run. Build: docker build -t fnbridge .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/bridge ./cmd/bridge

FROM debian:bookworm-slim
# The bridge and every function it runs are an unprivileged user; the key
# directories belong to it so that `bridge keygen` can write into fresh
# volumes mounted there (docker-compose.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 bash ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fnbridge \
 && useradd --system --uid 10001 --gid fnbridge --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin fnbridge \
 && mkdir -p /var/lib/fnbridge/private /var/lib/fnbridge/public \
 && chown fnbridge:fnbridge /var/lib/fnbridge/private /var/lib/fnbridge/public \
 && chmod 0700 /var/lib/fnbridge/private
COPY --from=build /out/bridge /usr/local/bin/bridge
COPY examples /etc/fnbridge
USER 10001:10001
EXPOSE 9080
ENTRYPOINT ["/usr/local/bin/bridge"]
# Listening on every interface needs restate-server's public key: mount the
# file `bridge keygen` writes (docker-compose.yaml does).
CMD ["serve", "--config", "/etc/fnbridge/bridge.yaml", "--listen", "0.0.0.0:9080", "--identity-keys-file", "/var/lib/fnbridge/public/restate-identity.pub"]
