//! Whether an observation is news: the observer writes a group's status only
//! when what it would apply differs from what the status holds. Nothing is
//! rewritten because it is old: at steady state a group costs the API
//! server no write at all. Freshness is served elsewhere: the leader
//! Lease's `renewTime` shows the operator is alive, and
//! `bloodraven_site_last_probe_timestamp_seconds` moves every probe.
//!
//! Model: the observer owns `status.{stable, unstableReason, health,
//! conditions, observedGeneration}` (server-side apply under
//! `OBSERVER_FIELD_MANAGER`; `health` and `conditions` are atomic lists, so
//! an apply replaces them whole). The comparison is against the group's
//! current status, whoever wrote it last (`mark_operation_in_progress` also
//! sets `stable`/`unstableReason` by merge patch; `plannedFailover`, `activeSite`
//! and `topologyGeneration` belong to other managers and are not compared):
//! a status that differs in any compared field, for whatever reason, is
//! rewritten as on every probe before; only applies that would change
//! nothing a reader acts on are skipped.
//!
//! Not a change by themselves (they are written with the next change):
//! - `health[].lastProbeTime`: the time of the probe whose results were
//!   last written, that is of the last change to the observed status.
//! - `health[].gtidPosition`: moves with every transaction on a busy
//!   primary; people read role, reachability and lag. Except while another
//!   site may lack some of the writable site's transactions (unreachable,
//!   replication not running or stalled, or [`LAG_STEP_SECONDS`] behind or
//!   more): then the writable
//!   site's moved position is a change. It is what a leader that took over
//!   knows of the primary's last position when the primary dies before it
//!   saw it answer, so what a promotion abandons is never computed from a
//!   position older than the last moment every other site had it all (a
//!   new leader promoted a stalled standby "abandoning 0" that way).
//! - `health[].replicationLagSeconds` moving by less than
//!   [`LAG_STEP_SECONDS`] and less than a fifth of the stored value (lag
//!   appearing or disappearing is a change). The threshold is measured from
//!   the stored value, so a lag that jitters around a value writes nothing;
//!   `bloodraven_replication_lag_seconds` carries every probe's lag.
//!
//! Everything else in `health` (reachable, writable, replicationRunning,
//! server ids, version, errorReason, message), any condition field, and
//! `stable`, `unstableReason` and `observedGeneration` are changes.

use bloodraven_api::v1alpha1::{Condition, MysqlFailoverGroupStatus, SiteHealth};

/// Smallest move of `replicationLagSeconds` (seconds) that is a change by
/// itself: a replica's lag commonly jitters by a second or two between
/// probes, which nobody acts on.
pub(super) const LAG_STEP_SECONDS: u64 = 5;

/// What the observer would apply.
#[derive(Debug)]
pub(super) struct Observation<'a> {
    /// `status.stable`.
    pub stable: bool,
    /// `status.unstableReason` (absent when stable).
    pub unstable_reason: Option<&'a str>,
    /// `status.observedGeneration`: the group's `metadata.generation`.
    pub observed_generation: Option<i64>,
    /// `status.conditions`, after `materialize` (transition times kept).
    pub conditions: &'a [Condition],
    /// `status.health`, one entry per site.
    pub health: &'a [SiteHealth],
}

/// Whether `next` must be written over `stored`: there is no status yet,
/// or it differs in a compared field (see the module header). However old
/// the stored status, an unchanged one is not rewritten.
pub(super) fn must_write(stored: Option<&MysqlFailoverGroupStatus>, next: &Observation<'_>) -> bool {
    let Some(s) = stored else { return true };
    s.stable != Some(next.stable)
        || s.unstable_reason.as_deref() != next.unstable_reason
        || s.observed_generation != next.observed_generation
        || s.conditions != next.conditions
        || s.health.len() != next.health.len()
        || s.health.iter().zip(next.health).any(|(a, b)| !same_health(a, b))
        || (may_lack_transactions(next)
            && s.health
                .iter()
                .zip(next.health)
                .any(|(a, b)| b.writable == Some(true) && a.gtid_position != b.gtid_position))
}

/// Whether a site other than the writable one may lack some of its
/// transactions: unreachable, not replicating, lagging, or reported stalled.
fn may_lack_transactions(next: &Observation<'_>) -> bool {
    let stalled = next.conditions.iter().any(|c| c.type_ == "ReplicationNotRunning" && c.status == "True");
    stalled
        || next.health.iter().any(|h| {
            h.writable != Some(true)
                && (!h.reachable
                    || h.replication_running != Some(true)
                    || h.replication_lag_seconds.is_none_or(|l| l >= LAG_STEP_SECONDS))
        })
}

/// Whether two probe results of a site say the same to a reader (see the
/// module header for what is left out).
fn same_health(a: &SiteHealth, b: &SiteHealth) -> bool {
    let lag_same = match (a.replication_lag_seconds, b.replication_lag_seconds) {
        (None, None) => true,
        (Some(stored), Some(now)) => stored.abs_diff(now) < LAG_STEP_SECONDS.max(stored / 5),
        _ => false,
    };
    let strip = |h: &SiteHealth| SiteHealth {
        gtid_position: None,
        last_probe_time: None,
        replication_lag_seconds: None,
        ..h.clone()
    };
    lag_same && strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn site(name: &str, probed: i64) -> SiteHealth {
        SiteHealth {
            site: name.into(),
            reachable: true,
            writable: Some(name == "iad"),
            replication_running: Some(name != "iad"),
            replication_lag_seconds: (name != "iad").then_some(0),
            gtid_position: Some("0-1-100".into()),
            source_server_id: (name != "iad").then_some(1),
            server_id: Some(if name == "iad" { 1 } else { 2 }),
            version: Some("10.11.14-MariaDB".into()),
            answered_endpoint: Some(format!("127.0.0.1:{}", if name == "iad" { 3306 } else { 3307 })),
            identity: Some(if name == "iad" { 1 } else { 2 }),
            errant_gtids: None,
            error_reason: None,
            message: None,
            last_probe_time: Some(Time(at(probed))),
        }
    }

    fn ready(since: i64) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "AsExpected".into(),
            message: "iad is the writable primary".into(),
            observed_generation: Some(1),
            last_transition_time: Time(at(since)),
        }
    }

    fn stored(probed: i64) -> MysqlFailoverGroupStatus {
        MysqlFailoverGroupStatus {
            stable: Some(true),
            observed_generation: Some(1),
            conditions: vec![ready(0)],
            health: vec![site("iad", probed), site("pdx", probed)],
            ..MysqlFailoverGroupStatus::default()
        }
    }

    /// The status as stored at second 0, and what a probe at `now` observed
    /// after `edit`; whether it is written.
    fn written(now: i64, edit: impl FnOnce(&mut Vec<SiteHealth>, &mut Vec<Condition>)) -> bool {
        let mut health = vec![site("iad", now), site("pdx", now)];
        let mut conditions = vec![ready(0)];
        edit(&mut health, &mut conditions);
        let next = Observation {
            stable: true,
            unstable_reason: None,
            observed_generation: Some(1),
            conditions: &conditions,
            health: &health,
        };
        must_write(Some(&stored(0)), &next)
    }

    #[test]
    fn what_is_a_change() {
        type Edit = fn(&mut Vec<SiteHealth>, &mut Vec<Condition>);
        let cases: &[(&str, Edit, bool)] = &[
            ("nothing", |_, _| {}, false),
            ("the GTID position moved", |h, _| h[0].gtid_position = Some("0-1-5000".into()), false),
            (
                "the primary's position moved while the replica is stalled",
                |h, c| {
                    h[0].gtid_position = Some("0-1-5000".into());
                    c.push(Condition {
                        type_: "ReplicationNotRunning".into(),
                        status: "True".into(),
                        reason: "ReplicationStalled".into(),
                        message: "pdx has not moved".into(),
                        observed_generation: Some(1),
                        last_transition_time: Time(at(0)),
                    });
                },
                true,
            ),
            (
                "the primary's position moved while the replica is unreachable",
                |h, _| {
                    h[0].gtid_position = Some("0-1-5000".into());
                    h[1] = SiteHealth {
                        reachable: false,
                        replication_running: None,
                        replication_lag_seconds: None,
                        ..h[1].clone()
                    };
                },
                true,
            ),
            (
                "the primary's position moved while the replica lags by a second",
                |h, _| {
                    h[0].gtid_position = Some("0-1-5000".into());
                    h[1].replication_lag_seconds = Some(1);
                },
                false,
            ),
            ("lag jitters by a second", |h, _| h[1].replication_lag_seconds = Some(1), false),
            ("lag grew by the step", |h, _| h[1].replication_lag_seconds = Some(LAG_STEP_SECONDS), true),
            ("lag became unknown", |h, _| h[1].replication_lag_seconds = None, true),
            ("unreachable", |h, _| h[1].reachable = false, true),
            ("read-only", |h, _| h[0].writable = Some(false), true),
            ("replication stopped", |h, _| h[1].replication_running = Some(false), true),
            ("another source", |h, _| h[1].source_server_id = Some(7), true),
            ("another server_id", |h, _| h[1].server_id = Some(9), true),
            ("another identity", |h, _| h[1].identity = Some(9), true),
            ("another version", |h, _| h[1].version = Some("11.4.2-MariaDB".into()), true),
            ("a failure reason", |h, _| h[1].error_reason = Some("SiteUnreachable".into()), true),
            ("a failure message", |h, _| h[1].message = Some("connection refused".into()), true),
            ("a site fewer", |h, _| h.truncate(1), true),
            ("a condition message", |_, c| c[0].message = "other".into(), true),
            ("a condition status", |_, c| c[0].status = "False".into(), true),
            ("a condition more", |_, c| c.push(ready(0)), true),
        ];
        for (what, edit, expected) in cases {
            assert_eq!(written(5, *edit), *expected, "{what}");
        }
    }

    #[test]
    fn large_lag_moves_by_a_fifth() {
        let mut s = stored(0);
        s.health[1].replication_lag_seconds = Some(1000);
        let probe = |lag| {
            let mut health = s.health.clone();
            health[1].replication_lag_seconds = Some(lag);
            let next = Observation {
                stable: true,
                unstable_reason: None,
                observed_generation: Some(1),
                conditions: &s.conditions,
                health: &health,
            };
            must_write(Some(&s), &next)
        };
        assert!(!probe(1100), "a tenth more is not news");
        assert!(probe(1200), "a fifth more is");
        assert!(probe(790), "and so is a fifth less");
    }

    #[test]
    fn an_unchanged_status_is_never_rewritten_however_old() {
        let day = 86_400;
        assert!(!written(day, |_, _| {}), "a day later, nothing changed");
        assert!(written(day, |h, _| h[1].reachable = false), "a day later, pdx stopped answering");
    }

    #[test]
    fn status_fields_and_missing_status_are_changes() {
        let conditions = vec![ready(0)];
        let health = vec![site("iad", 5), site("pdx", 5)];
        let base = Observation {
            stable: true,
            unstable_reason: None,
            observed_generation: Some(1),
            conditions: &conditions,
            health: &health,
        };
        let s = stored(0);
        assert!(!must_write(Some(&s), &base));
        assert!(must_write(None, &base), "no status yet");
        let unstable = Observation { stable: false, unstable_reason: Some("Degraded"), ..base };
        assert!(must_write(Some(&s), &unstable));
        let base = Observation { stable: true, unstable_reason: None, ..unstable };
        let newer = Observation { observed_generation: Some(2), ..base };
        assert!(must_write(Some(&s), &newer), "a new spec generation");
        // The engine set stable=false by merge patch; the observer sees it stable again.
        let mut engine = stored(0);
        engine.stable = Some(false);
        engine.unstable_reason = Some("OperationInProgress".into());
        let base = Observation { observed_generation: Some(1), ..newer };
        assert!(must_write(Some(&engine), &base));
    }

    #[test]
    fn an_unprobed_status_is_not_rewritten() {
        let conditions = vec![ready(0)];
        let s = MysqlFailoverGroupStatus {
            stable: Some(false),
            unstable_reason: Some("Degraded".into()),
            observed_generation: Some(1),
            conditions: conditions.clone(),
            ..MysqlFailoverGroupStatus::default()
        };
        let next = Observation {
            stable: false,
            unstable_reason: Some("Degraded"),
            observed_generation: Some(1),
            conditions: &conditions,
            health: &[],
        };
        assert!(!must_write(Some(&s), &next));
    }
}
