//! How long a drain may last: the catch-up's waits and the drain's
//! deadline (fence + catch-up bounds from its `Draining` time), and the
//! cap on a `Draining` time a hand edit moved into the future.

use crate::controller::Context;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::PhaseTransition;
use bloodraven_api::v1alpha1::PlannedFailoverStatus;
use bloodraven_core::failover::planned::Phase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use std::time::Duration;

/// Longest single wait for the target's catch-up: the reconcile of the
/// group is given back between waits (its probes, status and deletion go
/// on), and the catch-up goes on where it was at the next one.
pub(super) const CATCH_UP_SLICE: Duration = Duration::from_secs(2);
/// When to look again after a catch-up wait that has not reached the position.
pub(super) const CATCH_UP_RECHECK: Duration = Duration::from_millis(100);

/// One catch-up wait: how long, and whether it is the last one.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Slice {
    pub(super) wait: Duration,
    pub(super) last: bool,
}

/// The next catch-up wait of a request with phase `history` at `now`, up
/// to its [`drain_deadline`]. Without a `Draining` transition (status
/// wiped) the whole catch-up bound is waited at once, as the last wait:
/// bounded either way.
pub(super) fn catch_up_slice(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> Slice {
    let bound = Duration::from_secs(u64::from(policy.catch_up_timeout_seconds.clamp(1, 3600)));
    let Some(deadline) = drain_deadline(history, policy, now) else { return Slice { wait: bound, last: true } };
    let left_ms = u64::try_from(deadline.as_millisecond().saturating_sub(now.as_millisecond())).unwrap_or(0);
    let left = Duration::from_millis(left_ms);
    if left <= CATCH_UP_SLICE {
        // At least a second: MASTER_GTID_WAIT's timeout is whole seconds here.
        Slice { wait: left.max(Duration::from_secs(1)), last: true }
    } else {
        Slice { wait: CATCH_UP_SLICE, last: false }
    }
}

/// When this process first saw each request draining, by `(group UID,
/// requestId)`: the drain's start is the earlier of that and the
/// `Draining` time in status, so a hand edit moving that time into the
/// future (found by an attack: the old primary stayed fenced past every
/// bound) extends no drain by more than one process's view of it.
#[derive(Clone, Debug, Default)]
pub struct DrainsSeen(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(String, String), Timestamp>>>);

impl DrainsSeen {
    /// The time to count a drain of `request_id` in `group_uid` from: the
    /// first time this process saw it draining, or `stored` if earlier.
    pub(super) fn start(&self, group_uid: &str, request_id: &str, stored: Timestamp, now: Timestamp) -> Timestamp {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = *map.entry((group_uid.to_owned(), request_id.to_owned())).or_insert(now);
        stored.min(seen)
    }

    /// Forgets the drains of a request that left `Draining`.
    pub(super) fn forget(&self, group_uid: &str, request_id: &str) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.remove(&(group_uid.to_owned(), request_id.to_owned()));
    }
}

/// Caps the time of a draining request's latest `Draining` transition at
/// when this process first saw it draining (see [`DrainsSeen`]); the capped
/// time is what the next status write keeps.
pub(super) fn cap_drain(ctx: &Context, group: &MysqlFailoverGroup, state: &mut PlannedFailoverStatus) {
    if Phase::parse(&state.phase) != Some(Phase::Draining) {
        return;
    }
    let uid = group.metadata.uid.clone().unwrap_or_default();
    let Some(entry) = state.history.iter_mut().rev().find(|t| t.phase == Phase::Draining.as_str()) else { return };
    let start = ctx.groups.drains.start(&uid, &state.request_id, entry.time.0, Timestamp::now());
    if start < entry.time.0 {
        tracing::warn!(group = %group.name_any(), request_id = %state.request_id, stored = %entry.time.0, counted_from = %start, "the Draining time in status lies after this operator first saw the drain; counting from the earlier");
        entry.time = Time(start);
    }
}

/// Whether a request with phase `history` drained for longer than its
/// bounds at `now` (see [`drain_deadline`]). False without a `Draining`
/// transition (nothing to count from).
pub(super) fn drain_deadline_passed(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> bool {
    drain_deadline(history, policy, now).is_some_and(|deadline| now > deadline)
}

/// The drain's deadline: the latest `Draining` transition of `history`
/// (as the caller capped it with [`DrainsSeen`]) plus `fenceTimeoutSeconds`
/// and `catchUpTimeoutSeconds`, since the fence comes first. Kept in status,
/// so a new leader goes on with the same deadline.
pub(super) fn drain_deadline(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> Option<Timestamp> {
    let drained = history.iter().rev().find(|t| t.phase == Phase::Draining.as_str())?.time.0.min(now);
    let bounds = u64::from(policy.fence_timeout_seconds.clamp(1, 300))
        + u64::from(policy.catch_up_timeout_seconds.clamp(1, 3600));
    drained.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(i64::try_from(bounds).unwrap_or(i64::MAX))).ok()
}
