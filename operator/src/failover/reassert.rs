//! Primary reassertion (a safety path that never reads a lease;
//! docs/failover.md, "Returning primary, reassertion"): once a group has a decision, on every
//! probe where the decided active site is writable (or, after a failover,
//! answers read-only), a site other than it that is writable is made read-only
//! again and its client sessions ended — a returning old primary, a replica restarted
//! without `read_only` in its configuration, or a hand-made promotion, must
//! not leave two writable sites. One Warning Event `PrimaryReasserted` per
//! fence says what was done.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::runtime::events::EventType;

use crate::controller::Context;
use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::{publish, sites};
use crate::mysql::{ProbeTarget, actions};

/// Fences every writable site other than `active` (leader only) when the
/// decision and the sites agree that it is not the primary:
///
/// - `active` is observed writable: a second writable site is the fault;
/// - or `active` answers read-only and `failed_over` (this operator's
///   verified decision record holds a failover at the generation in
///   force): the writable site lost its role to that decision, a paused or
///   cut-off old primary answering again (returning-primary fencing, on
///   first sight: a killed new primary restarts read-only, and its
///   predecessor must not take writes meanwhile).
///
/// `sites`: the site a restore-in-place's Job may be restoring, never
/// fenced while it does, and the site an ordered update's Job may be
/// updating, made read-only without its sessions ended.
///
/// Otherwise, with the decided site read-only or unreachable and another
/// writable, nothing is done and the assessment reports
/// `UnexpectedPrimary`: before any failover the bootstrap decision and the
/// sites disagree (a mistaken `initialActiveSite`), a decision adopted
/// from status alone is not this operator's to trust, and a standby a
/// person promoted by hand while the decided primary is down (the
/// runbook's way with `automatic: false`) must keep its writes. A site that
/// answers as another server (swapped addresses) is not observed at all
/// (`UnexpectedServer`) and never fenced. Returns whether it fenced any, so
/// the caller probes again before reporting.
pub(crate) async fn reassert(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    active: &str,
    failed_over: bool,
    probes: &[SiteProbe],
    sites: Sites<'_>,
) -> bool {
    let answered = probes.iter().find(|p| p.site == active).and_then(|p| p.outcome.as_ref().ok());
    if !answered.is_some_and(|o| o.writable || failed_over) {
        return false;
    }
    let mut fenced_any = false;
    let (updating, others): (Vec<SiteProbe>, Vec<SiteProbe>) = probes
        .iter()
        .filter(|p| Some(p.site.as_str()) != sites.spare)
        .cloned()
        .partition(|p| Some(p.site.as_str()) == sites.updating && p.site != active);
    for probe in &updating {
        fenced_any |= read_only_under_a_job(ctx, group, active, probe).await;
    }
    fenced_any | fence_others(ctx, group, active, &others).await.fenced_any
}

/// What a site operation holds of the sites, for [`reassert`]: see
/// `record::SiteHold::restoring` and `record::SiteHold::updating`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Sites<'a> {
    /// The site a restore-in-place's Job may be restoring: never fenced.
    pub(crate) spare: Option<&'a str>,
    /// The site an ordered update's Job may be updating: made read-only,
    /// its sessions left.
    pub(crate) updating: Option<&'a str>,
}

/// Makes a writable site an ordered update's Job may be updating read-only
/// (`read_only`, not `super_read_only`), leaving its sessions: a Job that
/// restarted the server may be running its upgrade there as an account
/// that writes through `read_only`, which the full fence would cut off
/// halfway. Applications lose their writes there; the full fence follows
/// once the Job's hold is over. One Warning Event `PrimaryReasserted`.
async fn read_only_under_a_job(ctx: &Context, group: &MysqlFailoverGroup, active: &str, probe: &SiteProbe) -> bool {
    let Ok(obs) = &probe.outcome else { return false };
    if !obs.writable || !ctx.leadership.is_leader() {
        return false;
    }
    let Some(site) = group.site(&probe.site) else { return false };
    let Ok(creds) = sites::read_credentials(site, ctx).await else { return false };
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    let target = ProbeTarget { host: site.host.clone(), port: site.port };
    match actions::set_read_only(&target, &creds, timeout).await {
        Ok(()) => {
            let note = format!(
                "site {} was writable while {active} is the decided active site and an ordered update's Job may be updating it; made it read-only, its sessions left to the Job",
                site.name
            );
            // The full fence follows once the Job's hold is over.
            ctx.groups.unswept.set(group.metadata.uid.as_deref().unwrap_or_default(), &site.name, true);
            tracing::warn!(site = %site.name, active, "site under an ordered update's Job made read-only");
            publish(ctx, group, EventType::Warning, "PrimaryReasserted", note, "Fence", None).await;
            true
        }
        Err(err) => {
            let (reason, message) = crate::mysql::classify(&err);
            tracing::warn!(site = %site.name, reason, error = %message, "failed to make a site under an ordered update's Job read-only");
            false
        }
    }
}

/// The sites made read-only without their client sessions ended, by group
/// UID and site name: a fence that failed after its `read_only` (or
/// failed without saying whether it landed), and a site an ordered
/// update's Job may be updating, whose sessions were left to the Job.
/// Such a site shows read-only from the next probe on, so it would never
/// be fenced again; on MariaDB an account with `READ_ONLY ADMIN` writes
/// through `read_only` until its session is ended (on MySQL, without
/// `super_read_only`, so does one with `SUPER`). [`fence_others`] fences
/// it in full once it answers (and the Job's hold is over), before
/// anything else counts the site as fenced. Kept by the process: a new leader does not know of a
/// sweep its predecessor owed (docs/failover.md, "Returning primary,
/// reassertion").
#[derive(Clone, Debug, Default)]
pub(crate) struct Unswept(Arc<Mutex<HashSet<(String, String)>>>);

impl Unswept {
    fn owed(&self, uid: &str, site: &str) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).contains(&(uid.to_owned(), site.to_owned()))
    }

    fn set(&self, uid: &str, site: &str, owed: bool) {
        let mut sites = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (uid.to_owned(), site.to_owned());
        if owed {
            sites.insert(key);
        } else {
            sites.remove(&key);
        }
    }

    /// Forgets a group (deletion).
    pub(crate) fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).retain(|(u, _)| u != uid);
    }
}

/// What [`fence_others`] did.
pub(crate) struct Fenced {
    /// Whether it fenced any site.
    pub(crate) fenced_any: bool,
    /// The writable sites it could not fence, each with why.
    pub(crate) failed: Vec<String>,
}

/// Fences every site other than `active` that `probes` show writable
/// (leader only), one Warning Event `PrimaryReasserted` each: reassertion,
/// and the step before an emergency decision's promotion, which must never
/// make the decided site writable beside a returning old primary. A site
/// whose last fence failed ([`Unswept`]) is swept even when it answers
/// read-only, and counts as not fenced until that sweep succeeds.
pub(crate) async fn fence_others(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    active: &str,
    probes: &[SiteProbe],
) -> Fenced {
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    let uid = group.metadata.uid.as_deref().unwrap_or_default();
    let unswept = &ctx.groups.unswept;
    let mut fenced_any = false;
    let mut failed = Vec::new();
    for probe in probes.iter().filter(|p| p.site != active) {
        let Ok(obs) = &probe.outcome else { continue };
        let owed = !obs.writable && unswept.owed(uid, &probe.site);
        if !(obs.writable || owed) || !ctx.leadership.is_leader() {
            continue;
        }
        let Some(site) = group.site(&probe.site) else { continue };
        let creds = match sites::read_credentials(site, ctx).await {
            Ok(c) => c,
            Err(f) => {
                tracing::warn!(site = %site.name, reason = f.reason, "cannot fence a writable non-active site: no credentials");
                failed.push(format!("{}: no credentials ({})", site.name, f.message));
                continue;
            }
        };
        let target = ProbeTarget { host: site.host.clone(), port: site.port };
        if !ctx.leadership.is_leader() {
            failed.push(format!("{}: this process is no longer the leader", site.name));
            return Fenced { fenced_any, failed };
        }
        // A site owed a sweep gets the whole fence again: its read_only is
        // already set (at once), super_read_only too on MySQL, and its
        // sessions are ended.
        let done = actions::fence(&target, &creds, obs.flavor, timeout).await;
        match done {
            Ok(done) => {
                unswept.set(uid, &site.name, false);
                fenced_any = true;
                let generation =
                    group.decided().map(|(_, g)| format!(" at topologyGeneration {g}")).unwrap_or_default();
                let left = if done.left.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} session(s) of SYSTEM_USER accounts could not be ended (super_read_only stops their writes)",
                        done.left.len()
                    )
                };
                let what = if owed {
                    "was read-only with its sessions not yet ended (by a fence that could not end them, or left to an ordered update's Job); fenced it in full and ended".to_owned()
                } else {
                    format!(
                        "was writable while {active} is the decided active site{generation}; made it read-only again and ended"
                    )
                };
                let note = format!("site {} {what} {} client session(s){left}", site.name, done.killed.len());
                tracing::warn!(site = %site.name, active, killed = done.killed.len(), swept = owed, "primary reasserted");
                publish(ctx, group, EventType::Warning, "PrimaryReasserted", note, "Fence", None).await;
            }
            Err(err) => {
                unswept.set(uid, &site.name, true);
                let (reason, message) = crate::mysql::classify(&err);
                let what = if owed { "end the sessions of a fenced" } else { "fence a writable" };
                tracing::warn!(site = %site.name, reason, error = %message, "failed to {what} non-active site");
                failed.push(format!("{}: {message}", site.name));
            }
        }
    }
    Fenced { fenced_any, failed }
}
