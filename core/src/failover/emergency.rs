//! Emergency failover and returning-primary judgement, pure (emergency
//! failover never reads deployment leases; docs/failover.md, "Emergency
//! failover").
//!
//! - [`alive`], [`endpoint_unconfirmed`]: what counts as a missed probe
//!   of the active site, and when misses are not counted at all.
//! - [`judge`]: after `failureThreshold` consecutive failed probes of the
//!   active site (the detection budget, `probeIntervalSeconds ×
//!   failureThreshold`), promote the standby only if it is reachable, no
//!   longer hears from the active site ([`Heard`]), and has applied
//!   everything it received (MariaDB `gtid_slave_pos` covers
//!   `Gtid_IO_Pos`) and holds no errant transaction; otherwise say why
//!   nothing is promoted. A lease is never an input.
//! - [`returning`]: a site that is not the active one and does not
//!   replicate from it, after a failover: clean (its transactions are all
//!   in the new primary's history) → repoint it; diverged → leave it
//!   fenced and say what a person must do.

use std::time::{Duration, Instant};

use bloodraven_api::names::PROMOTE_DESPITE_LOSS_ANNOTATION;
use bloodraven_api::v1alpha1::reason;

use super::abandoned::Abandoned;
use crate::assess::SiteProbe;
use crate::gtid::{MariaDbPosition, MySqlGtidSet};
use crate::observation::Flavor;

/// Whether this round shows the active site's server alive: it answered
/// the probe, or it answered with an error of its own (wrong password,
/// missing privilege, too many connections). Only a failure to reach it
/// (refused, timed out, reset) is a missed probe: a server that refuses
/// the operator's credentials is up and may be writable, and failing it
/// over would make two primaries (found by an attack: a wrong password in
/// the active site's Secret failed over a live primary within seconds).
/// A site whose Secret cannot be read is not judged either way: not a miss.
pub fn alive(probe: Option<&SiteProbe>) -> bool {
    match probe.map(|p| &p.outcome) {
        Some(Ok(_)) => true,
        Some(Err(f)) => f.reason != reason::SITE_UNREACHABLE,
        None => false,
    }
}

/// `RecoveryPending` instead of counting misses while the active site's
/// endpoint in spec (`now`) differs from the one it last answered at
/// (`answered`, `status.health[].answeredEndpoint`) and it has not
/// answered at the new one: a mistyped host or port is refused like a dead
/// server, and must not fail over the live primary at the old endpoint. A
/// status written before the field existed (no endpoint recorded) counts
/// misses as before.
pub fn endpoint_unconfirmed(
    active: &str,
    probe: Option<&SiteProbe>,
    now: &str,
    answered: Option<&str>,
) -> Option<(&'static str, String)> {
    if probe.is_some_and(|p| p.outcome.is_ok()) {
        return None;
    }
    let was = answered?;
    (was != now).then(|| {
        (
            reason::ACTIVE_SITE_ENDPOINT_CHANGED,
            format!(
                "the active site {active} last answered at {was} and its spec now says {now}, where it has not answered; automatic failover waits until it answers there (a mistyped host or port must not fail over a primary that is alive): fix the spec, or put it back to {was}"
            ),
        )
    })
}

/// What the standby's replication receiver got from the active site, as
/// the rounds saw it: the primary is dead only when the operator *and* its
/// replica lost it. A failed probe alone is one observer's view: a
/// partition between the operator and a live primary fails every probe
/// while applications and the replica still reach it, and promoting then
/// makes two writable sites (the nemesis suite found exactly that). The
/// replica's receiver is a second observer on another path: while it is
/// connected (`Slave_IO_Running: Yes`) and its heartbeat count or received
/// position moved within [`hearing_window`], the primary is alive.
///
/// A paused primary (SIGSTOP, a hung host) keeps the receiver's TCP
/// connection but sends nothing, so the counts stop; a dead one resets the
/// connection and the receiver shows `Connecting`. Either way the standby
/// stops hearing within one window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heard {
    /// The standby, its heartbeat count and received position at the last change.
    seen: (String, Option<u64>, Option<String>),
    /// When this process saw them change (or first saw them).
    at: Instant,
}

impl Heard {
    /// This round's reading of `standby`'s receiver at `now`. A first
    /// reading counts as heard now: this process does not know when the
    /// counts last moved, and waiting one window is the safe mistake. A
    /// heartbeat count this round could not read keeps the last one read: a
    /// reading that comes and goes is not the source speaking.
    #[must_use]
    pub fn next(
        previous: Option<&Heard>,
        standby: &str,
        heartbeats: Option<u64>,
        received: Option<&str>,
        now: Instant,
    ) -> Heard {
        let heartbeats = heartbeats.or_else(|| previous.filter(|p| p.seen.0 == standby).and_then(|p| p.seen.1));
        let seen = (standby.to_owned(), heartbeats, received.map(str::to_owned));
        match previous {
            Some(p) if p.seen == seen => Heard { seen, at: p.at },
            _ => Heard { seen, at: now },
        }
    }

    /// How long ago the receiver last heard, if within `window` of `now`.
    pub fn within(&self, now: Instant, window: Duration) -> Option<Duration> {
        let ago = now.saturating_duration_since(self.at);
        (ago < window).then_some(ago)
    }
}

/// How long after its counts last moved a connected receiver still counts
/// as hearing its source: two heartbeat periods (a source sends one each
/// period its binlog is idle; one may be in flight), or, with heartbeats off
/// or unknown, two probe intervals (then only transactions show the source
/// alive, and an idle primary is not told from a dead one).
pub fn hearing_window(heartbeat_period: Option<Duration>, probe_interval: Duration) -> Duration {
    match heartbeat_period {
        Some(p) if !p.is_zero() => p * 2,
        _ => probe_interval * 2,
    }
}

/// What an emergency check concludes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The active site answers, or has not yet missed enough probes.
    Wait {
        /// Consecutive failed probes so far.
        missed: u32,
    },
    /// Promote `site` now.
    Promote {
        /// The standby to promote.
        site: String,
    },
    /// The detection budget is spent but nothing may be promoted; why (for
    /// `RecoveryPending` and an Event).
    Blocked {
        /// Stable reason.
        reason: &'static str,
        /// What is wrong and what to fix.
        message: String,
    },
}

/// The standby as an emergency check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standby<'a> {
    /// Site name.
    pub site: &'a str,
    /// `Err(why)` when the probe failed.
    pub reachable: Result<(), &'a str>,
    /// Server flavour.
    pub flavor: Flavor,
    /// What it applied (`gtid_slave_pos` / `gtid_executed`).
    pub applied: &'a str,
    /// What it received (`Gtid_IO_Pos` / `Retrieved_Gtid_Set`); `None`
    /// when it shows no replication (nothing pending).
    pub received: Option<&'a str>,
    /// What promoting it abandons of what the primary was last seen with
    /// (`None`: nothing, or the primary was never seen by this process).
    pub abandoned: Option<&'a Abandoned>,
    /// `spec.failover.maxAbandonedTransactions`: how many an automatic
    /// promotion may abandon.
    pub max_abandoned: u64,
    /// Whether a person accepted the loss of promoting it at this
    /// generation (`promote-despite-loss`).
    pub loss_accepted: bool,
    /// Transactions it holds that the active site lacked when they were
    /// last compared (`status.health[].errantGtids`): such a site is never
    /// promoted, whatever a person accepted of a loss.
    pub errant: Option<&'a str>,
    /// Whether it was still replicating when the primary went away: the
    /// applier (SQL thread) runs and the receiver is running or retrying
    /// (`Connecting`). A standby whose replication was stopped (by a person,
    /// or an error) may lack any number of acknowledged writes.
    pub replicating: bool,
    /// Whether its receiver still hears from the active site: how long ago
    /// its counts last moved, and the window ([`Heard`]); `None` when it
    /// does not (not connected, or silent for a window).
    pub hears_primary: Option<(Duration, Duration)>,
}

/// Judges an emergency failover. `missed`: consecutive failed probes of
/// the active site (0 when it answered); `automatic`:
/// `spec.failover.automatic`; `held`: a planned failover is draining within
/// its own bound (`AutomaticFailoverHeld`, see
/// [`crate::failover::planned::holds_automatic_failover`]). No input is a
/// deploy lease, or derived from one.
pub fn judge(
    active: &str,
    missed: u32,
    threshold: u32,
    automatic: bool,
    held: bool,
    standby: Option<&Standby<'_>>,
) -> Verdict {
    if missed < threshold.max(1) {
        return Verdict::Wait { missed };
    }
    let budget = format!("the active site {active} failed {missed} probes in a row");
    if !automatic {
        return Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::AUTOMATIC_FAILOVER_DISABLED,
            message: format!("{budget}; spec.failover.automatic is false, so a person must fail over"),
        };
    }
    if held {
        return Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::OPERATION_IN_PROGRESS,
            message: format!(
                "{budget}; a planned failover is draining (it may have fenced {active}) and holds automatic failover until its decision or the end of its own bound (fenceTimeoutSeconds + catchUpTimeoutSeconds)"
            ),
        };
    }
    let Some(s) = standby else {
        return Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::STANDBY_NOT_PROMOTABLE,
            message: format!("{budget}; the group has no other site"),
        };
    };
    if let Err(why) = s.reachable {
        return Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::STANDBY_NOT_PROMOTABLE,
            message: format!("{budget}; the standby {} is unreachable too ({why}); nothing is promoted", s.site),
        };
    }
    if let Some((ago, window)) = s.hears_primary {
        return Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::PRIMARY_REACHABLE_FROM_STANDBY,
            message: format!(
                "{budget}, but the standby {}'s replication receiver is connected to it and heard from it {:.1} s ago (heartbeats or transactions), so {active} is alive and only the operator's path to it failed; nothing is promoted (two sites would be writable): check the network between the operator and {active}. A dead or paused primary goes silent to the standby too, and is failed over once it has been silent for {:.1} s",
                s.site,
                ago.as_secs_f64(),
                window.as_secs_f64()
            ),
        };
    }
    if let Some(gtids) = s.errant {
        return Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::ERRANT_TRANSACTIONS,
            message: format!(
                "{budget}; the standby {} holds transactions {active} lacked (errant GTIDs {gtids}), so it is not promoted (its history is not the primary's): see SiteDiverged; bring {active} back, or reconcile {} by hand and promote it yourself",
                s.site, s.site
            ),
        };
    }
    if !s.replicating {
        return Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::STANDBY_NOT_PROMOTABLE,
            message: format!(
                "{budget}; the standby {} was not replicating (its replication threads are stopped), so it may lack writes the primary acknowledged; nothing is promoted: start its replication if the primary comes back, or promote it by hand after checking what it lacks",
                s.site
            ),
        };
    }
    match applied_all(s.flavor, s.applied, s.received) {
        Ok(true) => match s.abandoned {
            Some(a) if a.transactions > s.max_abandoned && !s.loss_accepted => Verdict::Blocked {
                reason: bloodraven_api::v1alpha1::reason::STANDBY_BEHIND,
                message: format!(
                    "{budget}; promoting the standby {} would abandon {} transaction(s) {active} was last seen with ({}), more than spec.failover.maxAbandonedTransactions ({}); nothing is promoted: bring {active} back, or accept the loss by annotating the group {PROMOTE_DESPITE_LOSS_ANNOTATION}={}@<its topologyGeneration>",
                    s.site, a.transactions, a.gtids, s.max_abandoned, s.site
                ),
            },
            _ => Verdict::Promote { site: s.site.to_owned() },
        },
        Ok(false) => Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::STANDBY_NOT_PROMOTABLE,
            message: format!(
                "{budget}; the standby {} has not applied everything it received (applied {}, received {}); waiting for it",
                s.site,
                s.applied,
                s.received.unwrap_or("")
            ),
        },
        Err(why) => Verdict::Blocked {
            reason: bloodraven_api::v1alpha1::reason::STANDBY_NOT_PROMOTABLE,
            message: format!("{budget}; cannot read the standby {}'s positions: {why}", s.site),
        },
    }
}

/// Whether `applied` covers `received`.
pub fn applied_all(flavor: Flavor, applied: &str, received: Option<&str>) -> Result<bool, String> {
    let Some(received) = received else { return Ok(true) };
    match flavor {
        Flavor::MariaDb => {
            let a = MariaDbPosition::parse(applied).map_err(|e| e.to_string())?;
            let r = MariaDbPosition::parse(received).map_err(|e| e.to_string())?;
            Ok(a.covers(&r))
        }
        Flavor::MySql => {
            let a = MySqlGtidSet::parse(applied).map_err(|e| e.to_string())?;
            let r = MySqlGtidSet::parse(received).map_err(|e| e.to_string())?;
            Ok(a.covers(&r))
        }
    }
}

/// A returning former primary's transactions that the new primary's
/// history lacks (`None`: clean).
///
/// MariaDB (one last GTID per domain, `gtid_strict_mode`): the returning
/// site's last GTID of a domain is in the new history when its sequence
/// number is at most the one the new primary was promoted at
/// (`promotion`), or when it was written by the new primary itself
/// (`new_server_id`, received by replication; the positions are read at
/// different moments, so it may be past the new primary's snapshot). MySQL:
/// `returning − new_executed`, less the new primary's own UUID
/// (`new_uuid`) for the same reason.
pub fn returning(
    flavor: Flavor,
    returning_position: &str,
    promotion: &str,
    new_server_id: u32,
    new_uuid: &str,
    new_current: &str,
) -> Result<Option<String>, String> {
    match flavor {
        Flavor::MariaDb => {
            let have = MariaDbPosition::parse(returning_position).map_err(|e| e.to_string())?;
            let promoted = MariaDbPosition::parse(promotion).map_err(|e| e.to_string())?;
            // Read for its shape: the rule needs only who wrote what.
            MariaDbPosition::parse(new_current).map_err(|e| e.to_string())?;
            let errant: MariaDbPosition = MariaDbPosition(
                have.0
                    .iter()
                    .filter(|(d, (server, seq))| {
                        let shared = promoted.0.get(d).is_some_and(|(_, p)| seq <= p);
                        let replicated = *server == new_server_id;
                        !shared && !replicated
                    })
                    .map(|(d, v)| (*d, *v))
                    .collect(),
            );
            Ok((!errant.is_empty()).then(|| errant.to_string()))
        }
        Flavor::MySql => {
            let have = MySqlGtidSet::parse(returning_position).map_err(|e| e.to_string())?;
            let new = MySqlGtidSet::parse(new_current).map_err(|e| e.to_string())?;
            let mut extra = have.minus(&new);
            extra.0.retain(|uuid, _| !uuid.eq_ignore_ascii_case(new_uuid));
            Ok((!extra.is_empty()).then(|| extra.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    fn failed(reason: &'static str) -> SiteProbe {
        SiteProbe {
            site: "iad".into(),
            outcome: Err(crate::assess::ProbeFailure { reason, message: "m".into(), answered_as: None }),
        }
    }

    #[test]
    fn only_an_unreachable_server_is_a_missed_probe() {
        assert!(!alive(Some(&failed(reason::SITE_UNREACHABLE))));
        assert!(!alive(None));
        for up in [
            reason::AUTHENTICATION_FAILED,
            reason::INSUFFICIENT_PRIVILEGES,
            reason::PROBE_FAILED,
            reason::UNSUPPORTED_SERVER_VERSION,
        ] {
            assert!(alive(Some(&failed(up))), "{up}");
        }
        // No Secret: the server is not judged, so not counted as missed either.
        assert!(alive(Some(&failed(reason::CREDENTIALS_UNAVAILABLE))));
    }

    #[test]
    fn a_changed_endpoint_waits_until_it_answers_there() {
        let down = failed(reason::SITE_UNREACHABLE);
        let blocked = endpoint_unconfirmed("iad", Some(&down), "10.0.0.1:3316", Some("10.0.0.1:3306")).unwrap();
        assert_eq!(blocked.0, reason::ACTIVE_SITE_ENDPOINT_CHANGED);
        assert!(blocked.1.contains("10.0.0.1:3306") && blocked.1.contains("10.0.0.1:3316"), "{}", blocked.1);
        // Same endpoint, or nothing recorded (a status from before): misses count.
        assert!(endpoint_unconfirmed("iad", Some(&down), "10.0.0.1:3306", Some("10.0.0.1:3306")).is_none());
        assert!(endpoint_unconfirmed("iad", Some(&down), "10.0.0.1:3316", None).is_none());
        // It answered at the new endpoint: nothing to wait for.
        let observed = crate::observation::SiteObservation {
            flavor: Flavor::MariaDb,
            version: "11.8.3-MariaDB".into(),
            server_id: 1,
            server_uuid: String::new(),
            writable: true,
            gtid_position: String::new(),
            gtid_binlog_state: String::new(),
            gtid_slave_pos: String::new(),
            replication: None,
            semi_sync: None,
        };
        let up = SiteProbe { site: "iad".into(), outcome: Ok(observed) };
        assert!(endpoint_unconfirmed("iad", Some(&up), "10.0.0.1:3316", Some("10.0.0.1:3306")).is_none());
    }

    use proptest::prelude::*;

    use super::*;
    use crate::failover::planned::{Phase, holds_automatic_failover};

    proptest! {
        /// A planned request before its fence, whatever its phase and
        /// whatever the deploy leases (not an input of either rule), never
        /// delays an emergency failover: a primary that misses
        /// `failureThreshold` probes with a reachable, caught-up, replicating
        /// standby is failed over at the threshold, not a probe later.
        #[test]
        fn a_planned_request_before_its_fence_never_delays_an_emergency_failover(
            phase in prop_oneof![Just(Phase::Pending), Just(Phase::Admitting), Just(Phase::Deferred)],
            past_deadline in any::<bool>(),
            threshold in 1u32..20,
            beyond in 0u32..5,
            seq in 1u64..1_000_000,
        ) {
            let held = holds_automatic_failover(phase, past_deadline);
            let at = format!("0-1-{seq}");
            let s = standby(&at, Some(&at));
            prop_assert_eq!(judge("iad", threshold - 1, threshold, true, held, Some(&s)), Verdict::Wait { missed: threshold - 1 });
            prop_assert_eq!(judge("iad", threshold + beyond, threshold, true, held, Some(&s)), Verdict::Promote { site: "pdx".into() });
        }

        /// A drain holds automatic failover only within its own bound.
        #[test]
        fn a_drain_holds_only_within_its_bound(past_deadline in any::<bool>(), missed in 3u32..50) {
            let s = standby("0-1-5", Some("0-1-5"));
            let verdict = judge("iad", missed, 3, true, holds_automatic_failover(Phase::Draining, past_deadline), Some(&s));
            if past_deadline {
                prop_assert_eq!(verdict, Verdict::Promote { site: "pdx".into() });
            } else {
                let blocked = matches!(verdict, Verdict::Blocked { reason: "OperationInProgress", .. });
                prop_assert!(blocked, "{:?}", verdict);
            }
        }
    }

    fn standby<'a>(applied: &'a str, received: Option<&'a str>) -> Standby<'a> {
        Standby {
            site: "pdx",
            reachable: Ok(()),
            flavor: Flavor::MariaDb,
            applied,
            received,
            abandoned: None,
            max_abandoned: 0,
            loss_accepted: false,
            errant: None,
            replicating: true,
            hears_primary: None,
        }
    }

    /// Found by the nemesis suite: an operator partitioned from a live
    /// primary promoted the standby, and both sites were writable until the
    /// partition healed. A standby that still hears the primary blocks.
    #[test]
    fn a_standby_that_still_hears_the_primary_is_not_promoted() {
        let heard = (Duration::from_millis(400), Duration::from_secs(2));
        let s = Standby { hears_primary: Some(heard), ..standby("0-1-5", Some("0-1-5")) };
        let Verdict::Blocked { reason, message } = judge("iad", 3, 3, true, false, Some(&s)) else { panic!() };
        assert_eq!(reason, "PrimaryReachableFromStandby");
        assert!(message.contains("0.4 s ago") && message.contains("silent for 2.0 s"), "{message}");
        // Before the budget is spent nothing is said; once the standby is
        // silent it is promoted.
        assert_eq!(judge("iad", 2, 3, true, false, Some(&s)), Verdict::Wait { missed: 2 });
        let silent = Standby { hears_primary: None, ..s };
        assert_eq!(judge("iad", 3, 3, true, false, Some(&silent)), Verdict::Promote { site: "pdx".into() });
    }

    #[test]
    fn the_standby_hears_while_its_counts_move_and_for_a_window_after() {
        let t0 = Instant::now();
        let window = hearing_window(Some(Duration::from_secs(1)), Duration::from_secs(5));
        assert_eq!(window, Duration::from_secs(2));
        // First reading: heard now (this process cannot know better).
        let h = Heard::next(None, "pdx", Some(10), Some("0-1-5"), t0);
        assert_eq!(h.within(t0, window), Some(Duration::ZERO));
        // Counts unchanged for longer than the window: silent.
        let t = t0 + Duration::from_secs(3);
        let same = Heard::next(Some(&h), "pdx", Some(10), Some("0-1-5"), t);
        assert_eq!(same.within(t, window), None);
        // A heartbeat, a transaction, or another standby (its counts are
        // not comparable) each count as heard now.
        for (site, beats, received) in
            [("pdx", Some(11), "0-1-5"), ("pdx", Some(10), "0-1-6"), ("sfo", Some(10), "0-1-5")]
        {
            let moved = Heard::next(Some(&same), site, beats, Some(received), t);
            assert_eq!(moved.within(t, window), Some(Duration::ZERO), "{site} {beats:?} {received}");
            assert!(moved.within(t + window, window).is_none());
        }
        // A count that could not be read this round is no change.
        let unread = Heard::next(Some(&same), "pdx", None, Some("0-1-5"), t);
        assert_eq!(unread.within(t, window), None);
        // Heartbeats off or unknown: two probe intervals, transactions only.
        assert_eq!(hearing_window(Some(Duration::ZERO), Duration::from_secs(5)), Duration::from_secs(10));
        assert_eq!(hearing_window(None, Duration::from_secs(5)), Duration::from_secs(10));
    }

    /// A standby found holding a write of its own is never promoted, not
    /// even with a loss accepted.
    #[test]
    fn a_standby_with_errant_transactions_is_never_promoted() {
        let s = Standby { errant: Some("0-2-57..59"), loss_accepted: true, ..standby("0-1-56", Some("0-1-56")) };
        let Verdict::Blocked { reason, message } = judge("iad", 3, 3, true, false, Some(&s)) else { panic!() };
        assert_eq!(reason, "ErrantTransactions");
        assert!(message.contains("0-2-57..59") && message.contains("pdx"), "{message}");
    }

    #[test]
    fn waits_for_the_detection_budget() {
        let s = standby("0-1-5", Some("0-1-5"));
        assert_eq!(judge("iad", 0, 3, true, false, Some(&s)), Verdict::Wait { missed: 0 });
        assert_eq!(judge("iad", 2, 3, true, false, Some(&s)), Verdict::Wait { missed: 2 });
        assert_eq!(judge("iad", 3, 3, true, false, Some(&s)), Verdict::Promote { site: "pdx".into() });
    }

    #[test]
    fn never_promotes_a_standby_that_has_not_applied_what_it_received() {
        let s = standby("0-1-5", Some("0-1-7"));
        assert!(matches!(judge("iad", 3, 3, true, false, Some(&s)), Verdict::Blocked { .. }));
        let unreachable = Standby { reachable: Err("refused"), ..standby("0-1-7", Some("0-1-7")) };
        assert!(matches!(judge("iad", 9, 3, true, false, Some(&unreachable)), Verdict::Blocked { .. }));
        // Replication stopped by hand before the primary died: it may lack
        // any number of acknowledged writes (found by the third attack).
        let stopped = Standby { replicating: false, ..standby("0-1-1", Some("0-1-1")) };
        let Verdict::Blocked { message, .. } = judge("iad", 3, 3, true, false, Some(&stopped)) else { panic!() };
        assert!(message.contains("not replicating"), "{message}");
    }

    /// Found on the playground: a standby whose replication was blocked
    /// (both threads still running) was promoted 200 transactions behind,
    /// without a word.
    #[test]
    fn a_standby_known_to_be_behind_waits_unless_a_person_accepts_the_loss() {
        let behind = Abandoned { gtids: "0-1-1358..1557".into(), transactions: 200 };
        let s = Standby { abandoned: Some(&behind), ..standby("0-2-1357", Some("0-2-1357")) };
        let Verdict::Blocked { reason, message } = judge("iad", 3, 3, true, false, Some(&s)) else { panic!() };
        assert_eq!(reason, "StandbyBehind");
        assert!(message.contains("200 transaction(s)") && message.contains("0-1-1358..1557"), "{message}");
        assert!(message.contains("promote-despite-loss=pdx@"), "{message}");
        let accepted = Standby { loss_accepted: true, ..s.clone() };
        assert_eq!(judge("iad", 3, 3, true, false, Some(&accepted)), Verdict::Promote { site: "pdx".into() });
        let within = Standby { max_abandoned: 200, ..s.clone() };
        assert_eq!(judge("iad", 3, 3, true, false, Some(&within)), Verdict::Promote { site: "pdx".into() });
        // The detection budget comes first: nothing is said before it.
        assert_eq!(judge("iad", 2, 3, true, false, Some(&s)), Verdict::Wait { missed: 2 });
    }

    #[test]
    fn manual_groups_and_running_planned_failovers_block() {
        let s = standby("0-1-5", None);
        let Verdict::Blocked { reason, .. } = judge("iad", 3, 3, false, false, Some(&s)) else { panic!() };
        assert_eq!(reason, "AutomaticFailoverDisabled");
        let Verdict::Blocked { reason, message } = judge("iad", 3, 3, true, true, Some(&s)) else { panic!() };
        assert_eq!(reason, "OperationInProgress");
        assert!(message.contains("draining"), "{message}");
    }

    #[test]
    fn returning_primary_errant_transactions() {
        const NEW: &str = "87f16bcf-efcf-11f1-85e2-02fc00000001";
        // iad (1) wrote up to 100; pdx (2) was promoted at 95 and wrote on.
        assert_eq!(returning(Flavor::MariaDb, "0-1-100", "0-1-95", 2, "", "0-2-150"), Ok(Some("0-1-100".into())));
        // iad had nothing past 95: clean.
        assert_eq!(returning(Flavor::MariaDb, "0-1-95", "0-1-95", 2, "", "0-2-150"), Ok(None));
        // iad since replicated pdx's own writes: clean (even read a moment
        // after pdx's snapshot, ahead of it).
        assert_eq!(returning(Flavor::MariaDb, "0-2-120", "0-1-95", 2, "", "0-2-150"), Ok(None));
        assert_eq!(returning(Flavor::MariaDb, "0-2-160", "0-1-95", 2, "", "0-2-150"), Ok(None));
        // A domain the promotion never had, written by iad itself: errant.
        assert_eq!(returning(Flavor::MariaDb, "0-1-95,7-1-3", "0-1-95", 2, "", "0-2-150"), Ok(Some("7-1-3".into())));
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        assert_eq!(returning(Flavor::MySql, &format!("{u}:1-5"), "", 2, NEW, &format!("{u}:1-9")), Ok(None));
        assert!(returning(Flavor::MySql, &format!("{u}:1-10"), "", 2, NEW, &format!("{u}:1-9")).unwrap().is_some());
        // The new primary's own transactions, past its snapshot: not errant.
        let mine = format!("{u}:1-9,{NEW}:1-4");
        assert_eq!(returning(Flavor::MySql, &mine, "", 2, NEW, &format!("{u}:1-9,{NEW}:1-3")), Ok(None));
    }
}
