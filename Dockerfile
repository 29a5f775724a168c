# fnbridge: the bridge binary plus the python3 and bash its built-in
# adapters run. Build: docker build -t fnbridge .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/bridge ./cmd/bridge

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 bash ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bridge /usr/local/bin/bridge
COPY examples /etc/fnbridge
EXPOSE 9080
ENTRYPOINT ["/usr/local/bin/bridge"]
CMD ["serve", "--config", "/etc/fnbridge/bridge.yaml", "--listen", "0.0.0.0:9080"]
