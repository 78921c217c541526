# The koord-manager, koord-webhook and koordlet images, one target each:
#
#   docker build --target koord-manager -t <registry>/koord-manager:<version> .
#   docker build --target koord-webhook -t <registry>/koord-webhook:<version> .
#   docker build --target koord-scheduler-extender -t <registry>/koord-scheduler-extender:<version> .
#   docker build --target koordlet      -t <registry>/koordlet:<version> .
#
# Each image holds one release binary at the path the chart runs (`/koord-manager`,
# `/koord-webhook`, `/koordlet`; the chart passes only args) on a glibc base with nothing else.
# manager and webhook run as the non-root user 65532, koordlet as root (it writes other pods'
# cgroups). scripts/build-images.sh produces the same layout without Docker or a base image
# (the binaries, the shared libraries they link: libc, libm, libgcc_s, and a CA bundle), which is how the
# images are built and tested in this repository's CI; this file is for registries and users.

FROM rust:1.95.0-bookworm AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p koord-manager -p koord-webhook -p koord-scheduler-extender -p koordlet --bins \
    && mkdir /out \
    && for b in koord-manager koord-webhook koord-scheduler-extender koordlet; do \
           cp "target/release/$b" "/out/$b" && strip --strip-debug "/out/$b"; \
       done

# distroless/cc: glibc, libgcc_s, a CA bundle, /etc/passwd with nonroot (65532); no shell.
FROM gcr.io/distroless/cc-debian12:nonroot AS koord-manager
COPY --from=builder /out/koord-manager /koord-manager
USER 65532:65532
ENTRYPOINT ["/koord-manager"]

FROM gcr.io/distroless/cc-debian12:nonroot AS koord-webhook
COPY --from=builder /out/koord-webhook /koord-webhook
USER 65532:65532
ENTRYPOINT ["/koord-webhook"]

FROM gcr.io/distroless/cc-debian12:nonroot AS koord-scheduler-extender
COPY --from=builder /out/koord-scheduler-extender /koord-scheduler-extender
USER 65532:65532
ENTRYPOINT ["/koord-scheduler-extender"]

FROM gcr.io/distroless/cc-debian12 AS koordlet
COPY --from=builder /out/koordlet /koordlet
USER 0:0
ENTRYPOINT ["/koordlet"]
