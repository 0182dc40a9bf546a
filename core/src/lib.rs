//! Bloodraven's domain: the rules every decision follows, with no I/O and no
//! Kubernetes or MySQL client type in reach (the compiler holds that: this
//! crate depends on neither kube nor mysql_async). The operator reads the
//! sites and the API server, hands the facts to these rules, and carries out
//! what they decide.
//!
//! - [`lease`]: the deploy-lease state machine (the migration mutex, the
//!   failover-hold, tombstones, verification records), property-tested.
//! - [`failover`]: the rules of each site change: the planned failover's
//!   decision table, when an emergency failover may promote, what a
//!   promotion abandons, and the replica check of every round.
//! - [`gtid`]: GTID positions and sets of both flavours, and their
//!   arithmetic (covered, errant, missing ranges), property-tested.
//! - [`assess`]: from the sites, the decided roles and one round of probes,
//!   the group's conditions, its stability, and whether bootstrap may
//!   complete, property-tested.
//! - [`observation`]: what one probe of a site saw, in flavour-neutral terms.
//! - [`conditions`]: a condition as the rules compute it, before the
//!   operator gives it times and a generation.
//!
//! The module map and how the operator drives these rules: docs/architecture.md.

pub mod assess;
pub mod conditions;
pub mod failover;
pub mod gtid;
pub mod lease;
pub mod observation;

pub use observation::{Flavor, ReplicationObservation, SemiSync, SiteObservation};
