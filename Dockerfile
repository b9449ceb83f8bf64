# syntax=docker/dockerfile:1
# The tollgate image: one static-enough binary on a distroless base, run as
# a non-root user. Build it from the repository root:
#
#   docker build --build-arg GIT_HASH=$(git rev-parse --short=12 HEAD) -t tollgate:0.1.0 .
#
# The build stage runs scripts/build-release.sh (cargo build --release
# --locked); the same script runs without Docker. No HEALTHCHECK: probes are
# the orchestrator's job (/healthz and /readyz on the HTTP port).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS build
# The commit `tollgate --version` names (.git is not in the build context).
ARG GIT_HASH=unknown
ENV TOLLGATE_GIT_HASH=${GIT_HASH}
WORKDIR /src
COPY . .
RUN scripts/build-release.sh /out/tollgate

# glibc and libgcc, CA certificates, a nonroot user (65532), no shell.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /out/tollgate /usr/local/bin/tollgate
USER 65532:65532
# 8081: gRPC (Envoy's rate limit service); 8080: HTTP API, health, /metrics.
EXPOSE 8081 8080
ENTRYPOINT ["/usr/local/bin/tollgate"]
CMD ["serve", "--config", "/etc/tollgate/limits", "--grpc-addr", "0.0.0.0:8081", "--http-addr", "0.0.0.0:8080"]
