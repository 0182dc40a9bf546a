//! The requests a round drives, in order: the planned failover, the
//! ordered update, restore-in-place (one runs at a time: another's
//! admission refuses it), and what they hold of the safety paths together.

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::Api;
use kube::ResourceExt;

use super::{Later, SiteProbe, decided_now};
use crate::controller::{Context, Error, kube_err};
use crate::failover::record::SiteHold;
use crate::failover::round::RoundRecord;
use crate::failover::site_job;
use crate::failover::{decision, ordered_update, planned, restore};

/// What the round's drives left.
#[derive(Debug)]
pub(super) struct Operations {
    pub(super) planned: planned::Drive,
    pub(super) update: ordered_update::Drive,
    pub(super) restore: restore::Drive,
    /// What the decision record holds of a site whatever status shows
    /// ([`crate::failover::record::SiteHold`]): why automatic failover waits.
    pub(super) recorded_hold: Option<String>,
    /// A site a failed restore-in-place left unrestored, held by the
    /// record until a person marks it re-cloned: why (`RecloneRequired`).
    pub(super) unrestored: Option<String>,
}

impl Operations {
    fn idle(group: &MysqlFailoverGroup) -> Operations {
        Operations {
            planned: planned::Drive::idle(group.clone()),
            update: ordered_update::Drive::idle(group.clone()),
            restore: restore::Drive::idle(group.clone()),
            recorded_hold: None,
            unrestored: None,
        }
    }

    /// Whether automatic failover waits: a planned failover's drain, or
    /// what the ordered update holds (the promotion of the site whose Job
    /// runs, which in a pair is the only candidate; a switchover's drain).
    pub(super) fn holds_automatic_failover(&self) -> bool {
        self.planned.holds_automatic_failover()
            || self.update.hold().is_some()
            || self.restore.holds_automatic_failover()
            || self.recorded_hold.is_some()
    }

    /// Why automatic failover waits, for `AutomaticFailoverHeld`.
    pub(super) fn hold_message(&self) -> String {
        if self.planned.holds_automatic_failover() {
            return self.planned.hold_message();
        }
        if self.update.hold().is_some() {
            return self.update.hold_message();
        }
        if self.restore.holds_automatic_failover() {
            return self.restore.hold_message();
        }
        self.recorded_hold.clone().unwrap_or_default()
    }

    /// A decided switchover whose target is not yet promoted.
    pub(super) fn before_promotion(&self) -> bool {
        self.planned.before_promotion() || self.update.before_promotion() || self.restore.before_promotion()
    }

    /// A request runs: the group is unstable (`OperationInProgress`).
    pub(super) fn running(&self) -> bool {
        self.planned.running() || self.update.running() || self.restore.running()
    }

    /// A decided switchover is under way.
    pub(super) fn recovering(&self) -> bool {
        self.planned.recovering() || self.update.recovering() || self.restore.recovering()
    }

    /// Whether a drive may have acted on a site.
    pub(super) fn acted_on_sites(&self) -> bool {
        self.planned.acted_on_sites || self.update.acted_on_sites || self.restore.acted_on_sites
    }

    /// When to look again, if sooner than the probe interval.
    pub(super) fn requeue(&self) -> Option<std::time::Duration> {
        [self.planned.requeue, self.update.requeue, self.restore.requeue].into_iter().flatten().min()
    }
}

/// The drive of one request engine after another's: skipped (idle) when
/// the group is no longer decided, on fresh probes when the drive before
/// acted on the sites, and, when it fails, kept in `later` with the group
/// as stored, so the safety paths run whatever it met. `None`: the group
/// is gone.
macro_rules! drive_next {
    ($engine:ident, $what:literal, $ctx:expr, $round:expr, $api:expr, $group:expr, $resolution:expr, $probes:expr, $acted:expr, $later:expr) => {{
        let (group, resolution): (MysqlFailoverGroup, decision::Resolution) = ($group, $resolution);
        if !matches!(resolution, decision::Resolution::At { .. }) {
            let idle = $engine::Drive::idle(group.clone());
            Some((group, resolution, idle))
        } else {
            let fresh;
            let probes: &[SiteProbe] = if $acted {
                fresh = super::sites::probe_all(&group, $ctx).await;
                fresh.as_slice()
            } else {
                $probes
            };
            let name = group.name_any();
            let drive = match Box::pin($engine::drive($ctx, $round, group, probes)).await {
                Ok(drive) => Some(drive),
                Err(e) => {
                    $later.keep($what, e)?;
                    if let Err(e) = $round.fresh($ctx).await {
                        $later.keep("decision record", e)?;
                    }
                    $api.get_opt(&name)
                        .await
                        .map_err(kube_err("read the group after a failed drive"))?
                        .map($engine::Drive::as_stored)
                }
            };
            drive.map(|drive| {
                let group = drive.group.clone();
                let resolution = decided_now(&group, resolution);
                (group, resolution, drive)
            })
        }
    }};
}

/// The drives of the round's requests on its `probes`: the group and
/// resolution as they left them. Their errors are kept in `later`, never
/// returned, so the safety paths run whatever a drive met. `None`: the
/// group is gone.
pub(super) async fn drive(
    ctx: &Context,
    round: &mut RoundRecord,
    api: &Api<MysqlFailoverGroup>,
    group: MysqlFailoverGroup,
    resolution: decision::Resolution,
    probes: &[SiteProbe],
    later: &mut Later,
) -> Result<Option<(MysqlFailoverGroup, decision::Resolution, Operations)>, Error> {
    if !matches!(resolution, decision::Resolution::At { .. }) {
        let idle = Operations::idle(&group);
        return Ok(Some((group, resolution, idle)));
    }
    let name = group.name_any();
    // Before any admission reads it: status shows what the record awaits.
    let group = restore::restore_from_record(ctx, round, group).await?;
    // Before any admission reads the record: a site marked re-cloned is
    // held no more.
    let group = restore::release_unrestored(ctx, round, group).await?;
    let planned = match Box::pin(planned::drive(ctx, round, group, probes)).await {
        Ok(planned) => planned,
        Err(e) => {
            later.keep("planned failover", e)?;
            // The drive may have written before it failed, or failed a write
            // on a record someone else changed: act on the group and the
            // record as stored (the safety paths still run).
            if let Err(e) = round.fresh(ctx).await {
                later.keep("decision record", e)?;
            }
            match api.get_opt(&name).await.map_err(kube_err("read the group after a failed drive"))? {
                Some(g) => planned::Drive::as_stored(ctx, g),
                None => return Ok(None),
            }
        }
    };
    let group = planned.group.clone();
    let resolution = decided_now(&group, resolution);
    let acted = planned.acted_on_sites;
    let Some((group, resolution, update)) =
        drive_next!(ordered_update, "ordered update", ctx, round, api, group, resolution, probes, acted, later)
    else {
        return Ok(None);
    };
    let acted = acted || update.acted_on_sites;
    let Some((group, resolution, restore)) =
        drive_next!(restore, "restore-in-place", ctx, round, api, group, resolution, probes, acted, later)
    else {
        return Ok(None);
    };
    let recorded_hold = match recorded_hold(ctx, round, &group).await {
        Ok(hold) => hold,
        Err(e) => {
            // Unknown whether the Job ended: it holds, within its deadline.
            later.keep("the site hold's Job", e)?;
            held_by_record(round, &group)
        }
    };
    let unrestored = round
        .trusted()
        .filter(|r| matches!(r.site_hold, Some(SiteHold::Unrestored { .. })))
        .and_then(|_| held_by_record(round, &group));
    Ok(Some((group, resolution, Operations { planned, update, restore, recorded_hold, unrestored })))
}

/// Why the decision record's site hold keeps automatic failover waiting
/// now, if it does: a reclone until a person ends it, a Job within its
/// deadline until the Job has ended.
async fn recorded_hold(
    ctx: &Context,
    round: &RoundRecord,
    group: &MysqlFailoverGroup,
) -> Result<Option<String>, Error> {
    let Some(why) = held_by_record(round, group) else { return Ok(None) };
    if let Some(SiteHold::Job { site, namespace, request, job_uid, .. }) =
        round.trusted().and_then(|r| r.site_hold.as_ref())
        && let Some((operation, request_id)) = request.split_once('/')
    {
        let name = site_job::job_name(&group.name_any(), operation, request_id, site);
        let uid = group.metadata.uid.clone().unwrap_or_default();
        let of = site_job::JobOf { group_uid: &uid, operation, site, request_id, job_uid: job_uid.as_deref() };
        if site_job::ended(&ctx.client, namespace, &name, &of).await? {
            return Ok(None);
        }
    }
    Ok(Some(why))
}

/// What the record's site hold says of now, before its Job is looked at.
fn held_by_record(round: &RoundRecord, group: &MysqlFailoverGroup) -> Option<String> {
    let rec = round.trusted()?;
    let sites: Vec<&str> = group.spec.sites.iter().map(|s| s.name.as_str()).collect();
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    rec.site_hold.as_ref()?.holds(&rec.active_site, &sites, now)
}
