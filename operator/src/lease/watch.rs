//! Push revocation's plumbing: who is told when a group's deploy leases
//! change ([`Changes`]), and how many watches may be open ([`Watches`]).
//!
//! Model: only the leader writes deploy Leases, and every write goes through
//! the lease [`super::service::Service`], which bumps the group's counter in
//! [`Changes`] after each successful write (a grant, a renewal, a release,
//! a revocation, a sweep). A watch subscribes before it looks at the lease,
//! so a write between its look and its wait still wakes it: a revocation
//! reaches every watcher of the group as soon as its write returns. Writes
//! this process did not make (another replica during a leadership change,
//! the finalizer deleting a group's Leases) are caught by a watch's periodic
//! fresh read; the renewal stays the source of truth either way.
//!
//! Bounds: a watch holds a connection for up to its wait (≤ 60 s), so at most
//! [`MAX_WATCHES_PER_LEASE`] watches of one lease and at most the
//! listener's [`Watches::new`] total are open at once; more answer `429`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// Most watches of one lease (group, kind, operation, client) open at once.
/// A sidecar needs one per lease; a few more cover a reconnect while the
/// server has not yet noticed that the old connection is gone.
pub(crate) const MAX_WATCHES_PER_LEASE: usize = 4;

/// Entries [`Changes`] keeps before it drops those nobody listens to.
const PRUNE_ABOVE: usize = 1024;

/// A change counter per group.
#[derive(Clone, Debug, Default)]
pub(crate) struct Changes {
    groups: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

impl Changes {
    /// A receiver that sees every later change of `group`'s deploy leases.
    pub(crate) fn subscribe(&self, group: &str) -> watch::Receiver<u64> {
        let mut groups = self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if groups.len() > PRUNE_ABOVE {
            groups.retain(|_, tx| tx.receiver_count() > 0);
        }
        groups.entry(group.to_owned()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Tells the watchers of `group` that its deploy leases changed.
    pub(crate) fn changed(&self, group: &str) {
        let groups = self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tx) = groups.get(group) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// Which lease a watch is on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LeaseKey {
    /// The group.
    pub group: String,
    /// The kind.
    pub kind: bloodraven_api::deploy::LeaseKind,
    /// The operation.
    pub operation_id: String,
    /// The caller, `namespace/serviceAccount`.
    pub client: String,
}

/// The open watches, bounded per lease and in total.
#[derive(Clone, Debug)]
pub(crate) struct Watches {
    open: Arc<Mutex<(usize, HashMap<LeaseKey, usize>)>>,
    max_total: usize,
}

/// Why a watch was not opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// [`MAX_WATCHES_PER_LEASE`] watches of this lease are open.
    Lease,
    /// The listener's total is reached.
    Total,
}

/// One open watch; its place is given back on drop.
#[derive(Debug)]
pub(crate) struct Open {
    watches: Watches,
    key: LeaseKey,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut open = self.watches.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.key);
            }
        }
    }
}

impl Watches {
    /// At most `max_total` watches at once (≥ 1).
    pub(crate) fn new(max_total: usize) -> Self {
        Watches { open: Arc::default(), max_total: max_total.max(1) }
    }

    /// Opens a watch of `key`, or says which bound is reached.
    pub(crate) fn open(&self, key: LeaseKey) -> Result<Open, Full> {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if open.0 >= self.max_total {
            return Err(Full::Total);
        }
        let n = open.1.entry(key.clone()).or_insert(0);
        if *n >= MAX_WATCHES_PER_LEASE {
            return Err(Full::Lease);
        }
        *n += 1;
        open.0 += 1;
        Ok(Open { watches: self.clone(), key })
    }

    /// Watches open now.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bloodraven_api::deploy::LeaseKind;

    use super::*;

    fn key(op: &str) -> LeaseKey {
        LeaseKey { group: "g".into(), kind: LeaseKind::Migration, operation_id: op.into(), client: "ns/sa".into() }
    }

    #[test]
    fn watches_are_bounded_per_lease_and_in_total() {
        let w = Watches::new(6);
        let a: Vec<Open> = (0..MAX_WATCHES_PER_LEASE).map(|_| w.open(key("a")).unwrap()).collect();
        assert_eq!(w.open(key("a")).unwrap_err(), Full::Lease);
        let b1 = w.open(key("b")).unwrap();
        let b2 = w.open(key("b")).unwrap();
        assert_eq!(w.open(key("c")).unwrap_err(), Full::Total);
        assert_eq!(w.count(), 6);
        drop(a);
        drop(b1);
        assert_eq!(w.count(), 1);
        let _a = w.open(key("a")).unwrap();
        drop(b2);
        assert_eq!(w.count(), 1);
    }

    #[tokio::test]
    async fn a_change_after_subscribing_is_never_missed() {
        let changes = Changes::default();
        changes.changed("g"); // nobody listens: nothing kept
        let mut rx = changes.subscribe("g");
        let mut other = changes.subscribe("h");
        changes.changed("g");
        tokio::time::timeout(Duration::from_secs(1), rx.changed()).await.unwrap().unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), other.changed()).await.is_err(),
            "another group's watchers are not woken"
        );
    }
}
