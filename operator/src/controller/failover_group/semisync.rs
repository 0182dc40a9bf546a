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

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::ResourceExt;

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
pub(super) fn primary_on(
    have: &SemiSync,
    standby_acknowledges: bool,
    waited: Option<Duration>,
    fallback: Duration,
) -> bool {
    if !have.primary {
        return standby_acknowledges || have.replica;
    }
    waited.is_none_or(|w| w < fallback)
}

/// Whether commits may wait on a primary: the only state in which the
/// process list is read for the fallback (unreadable status counts as
/// may).
fn waiting(have: &SemiSync) -> bool {
    have.primary && have.waiting.is_none_or(|n| n > 0)
}

/// Whether a standby's receiver is connected to the active site with its
/// replica side of semi-sync on.
fn acknowledges(group: &MysqlFailoverGroup, active: &str, probe: &SiteProbe) -> bool {
    let Ok(obs) = &probe.outcome else { return false };
    probe.site != active
        && obs.semi_sync.is_some_and(|s| s.replica)
        && obs.replication.as_ref().is_some_and(|r| crate::failover::emergency::follows_active(group, active, r))
}

/// Sets the switches that differ from what the group asks; returns whether
/// it changed any (the caller probes again before reporting).
pub(super) async fn maintain(ctx: &Context, group: &MysqlFailoverGroup, active: &str, probes: &[SiteProbe]) -> bool {
    let asked = group.spec.failover.semi_sync;
    let fallback = Duration::from_secs(u64::from(group.spec.failover.semi_sync_fallback_seconds.clamp(1, 3600)));
    let standby_acknowledges = probes.iter().any(|p| acknowledges(group, active, p));
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)) * 2);
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
            {
                let mut waited = None;
                if waiting(&have) {
                    let Ok(creds) = sites::read_credentials(site, ctx).await else { continue };
                    waited = match actions::oldest_semi_sync_wait(&at, &creds, obs.flavor, timeout).await {
                        Ok(w) => w,
                        Err(err) => {
                            let (_, message) = crate::mysql::classify(&err);
                            tracing::warn!(group = %group.name_any(), site = %probe.site, error = %message, "failed to read the commits waiting for a semi-sync acknowledgement");
                            None
                        }
                    };
                }
                let on = primary_on(&have, standby_acknowledges, waited, fallback);
                (on, have.primary && !on)
            }
        } else {
            // A standby acknowledges when asked; a primary of a group that
            // does not ask has both sides off.
            (asked && !primary, false)
        };
        // The operator's waits on a primary, whatever the server's
        // configuration (or a restart) set.
        let waits_set =
            !(primary && on) || (have.timeout_ms == statements::SEMI_SYNC_TIMEOUT_MS && have.wait_no_replica);
        let same = if primary { have.primary == on && !have.replica } else { have.replica == on && !have.primary };
        if same && waits_set {
            continue;
        }
        let Ok(creds) = sites::read_credentials(site, ctx).await else { continue };
        let restart_io = !primary && obs.replication.is_some();
        match actions::semi_sync(&at, &creds, obs.flavor, on, primary, restart_io, timeout).await {
            Ok(()) => {
                changed = true;
                if fell_back {
                    tracing::warn!(group = %group.name_any(), site = %probe.site, fallback_seconds = fallback.as_secs(), "a commit waited for a semi-sync acknowledgement with no standby acknowledging: fell back to asynchronous replication on the primary");
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
        && obs.semi_sync.is_some_and(|s| !s.primary)
    {
        let others: Vec<&str> =
            probes.iter().filter(|p| Some(p.site.as_str()) != active).map(|p| p.site.as_str()).collect();
        return Computed::flag(
            t,
            true,
            reason::STANDBY_NOT_ACKNOWLEDGING,
            format!(
                "semi-synchronous replication is off on the primary {}: a commit waited {fallback_seconds}s for an acknowledgement (semiSyncFallbackSeconds) and the operator fell back to asynchronous replication, or no standby has acknowledged since semi-sync was asked for or the primary restarted; it is switched on again once the standby {} replicates from the primary with its replica side on. Until then an emergency failover can lose acknowledged writes",
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
    fn the_primary_falls_back_only_after_a_commit_waited_with_no_replica_and_comes_back_with_its_standby() {
        let fallback = Duration::from_secs(10);
        let on = SemiSync { primary: true, ..SemiSync::default() };
        let off = SemiSync::default();
        let promoted = SemiSync { replica: true, ..SemiSync::default() };
        // On: waits until a commit has waited the fallback.
        assert!(primary_on(&on, false, None, fallback));
        assert!(primary_on(&on, false, Some(Duration::from_secs(9)), fallback));
        assert!(!primary_on(&on, false, Some(Duration::from_secs(10)), fallback));
        // Off after a fallback: on again only with the standby acknowledging.
        assert!(!primary_on(&off, false, None, fallback));
        assert!(primary_on(&off, true, None, fallback));
        // Just promoted (its replica side still on): on, so its commits wait
        // for the old primary's rejoin.
        assert!(primary_on(&promoted, false, None, fallback));
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
