//! Crash points for tests: `--failpoint NAME` makes the process abort when
//! the failover engine reaches `NAME`, the way a SIGKILL at that moment
//! would (no destructors, no Lease release). The e2e suite uses them to
//! kill the leader at every phase of a failover and check that the next
//! leader finishes it. Unset (the default), [`hit`] is one atomic load.
//!
//! Points: `planned-entered-<Phase>` (after the phase is written),
//! `planned-after-fence`, `planned-after-catch-up`, `planned-after-decide`,
//! `planned-after-promote`, `planned-after-repoint`,
//! `decide-after-record` (a decision recorded, status not yet written),
//! `emergency-after-decide`.

use std::sync::OnceLock;

static POINT: OnceLock<Option<String>> = OnceLock::new();

/// Arms `point` (once, at start-up).
pub(crate) fn arm(point: Option<String>) {
    let _ = POINT.set(point);
}

/// Aborts the process when `point` is the armed one.
pub(crate) fn hit(point: &str) {
    if POINT.get().and_then(Option::as_deref) == Some(point) {
        tracing::error!(point, "failpoint reached: aborting");
        std::process::abort();
    }
}
