//! Bloodraven's API surface shared by every component: the custom resource
//! types of `bloodraven.shipstream.io/v1alpha1`, the deploy API's wire types,
//! the sidecar's local socket protocol and the well-known names
//! (annotations, labels, audiences, ports, Lease names).
//!
//! This crate does no I/O, with one opt-in exception: the calling side of
//! the local socket (`socket::client`, feature `socket-client`). The
//! operator, the webhook, the tests and `cargo xtask crd` depend on it; the
//! CRD YAML in `charts/bloodraven/crds/` is generated from these types, so
//! the types are the single source of the schema.
//!
//! Features: `crd` (default) holds everything that needs kube or
//! k8s-openapi — the custom resources, the deploy API's group view (which
//! embeds their status) and its OpenAPI document, and the watch-cache
//! names. Without it the crate is the contracts alone (the deploy API's
//! lease calls, the local socket, names, the phase and condition
//! vocabulary), which is what the sidecar and the migration runner link:
//! neither pulls in a Kubernetes client.

pub mod deploy;
pub mod names;
pub mod socket;
pub mod v1alpha1;
