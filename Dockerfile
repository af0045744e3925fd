# mbx-relay in a container (docs/deploy.md). Two stages: build the release binaries, then copy
# them into a slim runtime image that runs as a non-root user with the store on the /data volume.
#
#   docker build -t mbx-relay .
#   docker run -d --name mbx-relay -p 8787:8787 -v mbx-relay-data:/data mbx-relay
#
# Limits and options are MBX_RELAY_* variables (packaging/mbx-relay.env lists every one):
# `docker run -e MBX_RELAY_TRUST_PROXY=xff ...`. A bind mount for /data must be owned by uid 10001
# and mode 0700 (the relay refuses a store directory other users can reach).

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p mbx-relay -p relay-tool \
 && install -D -m 0755 target/release/mbx-relay /out/mbx-relay \
 && install -D -m 0755 target/release/relay-tool /out/relay-tool

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 mbx-relay \
 && useradd --system --uid 10001 --gid mbx-relay --home-dir /data --shell /usr/sbin/nologin mbx-relay \
 && install -d -m 0700 -o mbx-relay -g mbx-relay /data
COPY --from=build /out/mbx-relay /out/relay-tool /usr/local/bin/
USER mbx-relay:mbx-relay
ENV MBX_RELAY_LISTEN=0.0.0.0:8787 \
    MBX_RELAY_STORE_DIR=/data
VOLUME ["/data"]
EXPOSE 8787
# The image has no curl or wget: the binary probes its own GET /health (200 only while the store
# is open and writable) and exits 0 or 1.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["mbx-relay", "health", "--url", "http://127.0.0.1:8787/health"]
# SIGTERM: stop accepting, finish in-flight requests, close the store (allow `docker stop -t 90`).
STOPSIGNAL SIGTERM
ENTRYPOINT ["mbx-relay"]
CMD ["serve"]
