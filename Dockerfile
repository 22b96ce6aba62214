# The ratelimit service image: built with `cargo build --release --locked`,
# run as a non-root user on a small Debian base, with the original's ports.
#
#   docker build -t ratelimit:0.1.0 .
#
# The Helm chart's default image is `ratelimit:<appVersion>`: push this image
# to your registry and set image.repository / image.tag.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
        --bin ratelimit --bin ratelimit_config_check --bin ratelimit_client \
    && mkdir -p /out \
    && cp target/release/ratelimit target/release/ratelimit_config_check \
        target/release/ratelimit_client /out/

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 ratelimit \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin ratelimit
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
# gRPC, HTTP (/json, /healthcheck), debug (/rlconfig, /stats).
EXPOSE 8081 8080 6070
ENTRYPOINT ["/usr/local/bin/ratelimit"]
