# The agenthooks images: one build stage, two final stages (targets).
#
#   docker build --target operator   -t agenthooks/operator:0.1.0 .
#   docker build --target dispatcher -t agenthooks/dispatcher:0.1.0 .
#
# Each final stage is FROM scratch plus the tree scripts/image-rootfs.sh assembles: the
# binary, the glibc libraries it links, the CA bundle, /etc/passwd; the dispatcher adds
# busybox for the command runner (sh and a few tools). Runs as 65532:65532; nothing in it
# needs to write, so readOnlyRootFilesystem works (the chart mounts /tmp and the audit
# volume). The test harness (e2e/images/build.sh) reads the final stages below and makes
# the same images without Docker; it accepts only the instructions used here (see
# docs/images.md before adding one).

FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends busybox-static ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p agenthooks-operator -p agenthooks-dispatcher --bins \
 && mkdir -p /out \
 && cp target/release/agenthooks-operator target/release/agenthooks-dispatcher /out/
RUN BUSYBOX=/bin/busybox scripts/image-rootfs.sh operator /out /rootfs/operator \
 && BUSYBOX=/bin/busybox scripts/image-rootfs.sh dispatcher /out /rootfs/dispatcher

FROM scratch AS operator
COPY --from=build /rootfs/operator/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/usr/local/bin/agenthooks-operator"]

FROM scratch AS dispatcher
COPY --from=build /rootfs/dispatcher/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/usr/local/bin/agenthooks-dispatcher"]
