//! Semi-synchronous replication as `spec.failover.semiSync` asks (MariaDB's
//! built-in semi-sync, `AFTER_SYNC`): on every probe, the decided active
//! site has `rpl_semi_sync_master_enabled` on and every other site
//! `rpl_semi_sync_slave_enabled` on (or all off when the group does not
//! ask). A switch that differs is set, and a replica's IO thread is
//! restarted so the new setting takes effect at once.
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

use super::assess::SiteProbe;
use super::sites;
use crate::controller::Context;
use crate::mysql::{ProbeTarget, SemiSync, actions};

/// The switches `site` should have.
pub fn wanted(semi_sync: bool, active: &str, site: &str) -> SemiSync {
    SemiSync { primary: semi_sync && site == active, replica: semi_sync && site != active }
}

/// Sets the switches that differ from what the group asks; returns whether
/// it changed any (the caller probes again before reporting).
pub async fn maintain(ctx: &Context, group: &MysqlFailoverGroup, active: &str, probes: &[SiteProbe]) -> bool {
    let mut changed = false;
    for probe in probes {
        let Ok(obs) = &probe.outcome else { continue };
        let Some(have) = obs.semi_sync else { continue };
        let want = wanted(group.spec.failover.semi_sync, active, &probe.site);
        if have == want || !ctx.leadership.is_leader() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_follow_the_active_site() {
        assert_eq!(wanted(true, "iad", "iad"), SemiSync { primary: true, replica: false });
        assert_eq!(wanted(true, "iad", "pdx"), SemiSync { primary: false, replica: true });
        assert_eq!(wanted(false, "iad", "iad"), SemiSync::default());
        assert_eq!(wanted(false, "iad", "pdx"), SemiSync::default());
    }
}
