//! Test support for Bloodraven's end-to-end tests. Everything here drives
//! real components: the kube-apiserver and etcd started by
//! `hack/control-plane.sh`, MariaDB or MySQL sites started by `hack/mariadb.sh` or `hack/mysql.sh`, and
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

pub mod app;
pub mod argocd;
pub mod argocd_app;
pub mod certmanager;
pub mod cluster;
pub mod deploy;
pub mod fixtures;
pub mod helm;
pub mod hostagent;
pub mod migrate;
pub mod nemesis;
pub mod netns;
pub mod operator;
pub mod plugin;
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

/// First port [`free_port`] hands out.
const PORTS_FIRST: u16 = 20_000;
/// How many ports [`free_port`] cycles through: 20000–29999, below the
/// kernel's ephemeral range (`ip_local_port_range`, 32768–60999 here) and
/// the NodePort range (30000–32767).
const PORTS_COUNT: u16 = 10_000;

/// A TCP port for a process a test is about to start, free on every local
/// address when handed out.
///
/// The port comes from one counter shared by every test process of the run
/// (a file beside the run's other state, `$BLOODRAVEN_E2E_DIR/ports`, under
/// a file lock), in a range the kernel never hands out by itself. The old
/// way — bind port 0, read it, release it — let two tests that asked at the
/// same moment, or an outgoing connection's source port, get the same
/// number: one process then failed to bind and a test talked to another
/// test's process (a webhook test waited 30 s for reviews that went to
/// another webhook). The counter gives each number out once per cycle, and a
/// number that is bound anyway (a process left from an earlier run) is
/// skipped.
///
/// Panics when the counter file cannot be used or no port in the range is free.
pub fn free_port() -> u16 {
    use std::io::{Read, Seek, Write};
    let dir = std::env::var_os("BLOODRAVEN_E2E_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let path = dir.join("ports");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap_or_else(|e| panic!("open the port counter {}: {e}", path.display()));
    file.lock().unwrap_or_else(|e| panic!("lock the port counter {}: {e}", path.display()));
    let mut text = String::new();
    file.read_to_string(&mut text).unwrap();
    // A new counter starts at a random place, so a run does not reuse the
    // ports of a run whose processes may still be going away.
    let mut next = text.trim().parse::<u16>().unwrap_or_else(|_| uuid::Uuid::new_v4().as_u128() as u16) % PORTS_COUNT;
    for _ in 0..PORTS_COUNT {
        let port = PORTS_FIRST + next;
        next = (next + 1) % PORTS_COUNT;
        let free = std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free {
            file.rewind().unwrap();
            file.set_len(0).unwrap();
            write!(file, "{next}").unwrap();
            return port;
        }
    }
    panic!("no free port in {PORTS_FIRST}..{}", PORTS_FIRST + PORTS_COUNT)
}

/// Installs the ring crypto provider once (kube and reqwest use rustls).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The peak resident memory (`VmHWM`, KiB) of process `pid` so far.
pub fn memory_peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
