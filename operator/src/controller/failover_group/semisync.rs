//! Semi-synchronous replication as `spec.failover.semiSync` asks
//! (`AFTER_SYNC`; MariaDB's built in, MySQL's two plugins): on every
//! probe, the decided active site has its primary switch on
//! (`rpl_semi_sync_master_enabled`, MySQL `rpl_semi_sync_source_enabled`)
//! and every other site its replica switch (or all off when the group does
//! not ask). A switch that differs is set, and a replica's IO thread is
//! restarted so the new setting takes effect at once.
//!
//! A MySQL site without the plugins loaded cannot do it: the operator does
//! not load them (that is the server's configuration), and says so with
//! the `SemiSyncUnavailable` condition, so nobody believes acknowledged
//! writes survive a failover when they may not.
//!
//! What it buys: with a replica connected and acknowledging, a commit is
//! acknowledged to the client only after the replica has it, so an
//! emergency failover loses no acknowledged write.
//!
//! The fallback to asynchronous replication is the operator's, not the
//! server's. The operator sets the primary's own timeout to its maximum
//! ([`statements::SEMI_SYNC_TIMEOUT_MS`]): a server falls back on its own
//! wherever it runs, and a primary paused or cut off past the detection
//! budget, failed away from, then running again would fall back at once
//! and acknowledge commits its standby (the new primary) never receives.
//! Instead, on the decided primary only, when a commit has waited
//! `semiSyncFallbackSeconds` for its acknowledgement, the operator
//! switches its primary side off: those commits and the next are
//! acknowledged without a replica, and the group says so
//! (`SemiSyncUnavailable`, reason `StandbyNotAcknowledging`) until the
//! standby's receiver is connected to it again, when the side is switched
//! on again. A deposed primary's commits keep waiting until its fence ends
//! their sessions (`mysql::actions::fence`). What the fallback costs is
//! the asynchronous loss window while it lasts (docs/failover.md,
//! "Durability").
//!
//! [`statements::SEMI_SYNC_TIMEOUT_MS`]: crate::mysql::statements::SEMI_SYNC_TIMEOUT_MS

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::{Resource, ResourceExt};

use bloodraven_api::v1alpha1::{ConditionType, reason};

use super::assess::SiteProbe;
use super::sites;
use crate::controller::Context;
use crate::controller::conditions::Computed;
use crate::mysql::{ProbeTarget, SemiSync, actions, statements};

/// Whether the decided primary's side of semi-sync should be on, given
/// its switches (`have`), whether the standby acknowledges it (its
/// receiver connected to the primary, its replica side on), and how long
/// its oldest commit has waited for an acknowledgement (`waited`).
///
/// On, it is switched off (the fallback) once a commit has waited
/// `fallback`, as the server's own timeout would, but on the decided
/// primary only. Off, it is switched on when
/// the standby acknowledges, or when the site was a standby until now (its
/// replica side still on: just promoted), so a new primary's commits wait
/// for the old one's rejoin as long as `fallback`. The fallback switches
/// both sides off, so a primary that fell back stays off until its standby
/// acknowledges.
fn primary_on(have: &SemiSync, standby_acknowledges: bool, waited: Duration, fallback: Duration) -> bool {
    if !have.primary {
        return standby_acknowledges || have.replica;
    }
    waited < fallback
}

/// Whether commits may wait on a primary: the only state in which the
/// process list is read for the fallback (unreadable status counts as
/// may).
fn waiting(have: &SemiSync) -> bool {
    have.primary && have.waiting.is_none_or(|n| n > 0)
}

/// Whether a standby acknowledges the active site: its receiver connected
/// to it, its replica side of semi-sync on, and caught up with what the
/// primary had a round before (`primary_before`; none known: not yet), so
/// that switching the primary's side on does not stall every commit while
/// a backlog arrives (the servers wait from the moment it is on).
fn acknowledges(group: &MysqlFailoverGroup, active: &str, probe: &SiteProbe, primary_before: Option<&str>) -> bool {
    let Ok(obs) = &probe.outcome else { return false };
    let Some(r) = obs.replication.as_ref() else { return false };
    probe.site != active
        && obs.semi_sync.is_some_and(|s| s.replica)
        && crate::failover::emergency::follows_active(group, active, r)
        && primary_before
            .is_some_and(|before| caught_up(obs.flavor, before, &obs.gtid_position, r.received_position.as_deref()))
}

/// Whether a replica that has `executed` and has received `received` has
/// every transaction of the primary's position `primary`.
fn caught_up(flavor: crate::mysql::Flavor, primary: &str, executed: &str, received: Option<&str>) -> bool {
    use bloodraven_core::failover::abandoned::abandoned;
    match abandoned(flavor, primary, executed) {
        Ok(None) => true,
        Ok(Some(missing)) => {
            let Some(received) = received else { return false };
            match flavor {
                // A position per domain: the received one is the furthest.
                crate::mysql::Flavor::MariaDb => matches!(abandoned(flavor, primary, received), Ok(None)),
                // A set: what it has not executed must all be received.
                crate::mysql::Flavor::MySql => matches!(abandoned(flavor, &missing.gtids, received), Ok(None)),
            }
        }
        Err(_) => false,
    }
}

/// What the semi-sync maintenance remembers of each group between rounds
/// (in this process only: a new leader starts afresh, which delays a
/// fallback or a switch back by a round).
#[derive(Clone, Debug, Default)]
pub(crate) struct Memory(Arc<Mutex<HashMap<String, Seen>>>);

#[derive(Debug, Default)]
struct Seen {
    /// The active site and its GTID position at the previous round.
    primary: Option<(String, String)>,
    /// Commits seen waiting for an acknowledgement on the active site:
    /// session id → (first seen waiting, its statement's age then, seconds).
    waiting: HashMap<u64, (Instant, u64)>,
}

impl Memory {
    /// Forgets a group (deletion).
    pub(crate) fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
    }

    fn with<T>(&self, uid: &str, f: impl FnOnce(&mut Seen) -> T) -> T {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(map.entry(uid.to_owned()).or_default())
    }
}

/// How long the longest of the commits seen waiting has waited, as far as
/// the operator can tell: from when it first saw it waiting. A process
/// list's `Time` is its statement's age, not its wait's (a long statement
/// waits only at its end), so it only tells the same statement from the
/// next one in the same session: still waiting, its age grew with the
/// clock. `read`: this round's waiters, (id, seconds).
fn waited(seen: &mut HashMap<u64, (Instant, u64)>, now: Instant, read: &[(u64, u64)]) -> Duration {
    let before = std::mem::take(seen);
    for &(id, age) in read {
        let kept = before.get(&id).copied().filter(|&(first, age_then)| {
            let elapsed = now.saturating_duration_since(first).as_secs();
            // Whole seconds each: a second of slack.
            age + 1 >= age_then + elapsed
        });
        seen.insert(id, kept.unwrap_or((now, age)));
    }
    seen.values().map(|&(first, _)| now.saturating_duration_since(first)).max().unwrap_or_default()
}

/// Sets the switches that differ from what the group asks; returns whether
/// it changed any (the caller probes again before reporting).
pub(super) async fn maintain(ctx: &Context, group: &MysqlFailoverGroup, active: &str, probes: &[SiteProbe]) -> bool {
    let policy = &group.spec.failover;
    let asked = policy.semi_sync;
    let uid = group.meta().uid.clone().unwrap_or_default();
    let fallback = Duration::from_secs(u64::from(policy.semi_sync_fallback_seconds.clamp(1, 3600)));
    let timeout_ms = statements::semi_sync_timeout_ms(policy.semi_sync_server_timeout_seconds);
    let memory = &ctx.groups.semi_sync;
    let before = memory.with(&uid, |m| m.primary.clone().filter(|(site, _)| site == active).map(|(_, p)| p));
    let standby_acknowledges = probes.iter().any(|p| acknowledges(group, active, p, before.as_deref()));
    if let Some(Ok(obs)) = probes.iter().find(|p| p.site == active).map(|p| &p.outcome) {
        memory.with(&uid, |m| m.primary = Some((active.to_owned(), obs.gtid_position.clone())));
    }
    let timeout = Duration::from_secs(u64::from(policy.probe_timeout_seconds.clamp(1, 60)) * 2);
    let mut changed = false;
    for probe in probes {
        let Ok(obs) = &probe.outcome else { continue };
        let Some(have) = obs.semi_sync else { continue };
        if !ctx.leadership.is_leader() {
            continue;
        }
        let primary = probe.site == active;
        // A writable site that is not the active one, with its primary
        // side on, is reassertion's to fence first: switching that side off
        // would release the commits waiting there for an acknowledgement,
        // as acknowledged, on a site that is no longer the primary. Its
        // replica side is set meanwhile.
        if !primary && obs.writable && have.primary {
            continue;
        }
        let Some(site) = group.site(&probe.site) else { continue };
        let at = ProbeTarget { host: site.host.clone(), port: site.port };
        let (on, fell_back) = if primary && asked {
            let mut read = Vec::new();
            if waiting(&have) {
                let Ok(creds) = sites::read_credentials(site, ctx).await else { continue };
                match actions::semi_sync_waiters(&at, &creds, obs.flavor, timeout).await {
                    Ok(w) => read = w,
                    Err(err) => {
                        let (_, message) = crate::mysql::classify(&err);
                        tracing::warn!(group = %group.name_any(), site = %probe.site, error = %message, "failed to read the commits waiting for a semi-sync acknowledgement");
                    }
                }
            }
            let waited = memory.with(&uid, |m| waited(&mut m.waiting, Instant::now(), &read));
            let on = primary_on(&have, standby_acknowledges, waited, fallback);
            (on, have.primary && !on)
        } else {
            // A standby acknowledges when asked; a primary of a group that
            // does not ask has both sides off.
            (asked && !primary, false)
        };
        // The operator's waits on a primary, whatever the server's
        // configuration (or a restart) set.
        let waits_set = !(primary && on) || (have.timeout_ms == timeout_ms && have.wait_no_replica);
        let same = if primary { have.primary == on && !have.replica } else { have.replica == on && !have.primary };
        if same && waits_set {
            continue;
        }
        let Ok(creds) = sites::read_credentials(site, ctx).await else { continue };
        let restart_io = !primary && obs.replication.is_some();
        let role = actions::SemiSyncRole { on, primary, restart_io, timeout_ms };
        match actions::semi_sync(&at, &creds, obs.flavor, role, timeout).await {
            Ok(()) => {
                changed = true;
                if fell_back {
                    memory.with(&uid, |m| m.waiting.clear());
                    tracing::warn!(group = %group.name_any(), site = %probe.site, fallback_seconds = fallback.as_secs(), "a commit waited for a semi-sync acknowledgement past semiSyncFallbackSeconds: fell back to asynchronous replication on the primary");
                } else {
                    tracing::info!(group = %group.name_any(), site = %probe.site, primary, on, "semi-synchronous replication set");
                }
            }
            Err(err) => {
                let (_, message) = crate::mysql::classify(&err);
                tracing::warn!(group = %group.name_any(), site = %probe.site, error = %message, "failed to set semi-synchronous replication");
            }
        }
    }
    changed
}

/// The `SemiSyncUnavailable` condition: true when the group asks for
/// semi-sync and a reachable site cannot do it.
pub(super) fn condition(asked: bool, active: Option<&str>, fallback_seconds: u32, probes: &[SiteProbe]) -> Computed {
    let t = ConditionType::SemiSyncUnavailable.as_str();
    if !asked {
        return Computed::flag(t, false, reason::SEMI_SYNC_NOT_REQUESTED, "spec.failover.semiSync is false");
    }
    let missing: Vec<String> = probes
        .iter()
        .filter_map(|p| p.outcome.as_ref().ok().filter(|o| o.semi_sync.is_none()).map(|o| (p, o)))
        .map(|(p, o)| format!("{} ({})", p.site, bloodraven_serving::log::escape(&o.version, 60)))
        .collect();
    let primary = probes.iter().find(|p| Some(p.site.as_str()) == active);
    if missing.is_empty()
        && let Some(Ok(obs)) = primary.map(|p| &p.outcome)
        && obs.writable
        && obs.semi_sync.is_some_and(|s| !s.primary)
    {
        let others: Vec<&str> =
            probes.iter().filter(|p| Some(p.site.as_str()) != active).map(|p| p.site.as_str()).collect();
        return Computed::flag(
            t,
            true,
            reason::STANDBY_NOT_ACKNOWLEDGING,
            format!(
                "semi-synchronous replication is off on the primary {}: a commit waited {fallback_seconds}s for an acknowledgement (semiSyncFallbackSeconds) and the operator fell back to asynchronous replication, or no standby has acknowledged since semi-sync was asked for or the primary restarted (or the operator could not switch it on: its log says why); it is switched on again once the standby {} replicates from the primary, with its replica side on, and has caught up. Until then an emergency failover can lose acknowledged writes",
                active.unwrap_or_default(),
                others.join(", ")
            ),
        );
    }
    if missing.is_empty() {
        return Computed::flag(
            t,
            false,
            reason::SEMI_SYNC_AVAILABLE,
            "every reachable site can do semi-synchronous replication; the operator keeps the switches on their roles",
        );
    }
    Computed::flag(
        t,
        true,
        reason::SEMI_SYNC_PLUGINS_MISSING,
        format!(
            "spec.failover.semiSync asks for semi-synchronous replication, but site(s) {} have not loaded the semi-sync plugins rpl_semi_sync_source and rpl_semi_sync_replica: until they do, commits are not waited for and an emergency failover can lose acknowledged writes; load both on every site (plugin-load-add=semisync_source.so;semisync_replica.so in the server's configuration, then restart it)",
            missing.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(site: &str, semi_sync: Option<SemiSync>, version: &str) -> SiteProbe {
        let obs = crate::mysql::SiteObservation {
            flavor: crate::mysql::Flavor::from_version(version),
            version: version.into(),
            server_id: 1,
            server_uuid: String::new(),
            writable: true,
            gtid_position: String::new(),
            gtid_binlog_state: String::new(),
            gtid_slave_pos: String::new(),
            replication: None,
            semi_sync,
        };
        SiteProbe { site: site.into(), outcome: Ok(obs) }
    }

    #[test]
    fn a_site_that_cannot_do_semi_sync_is_said_when_it_is_asked_for() {
        let able = probe("iad", Some(SemiSync::default()), "10.11.19-MariaDB");
        let unable = probe("pdx", None, "9.7.4");
        let c = condition(true, Some("iad"), 10, &[able.clone(), unable.clone()]);
        assert_eq!((c.status, c.reason), ("True", reason::SEMI_SYNC_PLUGINS_MISSING));
        assert!(c.message.contains("pdx (9.7.4)") && !c.message.contains("iad"), "{}", c.message);
        let c = condition(true, None, 10, std::slice::from_ref(&able));
        assert_eq!((c.status, c.reason), ("False", reason::SEMI_SYNC_AVAILABLE));
        let c = condition(false, Some("iad"), 10, &[able, unable]);
        assert_eq!((c.status, c.reason), ("False", reason::SEMI_SYNC_NOT_REQUESTED));
    }

    #[test]
    fn a_site_that_cannot_do_semi_sync_is_said_when_it_is_asked_for_and_a_fallback_is_said() {
        let on = SemiSync { primary: true, ..SemiSync::default() };
        let iad = probe("iad", Some(on), "10.11.19-MariaDB");
        let fell_back = probe("iad", Some(SemiSync::default()), "10.11.19-MariaDB");
        let pdx = probe("pdx", Some(SemiSync { replica: true, ..SemiSync::default() }), "10.11.19-MariaDB");
        let c = condition(true, Some("iad"), 10, &[iad.clone(), pdx.clone()]);
        assert_eq!((c.status, c.reason), ("False", reason::SEMI_SYNC_AVAILABLE));
        let c = condition(true, Some("iad"), 10, &[fell_back.clone(), pdx.clone()]);
        assert_eq!((c.status, c.reason), ("True", reason::STANDBY_NOT_ACKNOWLEDGING));
        assert!(
            c.message.contains("primary iad") && c.message.contains("10s") && c.message.contains("standby pdx"),
            "{}",
            c.message
        );
        // Not asked: both sides off is no fallback.
        let c = condition(false, Some("iad"), 10, &[fell_back, pdx]);
        assert_eq!((c.status, c.reason), ("False", reason::SEMI_SYNC_NOT_REQUESTED));
    }

    #[test]
    fn the_primary_falls_back_only_after_a_commit_waited_the_fallback_and_comes_back_with_its_standby() {
        let fallback = Duration::from_secs(10);
        let on = SemiSync { primary: true, ..SemiSync::default() };
        let off = SemiSync::default();
        let promoted = SemiSync { replica: true, ..SemiSync::default() };
        // On: waits until a commit has waited the fallback.
        assert!(primary_on(&on, false, Duration::ZERO, fallback));
        assert!(primary_on(&on, false, Duration::from_secs(9), fallback));
        assert!(!primary_on(&on, false, Duration::from_secs(10), fallback));
        // Off after a fallback: on again only with the standby acknowledging.
        assert!(!primary_on(&off, false, Duration::ZERO, fallback));
        assert!(primary_on(&off, true, Duration::ZERO, fallback));
        // Just promoted (its replica side still on): on, so its commits wait
        // for the old primary's rejoin.
        assert!(primary_on(&promoted, false, Duration::ZERO, fallback));
    }

    #[test]
    fn a_wait_is_timed_from_when_it_was_first_seen_and_a_new_statement_starts_afresh() {
        let t0 = Instant::now();
        let mut seen = HashMap::new();
        // A long statement (its age 30 s) seen waiting: its wait is new.
        assert_eq!(waited(&mut seen, t0, &[(7, 30)]), Duration::ZERO);
        // Still the same statement 4 s later (aged 34 s): waited 4 s.
        assert_eq!(waited(&mut seen, t0 + Duration::from_secs(4), &[(7, 34)]), Duration::from_secs(4));
        // Session 7 runs another statement (aged 1 s): afresh.
        assert_eq!(waited(&mut seen, t0 + Duration::from_secs(8), &[(7, 1)]), Duration::ZERO);
        // Gone from the list: forgotten.
        assert_eq!(waited(&mut seen, t0 + Duration::from_secs(9), &[]), Duration::ZERO);
        assert!(seen.is_empty());
    }

    #[test]
    fn a_standby_is_caught_up_when_it_has_or_received_everything_the_primary_had() {
        use crate::mysql::Flavor::{MariaDb, MySql};
        assert!(caught_up(MariaDb, "0-1-100", "0-1-100", None));
        assert!(caught_up(MariaDb, "0-1-100", "0-1-40", Some("0-1-100")));
        assert!(!caught_up(MariaDb, "0-1-100", "0-1-40", Some("0-1-99")));
        assert!(!caught_up(MariaDb, "0-1-100", "0-1-40", None));
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        assert!(caught_up(MySql, &format!("{u}:1-100"), &format!("{u}:1-60"), Some(&format!("{u}:61-100"))));
        assert!(!caught_up(MySql, &format!("{u}:1-100"), &format!("{u}:1-60"), Some(&format!("{u}:61-99"))));
        assert!(!caught_up(MySql, "not a set", "", None));
    }

    #[test]
    fn the_process_list_is_read_only_while_commits_may_wait_on_the_primary() {
        let primary = |waiting| SemiSync { primary: true, waiting, ..SemiSync::default() };
        assert!(waiting(&primary(Some(3))));
        assert!(!waiting(&primary(Some(0))));
        assert!(waiting(&primary(None)), "unreadable status: the process list decides");
        assert!(!waiting(&SemiSync { waiting: Some(3), ..SemiSync::default() }), "not a primary");
    }
}
