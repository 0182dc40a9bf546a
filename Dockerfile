# The project's images for a registry, built the same way `hack/images.sh`
# builds them here without a daemon: one static binary each (the sidecar's
# with bloodraven-migrate beside it), nothing else inside, run as 65532. See
# docs/images.md.
#
#   docker build --target webhook -t registry.example/bloodraven/webhook:TAG .
#   docker build --target sidecar -t registry.example/bloodraven/sidecar:TAG .
#   docker build -t registry.example/bloodraven/operator:TAG .   (the last stage)
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked --release --target x86_64-unknown-linux-gnu -p bloodraven-operator -p bloodraven-webhook -p bloodraven-kubectl \
 && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked --profile release-sidecar --target x86_64-unknown-linux-gnu -p bloodraven-sidecar -p bloodraven-migrate \
 && strip -o /bloodraven-operator target/x86_64-unknown-linux-gnu/release/bloodraven-operator \
 && strip -o /bloodraven-webhook target/x86_64-unknown-linux-gnu/release/bloodraven-webhook \
 && strip -o /kubectl-bloodraven target/x86_64-unknown-linux-gnu/release/kubectl-bloodraven \
 && strip -o /bloodraven-sidecar target/x86_64-unknown-linux-gnu/release-sidecar/bloodraven-sidecar \
 && strip -o /bloodraven-migrate target/x86_64-unknown-linux-gnu/release-sidecar/bloodraven-migrate

FROM scratch AS webhook
COPY --from=build /bloodraven-webhook /bloodraven-webhook
USER 65532:65532
ENTRYPOINT ["/bloodraven-webhook"]

FROM scratch AS sidecar
COPY --from=build /bloodraven-sidecar /bloodraven-sidecar
# The migration runner, beside the sidecar: `install` copies both into an
# injected Pod's shared volume (/run/bloodraven/bin).
COPY --from=build /bloodraven-migrate /bloodraven-migrate
USER 65532:65532
ENTRYPOINT ["/bloodraven-sidecar"]

FROM scratch AS operator
COPY --from=build /bloodraven-operator /bloodraven-operator
# The kubectl plugin, beside the operator (docs/kubectl-plugin.md).
COPY --from=build /kubectl-bloodraven /kubectl-bloodraven
USER 65532:65532
ENTRYPOINT ["/bloodraven-operator"]
