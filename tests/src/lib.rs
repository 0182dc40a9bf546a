//! Test support for Bloodraven's end-to-end tests. Everything here drives
//! real components: the kube-apiserver and etcd started by
//! `hack/control-plane.sh`, MariaDB sites started by `hack/mariadb.sh`, and
//! the real `bloodraven-operator` binary running under its own ServiceAccount
//! token with exactly the chart's RBAC (`charts/bloodraven/files/operator-rbac.yaml`).
//!
//! `make test` starts the control plane and sets `BLOODRAVEN_E2E_DIR`; a test
//! run without it fails at once with a message saying so (never a silent skip).
//!
//! Isolation: every test gets its own namespace, its own group names, its own
//! MariaDB sites and its own operator processes, which manage only groups
//! carrying the test's label (`--group-selector`). Tests can run in any order
//! and in parallel.

// Test support: a failed setup step must fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::missing_panics_doc)]

pub mod cluster;
pub mod deploy;
pub mod fixtures;
pub mod migrate;
pub mod netns;
pub mod operator;
pub mod pods;
pub mod promtext;
pub mod sidecar;
pub mod sites;
pub mod wait;
pub mod webhook;
pub mod writer;

pub use cluster::{Cluster, TestNamespace};
pub use operator::Operator;
pub use sites::SitePair;
pub use wait::wait_for;

use std::path::PathBuf;

/// The repository root: `BLOODRAVEN_REPO_ROOT` (set by `hack/e2e.sh`), else
/// the parent of `CARGO_MANIFEST_DIR` as cargo sets it when it runs the test
/// (at run time: a binary reused from a shared target folder was compiled
/// in whichever checkout built it first, and its compile-time path may name
/// another clone, or one since deleted).
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("BLOODRAVEN_REPO_ROOT") {
        return PathBuf::from(root);
    }
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest.parent().expect("tests/ has a parent").to_path_buf()
}

/// The e2e state folder (`BLOODRAVEN_E2E_DIR`), set by `make test`.
pub fn e2e_dir() -> PathBuf {
    match std::env::var_os("BLOODRAVEN_E2E_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "BLOODRAVEN_E2E_DIR is not set: run the e2e tests with `make test` (or `make e2e`), which starts etcd, kube-apiserver and sets it"
        ),
    }
}

/// A short random suffix for names.
pub fn suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..6].to_owned()
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// Installs the ring crypto provider once (kube and reqwest use rustls).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
