//! Bloodraven's API surface shared by every component: the custom resource
//! types of `bloodraven.shipstream.io/v1alpha1` and the well-known names
//! (annotations, labels, audiences, ports, Lease names).
//!
//! This crate does no I/O. The operator, the tests and `cargo xtask crd`
//! depend on it; the CRD YAML in `charts/bloodraven/crds/` is generated from
//! these types, so the types are the single source of the schema.

pub mod deploy;
pub mod names;
pub mod v1alpha1;
