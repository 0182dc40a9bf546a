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
//! emergency failover loses no acknowledged write. The primary waits at
//! most `rpl_semi_sync_master_timeout` (MariaDB default 10 s) for an
//! acknowledgement, then falls back to asynchronous replication until the
//! replica catches up: in that window the loss guarantee is the
//! asynchronous one (docs/failover-groups.md, "Durability").

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::ResourceExt;

use bloodraven_api::v1alpha1::{ConditionType, reason};

use super::assess::SiteProbe;
use super::sites;
use crate::controller::Context;
use crate::controller::conditions::Computed;
use crate::mysql::{ProbeTarget, SemiSync, actions};

/// The switches `site` should have.
pub(super) fn wanted(semi_sync: bool, active: &str, site: &str) -> SemiSync {
    SemiSync { primary: semi_sync && site == active, replica: semi_sync && site != active }
}

/// Sets the switches that differ from what the group asks; returns whether
/// it changed any (the caller probes again before reporting).
pub(super) async fn maintain(ctx: &Context, group: &MysqlFailoverGroup, active: &str, probes: &[SiteProbe]) -> bool {
    let mut changed = false;
    for probe in probes {
        let Ok(obs) = &probe.outcome else { continue };
        let Some(have) = obs.semi_sync else { continue };
        let want = wanted(group.spec.failover.semi_sync, active, &probe.site);
        if have == want || !ctx.leadership.is_leader() {
            continue;
        }
        // A writable site that is not the active one, with its primary
        // side on, is reassertion's to fence first: switching that side off
        // would release the commits waiting there for an acknowledgement,
        // as acknowledged, on a site that is no longer the primary. Its
        // replica side is set meanwhile.
        if probe.site != active && obs.writable && have.primary {
            continue;
        }
        let Some(site) = group.site(&probe.site) else { continue };
        let Ok(creds) = sites::read_credentials(site, ctx).await else { continue };
        let at = ProbeTarget { host: site.host.clone(), port: site.port };
        let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)) * 2);
        let primary = probe.site == active;
        let on = want.primary || want.replica;
        let restart_io = !primary && obs.replication.is_some();
        match actions::semi_sync(&at, &creds, obs.flavor, on, primary, restart_io, timeout).await {
            Ok(()) => {
                changed = true;
                tracing::info!(group = %group.name_any(), site = %probe.site, primary, on, "semi-synchronous replication set");
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
pub(super) fn condition(asked: bool, probes: &[SiteProbe]) -> Computed {
    let t = ConditionType::SemiSyncUnavailable.as_str();
    if !asked {
        return Computed::flag(t, false, reason::SEMI_SYNC_NOT_REQUESTED, "spec.failover.semiSync is false");
    }
    let missing: Vec<String> = probes
        .iter()
        .filter_map(|p| p.outcome.as_ref().ok().filter(|o| o.semi_sync.is_none()).map(|o| (p, o)))
        .map(|(p, o)| format!("{} ({})", p.site, bloodraven_serving::log::escape(&o.version, 60)))
        .collect();
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
        let c = condition(true, &[able.clone(), unable.clone()]);
        assert_eq!((c.status, c.reason), ("True", reason::SEMI_SYNC_PLUGINS_MISSING));
        assert!(c.message.contains("pdx (9.7.4)") && !c.message.contains("iad"), "{}", c.message);
        let c = condition(true, std::slice::from_ref(&able));
        assert_eq!((c.status, c.reason), ("False", reason::SEMI_SYNC_AVAILABLE));
        let c = condition(false, &[able, unable]);
        assert_eq!((c.status, c.reason), ("False", reason::SEMI_SYNC_NOT_REQUESTED));
    }

    #[test]
    fn roles_follow_the_active_site() {
        assert_eq!(wanted(true, "iad", "iad"), SemiSync { primary: true, replica: false });
        assert_eq!(wanted(true, "iad", "pdx"), SemiSync { primary: false, replica: true });
        assert_eq!(wanted(false, "iad", "iad"), SemiSync::default());
        assert_eq!(wanted(false, "iad", "pdx"), SemiSync::default());
    }
}
