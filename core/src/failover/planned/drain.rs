//! How long a drain may last: the catch-up's waits and the drain's
//! deadline (fence + catch-up bounds, counted from the drain's start).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// Longest single wait for the target's catch-up: the reconcile of the
/// group is given back between waits (its probes, status and deletion go
/// on), and the catch-up goes on where it was at the next one.
pub const CATCH_UP_SLICE: Duration = Duration::from_secs(2);
/// When to look again after a catch-up wait that has not reached the position.
pub const CATCH_UP_RECHECK: Duration = Duration::from_millis(100);

/// The bounds of a drain, as the group's failover policy sets them
/// (clamped as the CRD documents: fence 1–300 s, catch-up 1–3600 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// `fenceTimeoutSeconds`.
    pub fence_timeout_seconds: u32,
    /// `catchUpTimeoutSeconds`.
    pub catch_up_timeout_seconds: u32,
}

impl Bounds {
    /// The catch-up's own bound.
    pub fn catch_up(self) -> Duration {
        Duration::from_secs(u64::from(self.catch_up_timeout_seconds.clamp(1, 3600)))
    }

    /// The whole drain's bound: the fence comes first, then the catch-up.
    pub fn total(self) -> Duration {
        Duration::from_secs(u64::from(self.fence_timeout_seconds.clamp(1, 300))) + self.catch_up()
    }
}

/// One catch-up wait: how long, and whether it is the last one.
#[derive(Debug, PartialEq, Eq)]
pub struct Slice {
    /// How long to wait for the position.
    pub wait: Duration,
    /// No wait follows: a position not reached by its end fails the drain.
    pub last: bool,
}

/// The drain's deadline: its start (`drained`, the latest `Draining` time,
/// never later than `now`) plus [`Bounds::total`]. `None` without a start
/// (status wiped: nothing to count from).
pub fn deadline(drained: Option<Timestamp>, bounds: Bounds, now: Timestamp) -> Option<Timestamp> {
    let total = SignedDuration::try_from(bounds.total()).ok()?;
    drained?.min(now).checked_add(total).ok()
}

/// Whether the drain ran past its [`deadline`] at `now`; false without a start.
pub fn deadline_passed(drained: Option<Timestamp>, bounds: Bounds, now: Timestamp) -> bool {
    deadline(drained, bounds, now).is_some_and(|deadline| now > deadline)
}

/// The next catch-up wait at `now`, up to the drain's [`deadline`].
/// Without a start the whole catch-up bound is waited at once, as the last
/// wait: bounded either way.
pub fn catch_up_slice(drained: Option<Timestamp>, bounds: Bounds, now: Timestamp) -> Slice {
    let Some(deadline) = deadline(drained, bounds, now) else { return Slice { wait: bounds.catch_up(), last: true } };
    let left_ms = u64::try_from(deadline.as_millisecond().saturating_sub(now.as_millisecond())).unwrap_or(0);
    let left = Duration::from_millis(left_ms);
    if left <= CATCH_UP_SLICE {
        // At least a second: MASTER_GTID_WAIT's timeout is whole seconds.
        Slice { wait: left.max(Duration::from_secs(1)), last: true }
    } else {
        Slice { wait: CATCH_UP_SLICE, last: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_up_waits_in_slices_until_the_bound_counted_from_the_drain() {
        let t0: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let at = |secs: i64| t0 + SignedDuration::from_secs(secs);
        let bounds = Bounds { fence_timeout_seconds: 10, catch_up_timeout_seconds: 30 };
        let drained = Some(t0);
        // Deadline: drain + fence bound + catch-up bound = t0 + 40 s.
        assert_eq!(catch_up_slice(drained, bounds, at(1)), Slice { wait: CATCH_UP_SLICE, last: false });
        assert_eq!(catch_up_slice(drained, bounds, at(37)), Slice { wait: CATCH_UP_SLICE, last: false });
        assert_eq!(catch_up_slice(drained, bounds, at(39)), Slice { wait: Duration::from_secs(1), last: true });
        assert_eq!(
            catch_up_slice(drained, bounds, at(500)),
            Slice { wait: Duration::from_secs(1), last: true },
            "past the deadline: one last short look, then it fails"
        );
        assert!(!deadline_passed(drained, bounds, at(40)) && deadline_passed(drained, bounds, at(41)));
        // A start in the future counts from now, never later.
        assert_eq!(deadline(Some(at(100)), bounds, at(5)), Some(at(45)));
        // No start (status wiped): the whole catch-up bound, once; never past.
        assert_eq!(catch_up_slice(None, bounds, at(1)), Slice { wait: Duration::from_secs(30), last: true });
        assert!(!deadline_passed(None, bounds, at(10_000)));
    }

    #[test]
    fn bounds_are_clamped_as_the_crd_documents() {
        let zero = Bounds { fence_timeout_seconds: 0, catch_up_timeout_seconds: 0 };
        assert_eq!(zero.total(), Duration::from_secs(2));
        let huge = Bounds { fence_timeout_seconds: u32::MAX, catch_up_timeout_seconds: u32::MAX };
        assert_eq!(huge.total(), Duration::from_secs(3900));
    }
}
