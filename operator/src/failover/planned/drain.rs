//! The drain's time rules (`bloodraven_core::failover::planned::drain`)
//! applied to a request's status: its start is its latest `Draining`
//! transition, capped at when this process first saw it draining (a hand
//! edit may move that time into the future).

use crate::controller::Context;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::PhaseTransition;
use bloodraven_api::v1alpha1::PlannedFailoverStatus;
use bloodraven_core::failover::planned::Phase;
use bloodraven_core::failover::planned::drain::{self, Bounds, Slice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// The drain's bounds as `policy` sets them.
pub(super) fn bounds(policy: &bloodraven_api::v1alpha1::FailoverPolicy) -> Bounds {
    Bounds {
        fence_timeout_seconds: policy.fence_timeout_seconds,
        catch_up_timeout_seconds: policy.catch_up_timeout_seconds,
    }
}

/// The start of the request's drain: its latest `Draining` transition (as
/// the caller capped it with [`DrainsSeen`]); `None` when status shows none.
pub(super) fn drained(history: &[PhaseTransition]) -> Option<Timestamp> {
    history.iter().rev().find(|t| t.phase == Phase::Draining.as_str()).map(|t| t.time.0)
}

/// The next catch-up wait of a request with phase `history` at `now`
/// (`drain::catch_up_slice`).
pub(super) fn catch_up_slice(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> Slice {
    drain::catch_up_slice(drained(history), bounds(policy), now)
}

/// When this process first saw each request draining, by `(group UID,
/// requestId)`: the drain's start is the earlier of that and the
/// `Draining` time in status, so a hand edit moving that time into the
/// future (found by an attack: the old primary stayed fenced past every
/// bound) extends no drain by more than one process's view of it.
#[derive(Clone, Debug, Default)]
pub(crate) struct DrainsSeen(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(String, String), Timestamp>>>);

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

/// Whether a request with phase `history` drained past its deadline at `now`.
pub(super) fn drain_deadline_passed(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> bool {
    drain::deadline_passed(drained(history), bounds(policy), now)
}

/// The deadline of a request with phase `history` (`drain::deadline`).
/// Kept in status, so a new leader goes on with the same deadline.
pub(super) fn drain_deadline(
    history: &[PhaseTransition],
    policy: &bloodraven_api::v1alpha1::FailoverPolicy,
    now: Timestamp,
) -> Option<Timestamp> {
    drain::deadline(drained(history), bounds(policy), now)
}
