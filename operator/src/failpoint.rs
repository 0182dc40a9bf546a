//! Crash points for tests: `--failpoint NAME` makes the process abort when
//! the failover engine reaches `NAME`, the way a SIGKILL at that moment
//! would (no destructors, no Lease release). The e2e suite uses them to
//! kill the leader at every phase of a failover and check that the next
//! leader finishes it. Unset (the default), [`Failpoint::hit`] is one comparison.
//!
//! Points: `planned-entered-<Phase>` (after the phase is written),
//! `planned-after-fence`, `planned-after-catch-up`, `planned-after-decide`,
//! `planned-after-promote`, `planned-after-repoint`,
//! `decide-after-record` (a decision recorded, status not yet written),
//! `emergency-after-decide`.

/// The armed crash point of the process, if any (`--failpoint`); held by
/// the operator's `Context`, so each reconcile reads it from there.
#[derive(Clone, Debug, Default)]
pub(crate) struct Failpoint(Option<std::sync::Arc<str>>);

impl Failpoint {
    /// Arms `point` (`None`: none).
    pub(crate) fn armed(point: Option<&str>) -> Failpoint {
        Failpoint(point.map(std::sync::Arc::from))
    }

    /// Aborts the process when `point` is the armed one.
    pub(crate) fn hit(&self, point: &str) {
        if self.0.as_deref() == Some(point) {
            tracing::error!(point, "failpoint reached: aborting");
            std::process::abort();
        }
    }
}
