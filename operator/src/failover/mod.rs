//! The failover engines: every change of a group's sites, one module per
//! operation, each running the pure rules of the same name in
//! `bloodraven_core::failover` against the real sites.
//!
//! - [`planned`]: planned failover (a `spec.plannedFailover` request).
//! - [`ordered_update`]: the ordered update (a `spec.orderedUpdate`
//!   request): each site's Job, standby first, around a switchover.
//! - [`restore`]: restore-in-place (a `spec.restoreInPlace` request): the
//!   site's Job restores it from a backup, then it is promoted, and the old
//!   primary waits for a person's re-clone.
//! - [`site_job`]: the Job a request runs on one site.
//! - [`emergency`]: emergency failover (the active site stops answering),
//!   the promotion a decision left pending, and returning old primaries.
//! - [`reassert`]: fencing reassertion (a non-active site found writable).
//! - [`decision`]: the group's decision (`activeSite`, `topologyGeneration`):
//!   resolved against the record each round, written record first, then status.
//! - [`switchover`]: the steps a switchover takes on the sites (fence,
//!   catch-up, decision, promotion, repoint), shared by every request
//!   that runs one.
//! - [`request`]: the bookkeeping of the requests that run a user's Job.
//! - [`record`]: the decision record, the operator's own copy of each decision.
//!
//! The failover-group controller (`crate::controller::failover_group`)
//! observes the sites, runs these engines on what it observed, and writes
//! what it saw to status; see docs/architecture.md.

pub(crate) mod decision;
pub(crate) mod emergency;
pub(crate) mod ordered_update;
pub(crate) mod planned;
pub(crate) mod reassert;
pub(crate) mod record;
pub(crate) mod request;
pub(crate) mod restore;
pub(crate) mod round;
pub(crate) mod site_job;
pub(crate) mod switchover;
