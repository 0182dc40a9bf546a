//! The replica check of every probe round, against the real sites (the
//! pure rules are `bloodraven_core::failover::replica`): every site that is not the
//! active one is checked for errant transactions and for a stall.
//!
//! - Errant transactions: the site's binlogged GTIDs (read by this round's
//!   probe) against the active site's. When the round's probe of the active
//!   site shows some of the site's GTIDs missing, the active site's are read
//!   again, after the site's: its set only grows, so what it lacks then is
//!   errant and not on its way (a busy primary probed a moment before its
//!   replica is not a false alarm). On MySQL the primary's own GTIDs a
//!   replica shows are first waited for there, at most a second: MySQL
//!   sends a transaction to replicas before its commit stage adds it to
//!   `gtid_executed`. The verdict goes to
//!   `status.health[].errantGtids` and `SiteDiverged`, and is kept while the
//!   comparison cannot be made: it is what emergency failover and admission
//!   read, whichever process leads. Nothing is done to such a site.
//! - Stalls: a replica whose threads report running but which lacks some of
//!   the active site's transactions, counting what it received, and whose
//!   positions have not moved for the stall bound, is marked stalled on its
//!   probe: `ReplicationNotRunning` (`ReplicationStalled`), `Ready` false,
//!   `replicationRunning: false`. Admission refuses it as a target. The
//!   progress is this process's memory: a new leader needs one stall bound
//!   of its own rounds before it says so.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::{Resource, ResourceExt};

use super::assess::SiteProbe;
use super::sites;
use crate::controller::Context;
use crate::mysql::{ProbeTarget, actions};
use bloodraven_core::failover::abandoned::abandoned;
use bloodraven_core::failover::replica::{self, Errant, Progress};

/// Each group's replicas' progress, as this process's rounds saw it (by
/// group UID, then site).
#[derive(Clone, Debug, Default)]
pub(crate) struct Replicas(Arc<Mutex<HashMap<String, HashMap<String, Watched>>>>);

#[derive(Clone, Debug)]
struct Watched {
    progress: Progress,
    /// Why it is stalled, when it was at its last round.
    stall: Option<String>,
}

impl Replicas {
    fn update(&self, uid: &str, site: &str, f: impl FnOnce(Option<&Watched>) -> Watched) -> Watched {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let sites = map.entry(uid.to_owned()).or_default();
        let next = f(sites.get(site));
        sites.insert(site.to_owned(), next.clone());
        next
    }

    fn forget_site(&self, uid: &str, site: &str) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sites) = map.get_mut(uid) {
            sites.remove(site);
        }
    }

    /// Forgets a group (deletion).
    pub(crate) fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
    }

    /// Why `site` of the group was stalled at its last round, if it was.
    pub(crate) fn stall(&self, uid: &str, site: &str) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(uid)?.get(site)?.stall.clone()
    }
}

/// What one round's check found.
#[derive(Clone, Debug, Default)]
pub(crate) struct Checked {
    /// The sites compared this round: their errant transactions (`None`:
    /// clean). A site left out was not compared (it or the active site did
    /// not answer, or the second read failed): its last verdict stands.
    pub errant: BTreeMap<String, Option<Errant>>,
}

impl Checked {
    /// Whether `site` was found with errant transactions this round.
    pub(crate) fn is_errant(&self, site: &str) -> bool {
        self.errant.get(site).is_some_and(Option::is_some)
    }
}

/// Checks every site but `active` against it, given this round's probes;
/// marks stalled replicas on their probe ([`crate::mysql::ReplicationObservation::stall`]).
pub(crate) async fn check(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    active: &str,
    probes: &mut [SiteProbe],
) -> Checked {
    let uid = group.meta().uid.clone().unwrap_or_default();
    let mut checked = Checked::default();
    let Some(primary) = probes.iter().find(|p| p.site == active).and_then(|p| p.outcome.as_ref().ok()).cloned() else {
        return checked;
    };
    let policy = &group.spec.failover;
    let bound = replica::stall_bound(Duration::from_secs(u64::from(policy.probe_interval_seconds.clamp(1, 300))));
    let now = Instant::now();
    // The active site's binlogged GTIDs read after every replica's probe
    // (once a round, and only when a replica seems to hold more).
    let mut later_read: Option<Option<String>> = None;
    for probe in probes.iter_mut().filter(|p| p.site != active) {
        let site = probe.site.clone();
        let Ok(obs) = &mut probe.outcome else {
            ctx.groups.replicas.forget_site(&uid, &site);
            continue;
        };
        if obs.flavor != primary.flavor {
            continue;
        }
        let flavor = obs.flavor;
        let judge =
            |primary_state: &str| replica::errant(flavor, &obs.gtid_binlog_state, &obs.gtid_slave_pos, primary_state);
        match judge(&primary.gtid_binlog_state) {
            Ok(None) => {
                checked.errant.insert(site.clone(), None);
            }
            Ok(Some(_)) => {
                // MySQL: the primary's own newest GTIDs can reach a replica
                // before the primary's gtid_executed shows them; those are
                // waited for (bounded) before the read.
                let awaited = replica::in_flight(
                    flavor,
                    &obs.gtid_binlog_state,
                    &primary.gtid_binlog_state,
                    &primary.server_uuid,
                );
                if later_read.is_none() || awaited.is_some() {
                    later_read = Some(read_again(ctx, group, active, flavor, awaited.as_deref()).await);
                }
                match later_read.as_ref().and_then(Option::as_deref).map(judge) {
                    Some(Ok(verdict)) => {
                        checked.errant.insert(site.clone(), verdict);
                    }
                    Some(Err(why)) => {
                        tracing::warn!(group = %group.name_any(), site, error = %why, "cannot compare GTIDs");
                    }
                    None => {}
                }
            }
            Err(why) => {
                tracing::warn!(group = %group.name_any(), site, error = %why, "cannot compare GTIDs");
            }
        }

        let applied = obs.gtid_position.clone();
        let Some(r) = obs.replication.as_mut().filter(|r| r.io_running && r.sql_running) else {
            ctx.groups.replicas.forget_site(&uid, &site);
            continue;
        };
        let received = r.received_position.clone().unwrap_or_default();
        let complete = match replica::has_everything(flavor, &applied, Some(&received), &primary.gtid_position) {
            Ok(complete) => complete,
            Err(why) => {
                tracing::warn!(group = %group.name_any(), site, error = %why, "cannot compare GTID positions");
                continue;
            }
        };
        let watched = ctx.groups.replicas.update(&uid, &site, |previous| {
            let progress = Progress::next(previous.map(|w| &w.progress), &applied, &received, complete, now);
            let stall = progress.stalled(now, bound).map(|stuck| {
                let lacks = abandoned(flavor, &primary.gtid_position, &applied).ok().flatten().map_or_else(
                    || "some".to_owned(),
                    |a| format!("{} ({})", a.transactions, a.gtids),
                );
                // Each flavour's own words for its lag column and its restart.
                let (lag_column, restart) = match flavor {
                    crate::mysql::Flavor::MariaDb => ("Seconds_Behind_Master", "STOP SLAVE; START SLAVE"),
                    crate::mysql::Flavor::MySql => ("Seconds_Behind_Source", "STOP REPLICA; START REPLICA"),
                };
                format!(
                    "site {site} is stalled: both replication threads report running ({lag_column} {}), but it lacks {lacks} of the active site {active}'s transactions and has received and applied nothing for {} s (applied {applied}, received {}); the link to {active} may be cut: check the network, then restart replication on {site} ({restart})",
                    r.lag_seconds.map_or_else(|| "NULL".to_owned(), |l| l.to_string()),
                    stuck.as_secs(),
                    if received.is_empty() { "nothing shown" } else { received.as_str() },
                )
            });
            Watched { progress, stall }
        });
        r.stall = watched.stall;
    }
    checked
}

/// The active site's binlogged GTIDs, read now; `None` (logged) when it
/// cannot be read.
async fn read_again(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    active: &str,
    flavor: crate::mysql::Flavor,
    awaited: Option<&str>,
) -> Option<String> {
    let site = group.site(active)?;
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)))
        + awaited.map_or(Duration::ZERO, |_| Duration::from_secs(actions::IN_FLIGHT_WAIT_SECONDS));
    let creds = sites::read_credentials(site, ctx).await.ok()?;
    let at = ProbeTarget { host: site.host.clone(), port: site.port };
    match actions::binlog_state(&at, &creds, flavor, awaited, timeout).await {
        Ok(state) => Some(state),
        Err(e) => {
            tracing::warn!(group = %group.name_any(), site = active, error = %crate::mysql::classify(&e).1, "cannot read the active site's GTIDs again");
            None
        }
    }
}

/// The `SiteDiverged` clause of a site found with errant transactions.
pub(crate) fn diverged_message(site: &str, active: &str, e: &Errant) -> String {
    format!(
        "site {site} holds {} transaction(s) the active site {active} lacks (errant GTIDs {}): it took writes of its own; it is never a failover target (no emergency promotion, no planned failover onto it) and nothing of it is changed: reconcile it (rebuild it from {active}, or where those transactions are wanted or empty, give {active} the same GTIDs; see the runbook, SiteDiverged)",
        e.transactions, e.gtids
    )
}

/// What keeps `site` from being a planned failover's target, as this
/// round's check left it: errant transactions (from status, whichever
/// process wrote it) or a stall (this process's memory).
pub(crate) fn known_problem(ctx: &Context, group: &MysqlFailoverGroup, site: &str) -> Option<String> {
    let uid = group.meta().uid.clone().unwrap_or_default();
    let errant = group
        .status
        .as_ref()
        .and_then(|s| s.health.iter().find(|h| h.site == site))
        .and_then(|h| h.errant_gtids.clone())
        .filter(|e| !e.is_empty());
    match errant {
        Some(gtids) => {
            Some(format!("{site} holds transactions the active site lacks (errant GTIDs {gtids}); see SiteDiverged"))
        }
        None => ctx.groups.replicas.stall(&uid, site),
    }
}
