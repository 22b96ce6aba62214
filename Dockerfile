# The ratelimit service image: the three binaries without debug info, as
# user 65532, on a base of glibc, libgcc, CA certificates and a `nonroot`
# user (65532) and nothing else, with the original's ports. It runs with a
# read-only root filesystem and every capability dropped. The binaries are
# in /usr/local/bin; /bin/ratelimit, where the original's image has its
# service and where its users' manifests call it (`command:
# ["/bin/ratelimit"]`), links to the service.
#
#   docker build -t ratelimit:0.1.0 --build-arg REVISION=$(git rev-parse --short=12 HEAD) .
#   podman build -t ratelimit:0.1.0 --build-arg REVISION=$(git rev-parse --short=12 HEAD) .
#
# Build arguments:
#   BASE      the runtime base (default gcr.io/distroless/cc-debian12:nonroot;
#             scripts/image.sh makes an equivalent from Debian's packages)
#   BINARIES  `build` (the default): compile in the `build` stage; or
#             `prebuilt`: copy `prebuilt/` of the build context, laid out as
#             the image's root: usr/local/bin/ holds binaries already built
#             with `cargo build --release --locked` and stripped, and
#             bin/ratelimit links to /usr/local/bin/ratelimit
#             (scripts/image.sh, run by the test command, makes it)
#   VERSION, REVISION  for the labels (and REVISION for `ratelimit --version`)
#
# The Helm chart's default image is `ratelimit:<appVersion>`: push this image
# to your registry and set image.repository / image.tag.

ARG BASE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARIES=build

FROM rust:1-bookworm AS build
ARG REVISION=unknown
WORKDIR /src
COPY . .
RUN RATELIMIT_REVISION=$REVISION cargo build --release --locked \
        --bin ratelimit --bin ratelimit_config_check --bin ratelimit_client \
    && mkdir -p /out/usr/local/bin /out/bin \
    && for b in ratelimit ratelimit_config_check ratelimit_client; do \
           objcopy --strip-debug "target/release/$b" "/out/usr/local/bin/$b"; \
       done \
    && ln -s /usr/local/bin/ratelimit /out/bin/ratelimit

FROM scratch AS prebuilt
COPY prebuilt/ /out/

FROM ${BINARIES} AS binaries

FROM ${BASE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="ratelimit" \
      org.opencontainers.image.description="A drop-in replacement for the Envoy (Lyft) rate limit service" \
      org.opencontainers.image.source="https://github.com/envoyproxy/ratelimit" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=binaries /out/ /
USER 65532:65532
# gRPC, HTTP (/json, /healthcheck), debug (/rlconfig, /stats).
EXPOSE 8081 8080 6070
ENTRYPOINT ["/usr/local/bin/ratelimit"]
