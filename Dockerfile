# The operator image for a registry, built the same way `hack/images.sh`
# builds it here without a daemon: one static binary, nothing else inside,
# run as 65532. See docs/images.md.
#
#   docker build -t registry.example/bloodraven/operator:TAG .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked --release --target x86_64-unknown-linux-gnu -p bloodraven-operator \
 && strip -o /bloodraven-operator target/x86_64-unknown-linux-gnu/release/bloodraven-operator

FROM scratch
COPY --from=build /bloodraven-operator /bloodraven-operator
USER 65532:65532
ENTRYPOINT ["/bloodraven-operator"]
