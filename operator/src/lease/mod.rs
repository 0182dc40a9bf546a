//! The lease domain: deploy leases (the migration mutex and the
//! failover-hold), their tombstones and verification records, and
//! revocation — one module with a small interface that the deploy API's
//! HTTP handlers, the reconcilers and the failover engines all use; neither
//! reaches into the other.
//!
//! - `bloodraven_core::lease::machine`: the pure state machine it runs,
//!   property-tested (docs/concepts.md, "Leases", "The generation is the
//!   fence"; docs/failover.md, "What a hold holds").
//! - [`store`]: its storage on `coordination.k8s.io/v1` Lease objects in the
//!   operator's namespace, compare-and-swap, bound to the group's UID.
//! - [`service`]: the interface: read → decide → write, retried on conflict
//!   (`create`, `renew`, `release`, `maintain`, `state`, `watch_state`).
//! - [`watch`]: push revocation's plumbing: a change counter per group that
//!   every write bumps, and the bounds on open watches.

pub(crate) mod service;
pub(crate) mod store;
pub(crate) mod watch;
