//! Emergency failover, the steps after its decision, and returning-primary
//! handling, against the real sites (the pure rules are
//! `bloodraven_core::failover::emergency`). None of these reads a deploy lease.
//!
//! - Detection: consecutive failed probes of the active site are counted
//!   per group in this process (a new leader starts counting afresh, so a
//!   leader change can delay a failover by at most one detection budget,
//!   never cause one). At `failureThreshold` the standby is promoted if it
//!   is reachable, its replication receiver no longer hears from the
//!   active site (`PrimaryReachableFromStandby` while it does: the
//!   operator's path failed, not the primary), it has applied everything it
//!   received, and the replica check found no errant transaction on it
//!   (`status.health[].errantGtids`).
//! - What the promotion abandons: the transactions the active site had at
//!   its last answered probe that the standby lacks at the decision
//!   (`bloodraven_core::failover::abandoned`). More than
//!   `spec.failover.maxAbandonedTransactions` (default 0) and nothing is
//!   promoted (`StandbyBehind`), unless a person accepted the loss with the
//!   `promote-despite-loss` annotation for that standby and generation. The
//!   decision writes them to `status.emergencyFailover` and the Event.
//! - The decision is recorded first with `pending: promote` (record, then
//!   status: generation + 1, every deploy lease revoked), then any other
//!   site that answers writable is fenced, then the standby is promoted and
//!   the pending step cleared; a leader that dies in
//!   between leaves `pending`, which the next one finishes
//!   (`RecoveryPending` until then).
//! - A site that is not the active one, read-only (primary reassertion
//!   fenced it on first sight) and not replicating from the active site,
//!   after a failover: its transactions are compared with the new
//!   primary's history (the promotion position in the record). Clean: it
//!   is repointed as a replica (`SiteRejoined`). Diverged: left fenced,
//!   `SiteDiverged`, never repointed and never `RESET MASTER`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_api::names::PROMOTE_DESPITE_LOSS_ANNOTATION;
use bloodraven_api::v1alpha1::{EmergencyFailoverStatus, MysqlFailoverGroup, reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

use super::decision;
use super::record::Record;
use super::round::RoundRecord;
use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::{deploy_leases, publish, sites};
use crate::controller::{Context, Error};
use crate::mysql::statements::Source;
use crate::mysql::{ProbeTarget, actions};
use bloodraven_core::failover::abandoned::{self, Abandoned};
use bloodraven_core::failover::emergency::{self, Heard, Standby, Verdict};

/// What this process saw of each group's active site (by group UID):
/// consecutive failed probes, and the GTID position of its last answer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Missed(Arc<Mutex<HashMap<String, Watched>>>);

#[derive(Debug, Default)]
struct Watched {
    missed: u32,
    /// `(site, position)` of the active site's last answer.
    seen: Option<(String, String)>,
    /// What the standby's connected receiver last got from the active site.
    heard: Option<Heard>,
}

impl Missed {
    /// Counts one probe round: returns the consecutive failures so far.
    pub(crate) fn count(&self, uid: &str, active_answered: bool) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let w = map.entry(uid.to_owned()).or_default();
        w.missed = if active_answered { 0 } else { w.missed.saturating_add(1) };
        w.missed
    }

    /// Reads this round's standby: `Some((ago, window))` while its receiver
    /// is connected to the active site (`source`) and heard from it within
    /// the window ([`emergency::Heard`]). A receiver that is not connected,
    /// or connected to another server (a relay speaks for itself, not for
    /// the primary), hears nothing of it, and its next connection starts
    /// afresh; a standby that cannot be probed this round keeps what was
    /// heard before.
    fn hear(
        &self,
        uid: &str,
        standby: Option<&SiteProbe>,
        source: &ActiveSource,
        probe_interval: Duration,
    ) -> Option<(Duration, Duration)> {
        let now = Instant::now();
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let w = map.entry(uid.to_owned()).or_default();
        let Some((site, Ok(obs))) = standby.map(|p| (p.site.as_str(), p.outcome.as_ref())) else {
            return None;
        };
        let Some(r) = obs.replication.as_ref().filter(|r| source.followed_by(r)) else {
            w.heard = None;
            return None;
        };
        let heard = Heard::next(w.heard.as_ref(), site, r.heartbeats, r.received_position.as_deref(), now);
        let window = emergency::hearing_window(r.heartbeat_period_ms.map(Duration::from_millis), probe_interval);
        let ago = heard.within(now, window);
        w.heard = Some(heard);
        ago.map(|ago| (ago, window))
    }

    /// Remembers the active site's position at its answer.
    fn saw(&self, uid: &str, site: &str, position: &str) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(uid.to_owned()).or_default().seen = Some((site.to_owned(), position.to_owned()));
    }

    /// The position `site` last answered with, if this process saw it.
    fn last_seen(&self, uid: &str, site: &str) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(uid).and_then(|w| w.seen.as_ref()).filter(|(s, _)| s == site).map(|(_, p)| p.clone())
    }

    /// Forgets a group (after a decision, or deletion).
    pub(crate) fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
    }
}

/// The active site as a receiver names its source: its endpoint in spec,
/// and the `server_id` the operator knows it by (a receiver may reach it by
/// another name).
struct ActiveSource {
    host: String,
    port: u16,
    server_id: Option<u32>,
}

impl ActiveSource {
    fn of(group: &MysqlFailoverGroup, active: &str) -> Self {
        ActiveSource {
            host: group.site(active).map(|s| s.host.clone()).unwrap_or_default(),
            port: group.site(active).map_or(0, |s| s.port),
            server_id: crate::controller::failover_group::identity::known(group).get(active).copied(),
        }
    }

    /// Whether a receiver is connected to it (its IO thread running, its
    /// source the active site's endpoint or known `server_id`).
    fn followed_by(&self, r: &crate::mysql::ReplicationObservation) -> bool {
        r.io_running
            && ((r.source_host == self.host && r.source_port == self.port)
                || (r.source_server_id.is_some() && r.source_server_id == self.server_id))
    }
}

/// Whether replication `r` of another site is connected to `group`'s
/// active site `active` ([`ActiveSource::followed_by`]).
pub(crate) fn follows_active(
    group: &MysqlFailoverGroup,
    active: &str,
    r: &crate::mysql::ReplicationObservation,
) -> bool {
    ActiveSource::of(group, active).followed_by(r)
}

/// [`emergency::endpoint_unconfirmed`] for the group's active site: its
/// endpoint in spec, and the one status records it last answered at.
fn endpoint_unconfirmed(
    group: &MysqlFailoverGroup,
    active: &str,
    probe: Option<&SiteProbe>,
) -> Option<(&'static str, String)> {
    let now = crate::controller::failover_group::endpoint_of(&group.spec, active)?;
    let health = group.status.as_ref()?.health.iter().find(|h| h.site == active)?;
    emergency::endpoint_unconfirmed(active, probe, &now, health.answered_endpoint.as_deref())
}

/// What the emergency pass did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The group as written, when a decision was taken.
    pub decided: Option<MysqlFailoverGroup>,
    /// `RecoveryPending` when something is due but cannot be done.
    pub blocked: Option<(&'static str, String)>,
}

/// Runs the emergency check for a decided group whose active site is
/// `active`, given this round's probes; `held`: a planned failover runs
/// before its decision; `standby_complete`: the standby is the fenced old
/// primary of a planned failover whose target was decided but never
/// promoted, so it has every write although it does not replicate.
pub(crate) async fn check(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
    active: &str,
    probes: &[SiteProbe],
    held: bool,
    standby_complete: bool,
) -> Result<Outcome, Error> {
    let uid = group.meta().uid.clone().unwrap_or_default();
    let active_probe = probes.iter().find(|p| p.site == active);
    if let Some(blocked) = endpoint_unconfirmed(group, active, active_probe) {
        ctx.groups.missed.forget(&uid);
        return Ok(Outcome { decided: None, blocked: Some(blocked) });
    }
    if let Some(Ok(obs)) = active_probe.map(|p| &p.outcome) {
        ctx.groups.missed.saw(&uid, active, &obs.gtid_position);
    }
    let missed = ctx.groups.missed.count(&uid, emergency::alive(active_probe));
    let policy = &group.spec.failover;
    let standby_probe = probes.iter().find(|p| p.site != active);
    // Every round, so the count the standby showed before the active site
    // went silent is known when the budget is spent.
    let interval = Duration::from_secs(u64::from(policy.probe_interval_seconds.clamp(1, 300)));
    let source = ActiveSource::of(group, active);
    let hears_primary = ctx.groups.missed.hear(&uid, standby_probe, &source, interval);
    if missed == 0 {
        return Ok(Outcome::default());
    }
    let timeout = Duration::from_secs(u64::from(policy.probe_timeout_seconds.clamp(1, 60)));
    // The standby's positions are read only once the budget is spent.
    let mut applied = String::new();
    let mut current = String::new();
    let mut standby_err: Option<String> = None;
    if missed >= policy.failure_threshold.max(1)
        && let Some(p) = standby_probe
        && let Ok(obs) = &p.outcome
        && let Some(site) = group.site(&p.site)
    {
        match sites::read_credentials(site, ctx).await {
            Ok(creds) => {
                let at = ProbeTarget { host: site.host.clone(), port: site.port };
                match actions::positions(&at, &creds, obs.flavor, timeout).await {
                    Ok(pos) => (applied, current) = (pos.applied, pos.current),
                    Err(e) => standby_err = Some(crate::mysql::classify(&e).1),
                }
            }
            Err(f) => standby_err = Some(f.message),
        }
    }
    let loss = Loss::of(ctx, group, &uid, active, standby_probe, &current);
    // The replica check's verdict of the last round, as written: it
    // outlives this process, so a new leader never promotes a standby
    // that was found with a write of its own.
    let errant_of = |site: &str| {
        group.status.as_ref()?.health.iter().find(|h| h.site == site)?.errant_gtids.as_deref().filter(|e| !e.is_empty())
    };
    let standby = standby_probe.map(|p| match &p.outcome {
        Ok(obs) => Standby {
            site: &p.site,
            reachable: standby_err.as_deref().map_or(Ok(()), Err),
            flavor: obs.flavor,
            applied: &applied,
            received: obs.replication.as_ref().and_then(|r| r.received_position.as_deref()),
            abandoned: loss.abandoned.as_ref(),
            max_abandoned: u64::from(policy.max_abandoned_transactions),
            loss_accepted: loss.accepted,
            errant: errant_of(&p.site),
            replicating: standby_complete
                || obs
                    .replication
                    .as_ref()
                    .is_some_and(|r| r.sql_running && (r.io_running || r.io_state.eq_ignore_ascii_case("connecting"))),
            hears_primary,
        },
        Err(f) => Standby {
            site: &p.site,
            reachable: Err(f.message.as_str()),
            flavor: crate::mysql::Flavor::MariaDb,
            applied: "",
            received: None,
            abandoned: None,
            max_abandoned: 0,
            loss_accepted: false,
            errant: errant_of(&p.site),
            replicating: false,
            hears_primary: None,
        },
    });
    match emergency::judge(active, missed, policy.failure_threshold, policy.automatic, held, standby.as_ref()) {
        Verdict::Wait { .. } => Ok(Outcome::default()),
        Verdict::Blocked { reason, message } => Ok(Outcome { decided: None, blocked: Some((reason, message)) }),
        Verdict::Promote { site } => {
            let standby_obs = standby_probe.and_then(|p| p.outcome.as_ref().ok());
            let promotion = Promotion { active, site: &site, missed, loss: &loss, standby_position: &current };
            decide(ctx, round, group, &promotion, standby_obs).await
        }
    }
}

/// An emergency promotion the rules allowed.
struct Promotion<'a> {
    active: &'a str,
    site: &'a str,
    missed: u32,
    loss: &'a Loss,
    standby_position: &'a str,
}

/// Decides an emergency promotion: the record (with the pending
/// promotion), then status with what the promotion abandons, an Event, and
/// the revocations. Nothing when the record does not agree.
async fn decide(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
    p: &Promotion<'_>,
    standby_obs: Option<&crate::mysql::SiteObservation>,
) -> Result<Outcome, Error> {
    let (active, site, loss) = (p.active, p.site, p.loss);
    let uid = group.meta().uid.clone().unwrap_or_default();
    let judged = round.trusted().and_then(|r| r.site_hold.clone());
    let Some(rec) = round.reread(ctx).await?.cloned() else {
        return Ok(Outcome::default());
    };
    if rec.tampered.is_some() || rec.active_site != active || rec.pending.is_some() {
        return Ok(Outcome::default());
    }
    // A hold of the site written since the round judged it (another
    // operator's last act before it lost the lease): the next round judges
    // it, Job and all.
    let sites: Vec<&str> = group.spec.sites.iter().map(|s| s.name.as_str()).collect();
    if let Some(hold) =
        crate::failover::record::held_since(judged.as_ref(), &rec, site, &sites, Timestamp::now().as_second())
    {
        tracing::warn!(group = %group.name_any(), site, hold = %hold, "emergency promotion not decided: the record holds the site since the round judged it");
        return Ok(Outcome::default());
    }
    let mut extra = rec.extra();
    extra.promotion_position = standby_obs.map(|o| o.gtid_position.clone());
    extra.pending = Some("promote".into());
    let generation = rec.generation + 1;
    let facts = EmergencyFailoverStatus {
        time: Time(Timestamp::now()),
        from_site: active.to_owned(),
        to_site: site.to_owned(),
        topology_generation: generation,
        primary_last_seen: loss.primary_last_seen.clone(),
        standby_position: p.standby_position.to_owned(),
        abandoned_gtids: loss.abandoned.as_ref().map(|a| a.gtids.clone()),
        abandoned_transactions: loss.abandoned.as_ref().map_or(0, |a| a.transactions),
        loss_accepted: loss.accepted && loss.abandoned.is_some(),
    };
    let decided = decision::decide(ctx, round, group, site, &extra, Some(&facts)).await?;
    ctx.failpoint.hit("emergency-after-decide");
    ctx.groups.missed.forget(&uid);
    tracing::warn!(group = %group.name_any(), site = %site, generation, missed = p.missed, abandoned = facts.abandoned_transactions, "emergency failover decided");
    publish(
        ctx,
        &decided,
        EventType::Warning,
        reason::EMERGENCY_FAILOVER,
        format!(
            "the active site {active} failed {} probes in a row; {site} is the active site at topologyGeneration {generation}; {}; every deploy lease of the group is revoked",
            p.missed,
            loss.describe(active, site)
        ),
        "Decide",
        None,
    )
    .await;
    if loss.accepted {
        loss.clear_acceptance(ctx, &decided).await;
    }
    ctx.metrics.topology_generation.with_label_values(&[&group.name_any()]).set(generation);
    ctx.metrics.failovers_total.with_label_values(&[&group.name_any(), "emergency", "completed"]).inc();
    deploy_leases::maintain_after_decision(ctx, &decided).await;
    Ok(Outcome { decided: Some(decided), blocked: None })
}

/// What promoting the standby now would abandon, and whether a person
/// accepted it.
struct Loss {
    /// The active site's position at its last answer: as this process saw
    /// it, else as the last written status shows it.
    primary_last_seen: Option<String>,
    /// What the standby lacks of it (`None`: nothing, or unknown).
    abandoned: Option<Abandoned>,
    /// `promote-despite-loss` names the standby at the group's generation.
    accepted: bool,
}

impl Loss {
    fn of(
        ctx: &Context,
        group: &MysqlFailoverGroup,
        uid: &str,
        active: &str,
        standby: Option<&SiteProbe>,
        standby_position: &str,
    ) -> Loss {
        let primary_last_seen = ctx.groups.missed.last_seen(uid, active).or_else(|| {
            let health = group.status.as_ref()?.health.iter().find(|h| h.site == active)?;
            health.gtid_position.clone().filter(|p| !p.is_empty())
        });
        let standby_obs = standby.and_then(|p| p.outcome.as_ref().ok());
        let abandoned = match (&primary_last_seen, standby_obs) {
            (Some(seen), Some(obs)) if !standby_position.is_empty() => {
                abandoned::abandoned(obs.flavor, seen, standby_position).unwrap_or_else(|why| {
                    tracing::warn!(group = %group.name_any(), error = %why, "cannot tell what a promotion abandons");
                    None
                })
            }
            _ => None,
        };
        let accepted = match (standby, group.decided()) {
            (Some(p), Some((_, generation))) => group
                .annotations()
                .get(PROMOTE_DESPITE_LOSS_ANNOTATION)
                .is_some_and(|v| v.trim() == format!("{}@{generation}", p.site)),
            _ => false,
        };
        Loss { primary_last_seen, abandoned, accepted }
    }

    /// What the Event says of the loss.
    fn describe(&self, active: &str, site: &str) -> String {
        match (&self.abandoned, &self.primary_last_seen) {
            (Some(a), _) => format!(
                "the promotion abandoned {} transaction(s) {active} was last seen with ({}){}: they are not on {site}; keep {active}'s data until a person has reconciled it",
                a.transactions,
                a.gtids,
                if self.accepted { ", a loss a person accepted (promote-despite-loss)" } else { "" }
            ),
            (None, Some(seen)) => format!("{site} had everything {active} was last seen with ({seen})"),
            (None, None) => format!(
                "{active} was never seen answering by this operator, so what the promotion abandoned is unknown"
            ),
        }
    }

    /// Removes the acceptance once it was used: it never accepts a later failover.
    async fn clear_acceptance(&self, ctx: &Context, group: &MysqlFailoverGroup) {
        let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
        let patch = serde_json::json!({"metadata": {"annotations": {PROMOTE_DESPITE_LOSS_ANNOTATION: null}}});
        if let Err(err) = api.patch(&group.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::warn!(group = %group.name_any(), error = %err, "could not remove the promote-despite-loss annotation");
        }
    }
}

/// Finishes a decided emergency failover's promotion (`pending: promote`
/// in the record). Returns the pending step's message when it could not be
/// done yet (`RecoveryPending`).
pub(crate) async fn recover(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
    rec: &Record,
    probes: &[SiteProbe],
) -> Result<Option<String>, Error> {
    if rec.pending.as_deref() != Some("promote") {
        return Ok(None);
    }
    let active = rec.active_site.as_str();
    let Some(site) = group.site(active) else { return Ok(Some(format!("site {active} is not in spec.sites"))) };
    let Some(obs) = probes.iter().find(|p| p.site == active).and_then(|p| p.outcome.as_ref().ok()) else {
        return Ok(Some(format!("promotion of {active} is pending: it is unreachable")));
    };
    if !(obs.writable && obs.replication.is_none()) {
        // The old primary may have come back writable since the decision
        // (a paused or cut-off server answers again): fenced first, or the
        // promotion would make two writable sites, and a leader that then
        // loses the API server would leave them so.
        let fenced = crate::failover::reassert::fence_others(ctx, group, active, probes).await;
        if !fenced.failed.is_empty() {
            return Ok(Some(format!(
                "promotion of {active} is pending: a writable site could not be fenced first ({})",
                fenced.failed.join("; ")
            )));
        }
        let creds = sites::read_credentials(site, ctx).await.map_err(|f| Error::Site {
            action: "read credentials for",
            site: active.to_owned(),
            message: f.message,
        })?;
        let at = ProbeTarget { host: site.host.clone(), port: site.port };
        let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)) * 5);
        if !ctx.leadership.is_leader() {
            return Err(Error::NotLeader);
        }
        let policy = &group.spec.failover;
        let semi_sync = (policy.semi_sync && obs.semi_sync.is_some())
            .then(|| crate::mysql::statements::semi_sync_timeout_ms(policy.semi_sync_server_timeout_seconds));
        if let Err(e) = actions::promote(&at, &creds, obs.flavor, semi_sync, timeout).await {
            return Ok(Some(format!("promotion of {active} is pending: {}", crate::mysql::classify(&e).1)));
        }
        tracing::info!(group = %group.name_any(), site = active, "promoted after an emergency decision");
    }
    let mut extra = rec.extra();
    extra.pending = None;
    round.write(ctx, &rec.active_site, rec.generation, &extra).await?;
    Ok(None)
}

/// What [`rejoin`] did this round.
#[derive(Debug, Default)]
pub(crate) struct Rejoined {
    /// The sites left fenced as diverged, each with its `SiteDiverged` clause.
    pub diverged: std::collections::BTreeMap<String, String>,
    /// The sites repointed at the active site just now: this round's probe
    /// of them predates it.
    pub repointed: Vec<String>,
}

/// Returning-primary handling for the non-active sites (only after a
/// failover: the record holds a promotion position). A site this round's
/// replica check found with errant transactions (`checked`) is never
/// repointed.
#[allow(clippy::too_many_lines)] // each non-active site's verdict carried out in turn, with its Event
pub(crate) async fn rejoin(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    rec: &Record,
    probes: &[SiteProbe],
    checked: &crate::controller::failover_group::replicas::Checked,
) -> Result<Rejoined, Error> {
    let mut out = Rejoined::default();
    let diverged = &mut out.diverged;
    let Some(promotion) = rec.promotion_position.as_deref() else { return Ok(out) };
    if rec.pending.is_some() {
        return Ok(out);
    }
    let active = rec.active_site.as_str();
    let (Some(active_spec), Some(active_obs)) =
        (group.site(active), probes.iter().find(|p| p.site == active).and_then(|p| p.outcome.as_ref().ok()))
    else {
        return Ok(out);
    };
    for probe in probes.iter().filter(|p| p.site != active) {
        let Ok(obs) = &probe.outcome else { continue };
        let Some(spec) = group.site(&probe.site) else { continue };
        let follows = obs.replication.as_ref().is_some_and(|r| {
            (r.source_host == active_spec.host && r.source_port == active_spec.port)
                || r.source_server_id == Some(active_obs.server_id)
        });
        if obs.writable || follows {
            // Writable: reassertion fences it first. Following: a replica.
            continue;
        }
        let creds = sites::read_credentials(spec, ctx).await.map_err(|f| Error::Site {
            action: "read credentials for",
            site: spec.name.clone(),
            message: f.message,
        })?;
        let at = ProbeTarget { host: spec.host.clone(), port: spec.port };
        let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)) * 5);
        let positions = actions::positions(&at, &creds, obs.flavor, timeout).await.map_err(|e| Error::Site {
            action: "read the GTID position of",
            site: spec.name.clone(),
            message: crate::mysql::classify(&e).1,
        })?;
        let errant = emergency::returning(
            obs.flavor,
            &positions.binlog,
            promotion,
            active_obs.server_id,
            &active_obs.server_uuid,
            &active_obs.gtid_position,
        )
        .map_err(|m| Error::Site {
            action: "compare the GTID positions of",
            site: spec.name.clone(),
            message: m,
        })?;
        if let Some(errant) = errant {
            let abandoned = abandoned_by_failover(group, &spec.name, active);
            diverged.insert(spec.name.clone(), format!(
                "site {} has transactions the active site {active} lacks (errant GTIDs {errant}, past the promotion position {promotion}{abandoned}); it stays read-only and is not repointed: save what you need from it, then rebuild it from {active} (or remove those transactions) and make it replicate from {active}",
                spec.name
            ));
            continue;
        }
        if checked.is_errant(&spec.name) {
            // The replica check found what this rule did not: never repointed
            // (its clause is the check's).
            continue;
        }
        let repl = sites::read_replication_credentials(active_spec, ctx).await.map_err(|f| Error::Site {
            action: "read replication credentials for",
            site: active.to_owned(),
            message: f.message,
        })?;
        let from = Source {
            host: active_spec.host.clone(),
            port: active_spec.port,
            user: repl.username.clone(),
            password: repl.password.clone(),
        };
        if !ctx.leadership.is_leader() {
            return Err(Error::NotLeader);
        }
        actions::repoint(&at, &creds, obs.flavor, &from, timeout).await.map_err(|e| Error::Site {
            action: "repoint",
            site: spec.name.clone(),
            message: crate::mysql::classify(&e).1,
        })?;
        tracing::info!(group = %group.name_any(), site = %spec.name, active, "returning site repointed");
        out.repointed.push(spec.name.clone());
        publish(
            ctx,
            group,
            EventType::Normal,
            reason::SITE_REJOINED,
            format!(
                "site {} came back without transactions the active site {active} lacks; it replicates from {active} again (topologyGeneration {})",
                spec.name, rec.generation
            ),
            "Repoint",
            None,
        )
        .await;
    }
    Ok(out)
}

/// What the emergency failover from `site` to `active` abandoned, as a
/// clause of the `SiteDiverged` message: MariaDB shows one last GTID per
/// domain, and the failover's status names the whole range.
fn abandoned_by_failover(group: &MysqlFailoverGroup, site: &str, active: &str) -> String {
    group
        .status
        .as_ref()
        .and_then(|s| s.emergency_failover.as_ref())
        .filter(|e| e.from_site == site && e.to_site == active)
        .and_then(|e| e.abandoned_gtids.as_ref())
        .map(|g| format!("; the emergency failover that promoted {active} abandoned {g}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
