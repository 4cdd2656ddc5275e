# syntax=docker/dockerfile:1
# The `stowage` binary (dispatcher, agent, and the other subcommands) in a small runtime image.
#   docker build -t REGISTRY/stowage:TAG .
# The build needs only this repository: ../shared (upstream CRDs, traces) is for the tests and
# `stowage dev`, not for the dispatcher or the agent.

FROM rust:1-bookworm AS build
WORKDIR /src
# HiGHS (the batch optimiser's solver) builds from source: cmake, and libclang for bindgen.
RUN apt-get update && apt-get install -y --no-install-recommends cmake libclang-dev && rm -rf /var/lib/apt/lists/*
COPY . .
# Cache mounts keep the crate registry and the build directory between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p stowage \
    && cp target/release/stowage /usr/local/bin/stowage \
    && strip --strip-debug /usr/local/bin/stowage
# The release profile keeps line tables for profiling (docs/performance.md); the image drops
# them (about 300 MB to a fraction) and keeps the symbols, so a backtrace still names functions.

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/stowage /usr/local/bin/stowage
# The same uid the manifests run as (runAsUser: 65532).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/stowage"]
