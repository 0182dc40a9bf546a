//! The MysqlFailoverGroup reconciler (leader only): probe every site on
//! `spec.failover.probeIntervalSeconds`, write observations (health,
//! conditions, stability) by server-side apply, and complete bootstrap with
//! one authoritative decision write.
//!
//! Invariants:
//! - Only the leader writes; leadership is checked right before each write.
//! - The decision (`activeSite` + `topologyGeneration`) is written once per
//!   change, as a merge patch carrying the resourceVersion read, so it can
//!   never be applied over a status the operator did not see. Observations
//!   never touch those two fields (separate field managers).
//! - A group that looks wrong gets conditions and Events, never a guess.
//! - The watch only wakes the reconciler on spec or annotation changes; the
//!   operator's own status writes do not (each reconcile requeues itself on
//!   the probe interval).

pub(crate) mod assess;
pub(crate) mod bypass;
mod claims;
pub(crate) mod cleanup;
pub(crate) mod credentials;
pub(crate) mod deploy_leases;
pub(crate) mod identity;
mod observed;
mod operations;
pub(crate) mod replicas;
mod report;
pub(crate) mod semisync;
pub(crate) mod sites;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::tolerant::Findings;
use bloodraven_api::v1alpha1::{MysqlFailoverGroup, reason};
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher::{self, Config as WatcherConfig};
use kube::runtime::{Predicate as _, PredicateConfig};
use kube::runtime::{WatchStreamExt, predicates, reflector};
use kube::{Api, Resource, ResourceExt};

use self::assess::{Assessment, Decided, SiteProbe, assess, validate_spec};
use self::operations::Operations;
use self::report::{announce, diverged_condition, health_of, operation_conditions, record_metrics, write_observation};
pub(crate) use self::report::{endpoint_of, mark_operation_in_progress, publish};
use super::conditions::Computed;
use super::{Context, Ctx, Error, kube_err};
use crate::failover::round::RoundRecord;
use crate::failover::{decision, emergency, planned, reassert, record};

/// What the failover-group controller keeps between rounds, for every
/// group it runs: held by the operator's [`Context`], one per process.
#[derive(Clone)]
pub(crate) struct State {
    /// Consecutive failed probes of each group's active site (emergency failover).
    pub missed: emergency::Missed,
    /// Each group's replicas' progress (stalls), by the replica check.
    pub replicas: replicas::Replicas,
    /// When this process first saw each planned failover draining (caps a
    /// `Draining` time in status that lies in the future).
    pub drains: planned::DrainsSeen,
    /// The last read-only bypass check of each site (`ReadOnlyBypassAccounts`).
    pub bypass: bypass::Checks,
    /// The sites whose last fence may have left client sessions (reassertion).
    pub unswept: reassert::Unswept,
    /// Site credentials, read through a watch of the credentials namespace.
    pub credentials: credentials::Cache,
    /// The decision records, read through a watch of the operator's namespace.
    pub records: record::Records,
    /// What the semi-sync maintenance saw at each group's previous round.
    pub semi_sync: semisync::Memory,
}

const CONTROLLER: &str = "failovergroup";
/// Longest Event note the API server accepts (`events.k8s.io/v1`).
const MAX_EVENT_NOTE: usize = 1024;

/// Runs the controller until `shutdown` resolves, reconciling at most
/// `concurrency` groups at once (`--reconcile-concurrency`).
pub(crate) async fn run(
    ctx: Ctx,
    selector: &str,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let config = if selector.is_empty() { WatcherConfig::default() } else { WatcherConfig::default().labels(selector) };
    let (reader, writer) = reflector::store();
    let metrics = ctx.metrics.clone();
    // Tolerant: a group that does not decode is reported on itself
    // (condition + Event) and skipped; the others keep being served.
    let stream = ctx
        .tolerant
        .watch::<MysqlFailoverGroup>(config, Some((writer, reader.clone())), Findings::Report)
        .inspect(move |event| {
            // Per-process state only: the group's stored state is removed
            // by its finalizer (`cleanup`), whichever replica leads.
            if let Ok(watcher::Event::Delete(group)) = event {
                let sites: Vec<&str> = group.spec.sites.iter().map(|s| s.name.as_str()).collect();
                metrics.forget_group(&group.name_any(), &sites);
            }
        })
        .applied_objects()
        .predicate_filter(predicates::generation.combine(predicates::annotations), PredicateConfig::default());
    let takeover = ctx.leadership.acquisitions();
    Controller::for_stream(stream, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .reconcile_all_on(takeover)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "failover group reconcile ended with an error");
            }
        })
        .await;
}

#[allow(clippy::needless_pass_by_value)] // the signature kube's Controller::run requires
fn error_policy(group: Arc<MysqlFailoverGroup>, err: &Error, ctx: Ctx) -> Action {
    ctx.metrics.reconcile_errors_total.with_label_values(&[CONTROLLER, err.reason()]).inc();
    tracing::warn!(group = %group.name_any(), reason = err.reason(), error = %err, "failover group reconcile failed");
    // Conflicts clear on the next read; anything else backs off a little.
    if err.reason() == "Conflict" {
        Action::requeue(Duration::from_secs(1))
    } else {
        Action::requeue(Duration::from_secs(5))
    }
}

async fn reconcile(group: Arc<MysqlFailoverGroup>, ctx: Ctx) -> Result<Action, Error> {
    ctx.metrics.reconcile_total.with_label_values(&[CONTROLLER]).inc();
    let interval = Duration::from_secs(u64::from(group.spec.failover.probe_interval_seconds.clamp(1, 300)));
    if !ctx.leadership.is_leader() {
        return Ok(Action::requeue(interval));
    }
    let name = group.meta().name.clone().ok_or(Error::NoName)?;
    if group.meta().deletion_timestamp.is_some() && let_go(&ctx, &group).await? {
        return Ok(Action::await_change());
    }
    let group = cleanup::ensure_finalizer(&ctx, group).await?;
    // What is not the safety paths' own work (claims, the planned failover,
    // deploy-lease bookkeeping) never stops them: a lease store that fails
    // or a claim that conflicts must not keep a dead primary in charge. Its
    // first error is returned once the round is done (the error policy
    // counts it and requeues).
    let mut later = Later::default();
    let group = prune_claims(&ctx, group, &mut later).await?;
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let previous = group.status.clone().unwrap_or_default();

    if let Err(message) = validate_spec(&group.spec) {
        let computed = vec![
            Computed::flag("Ready", false, reason::INVALID_SPEC, message.clone()),
            Computed::flag("Degraded", true, reason::INVALID_SPEC, message),
        ];
        write_observation(&api, &name, &group, &ctx, &computed, false, Some("Degraded".into()), Vec::new()).await?;
        announce(&ctx, &group, &previous.conditions, &computed).await;
        return Ok(Action::requeue(interval));
    }

    let started = Instant::now();
    // The decision record is read once here; the engines act on this copy
    // and every write replaces it (`failover::round`).
    let mut round = RoundRecord::read(&ctx, &group).await?;
    let Some((group, resolution)) = resolve(&ctx, &mut round, &api, &group).await? else {
        return Ok(Action::await_change());
    };
    // One probe of every site per round. The planned failover, if any, runs
    // first on it: it acts on its own, and may move the decision. A request
    // that has not fenced adds no probe and no wait: the safety paths act on
    // the same probes.
    let probes = sites::probe_all(&group, &ctx).await;
    let Some((group, resolution, operations)) =
        Box::pin(operations::drive(&ctx, &mut round, &api, group, resolution, &probes, &mut later)).await?
    else {
        return Ok(Action::await_change());
    };
    let probes = if operations.acted_on_sites() { sites::probe_all(&group, &ctx).await } else { probes };
    // Automatic failover waits for a planned failover only while it
    // drains, within its bound; a new primary that dies after the decision
    // is failed over like any other.
    let safety = Box::pin(safety_paths(&ctx, &mut round, group, resolution, probes, &operations)).await?;
    let (group, resolution, probes) = (safety.group, safety.resolution, safety.probes);
    // The deploy-lease bookkeeping comes after the safety paths: a lease
    // store that is slow or failing never delays an emergency failover.
    let verification = deploy_lease_bookkeeping(&ctx, &group, &resolution, &mut later).await?;
    let decided = match &resolution {
        decision::Resolution::Undecided => Decided::Undecided,
        decision::Resolution::At { site, generation, .. } => Decided::At(site, *generation),
        decision::Resolution::Invalid(why) | decision::Resolution::Conflict(why) => Decided::Invalid(why),
    };
    let restoring = restoring(&round, &group);
    let mut assessment = assess(&group.spec, decided, &probes, restoring.as_deref());
    let mut generation = match decided {
        Decided::At(_, g) => Some(g),
        _ => None,
    };

    if let (true, decision::Resolution::Undecided) = (assessment.bootstrap, &resolution) {
        let site = group.spec.initial_active_site.clone();
        decision::bootstrap(&ctx, &mut round, &group, &site).await?;
        generation = Some(1);
        assessment = assess(&group.spec, Decided::At(&site, 1), &probes, restoring.as_deref());
    }

    operation_conditions(&mut assessment, &operations, safety.recovery.as_ref(), safety.diverged.as_ref(), &resolution);
    assessment.conditions.push(verification);
    assessment.conditions.push(bypass::condition(&ctx, &group, &probes).await);
    let active = match &resolution {
        decision::Resolution::At { site, .. } => Some(site.as_str()),
        _ => None,
    };
    let policy = &group.spec.failover;
    assessment.conditions.push(semisync::condition(
        policy.semi_sync,
        active,
        policy.semi_sync_fallback_seconds,
        &probes,
    ));
    let health = health_of(&group.spec, &identity::known(&group), &previous.health, &probes, &safety.checked);
    write_observation(
        &api,
        &name,
        &group,
        &ctx,
        &assessment.conditions,
        assessment.stable,
        assessment.unstable_reason.clone(),
        health,
    )
    .await?;
    ctx.metrics.probe_to_status_seconds.with_label_values(&[CONTROLLER]).observe(started.elapsed().as_secs_f64());
    record_metrics(&ctx, &name, generation, &assessment, &probes);
    announce(&ctx, &group, &previous.conditions, &assessment.conditions).await;
    later.result()?;
    Ok(Action::requeue(operations.requeue().map_or(interval, |r| r.min(interval))))
}

/// The group's decision, from its record and status: a status edited away
/// from the record is restored (with a Warning Event), and the group is read
/// again so that what follows acts on the restored status, never on the
/// edited copy the reconcile started from. `None`: the group is gone.
async fn resolve(
    ctx: &Context,
    round: &mut RoundRecord,
    api: &Api<MysqlFailoverGroup>,
    group: &MysqlFailoverGroup,
) -> Result<Option<(MysqlFailoverGroup, decision::Resolution)>, Error> {
    let resolution = decision::resolve(ctx, round, group).await?;
    let decision::Resolution::At { site, generation, restored_from: Some(was) } = &resolution else {
        return Ok(Some((group.clone(), resolution)));
    };
    let name = group.name_any();
    tracing::warn!(group = %name, site = %site, generation, was = %was, "status restored from the decision record");
    publish(ctx, group, EventType::Warning, reason::STATUS_RESTORED, format!(
        "status showed {was}; restored activeSite={site}, topologyGeneration={generation} from the operator's decision record (status is written by the operator alone; edits to activeSite or topologyGeneration are undone)"
    ), "Restore", None).await;
    let restored = api.get_opt(&name).await.map_err(kube_err("read the group after restoring its status"))?;
    Ok(restored.map(|g| (g, resolution)))
}

/// The first error of a reconcile's work that must not stop the safety
/// paths, returned at the end of the round. Losing leadership is never
/// deferred: a process that is not the leader stops acting at once.
#[derive(Default)]
struct Later(Option<Error>);

impl Later {
    fn keep(&mut self, what: &'static str, err: Error) -> Result<(), Error> {
        if matches!(err, Error::NotLeader) {
            return Err(err);
        }
        tracing::warn!(part = what, reason = err.reason(), error = %err, "failover group round goes on to the safety paths despite an error");
        self.0.get_or_insert(err);
        Ok(())
    }

    fn result(self) -> Result<(), Error> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The group's instance claims pruned ([`claims::maintain`]); the group as
/// written, or as it was when nothing was written or the write failed (the
/// error is kept in `later`).
async fn prune_claims(
    ctx: &Context,
    group: Arc<MysqlFailoverGroup>,
    later: &mut Later,
) -> Result<Arc<MysqlFailoverGroup>, Error> {
    match claims::maintain(ctx, &group).await {
        Ok(Some(written)) => Ok(Arc::new(written)),
        Ok(None) => Ok(group),
        Err(e) => {
            later.keep("claims", e)?;
            Ok(group)
        }
    }
}

/// The group's deploy-lease bookkeeping (revocations, sweeps, verification
/// records) and its `SchemaVerificationRequired` condition. Errors are kept
/// in `later`; an unreadable store makes the condition `Unknown`.
async fn deploy_lease_bookkeeping(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    resolution: &decision::Resolution,
    later: &mut Later,
) -> Result<Computed, Error> {
    if matches!(resolution, decision::Resolution::At { .. })
        && let Err(e) = deploy_leases::maintain(ctx, group).await
    {
        later.keep("deploy leases", e)?;
    }
    match deploy_leases::verification_condition(ctx, group).await {
        Ok(condition) => Ok(condition),
        Err(e) => {
            let message = format!("the verification records could not be read: {e}");
            later.keep("verification records", e)?;
            Ok(Computed::unknown(
                bloodraven_api::v1alpha1::ConditionType::SchemaVerificationRequired.as_str(),
                reason::DEPLOY_LEASES_UNREADABLE,
                message,
            ))
        }
    }
}

/// Finalizes a deleted group, unless a planned failover has touched its
/// sites: that one is finished first (letting the group go with the old
/// primary fenced would leave both sites read-only, and nothing would ever
/// undo it; found by an attack). `true` when the group was let go.
async fn let_go(ctx: &Context, group: &MysqlFailoverGroup) -> Result<bool, Error> {
    if decision::operation_touching_sites(group) {
        tracing::info!(group = %group.name_any(), "deletion waits for the running operation to end");
        return Ok(false);
    }
    cleanup::finalize(ctx, group).await?;
    Ok(true)
}

/// What the safety paths left: the group and resolution (an emergency
/// decision moves them), the probes as the sites are now, and conditions.
struct Safety {
    group: MysqlFailoverGroup,
    resolution: decision::Resolution,
    probes: Vec<SiteProbe>,
    recovery: Option<(&'static str, String)>,
    diverged: Option<Computed>,
    checked: replicas::Checked,
}

/// Emergency failover, finishing a decided promotion, primary reassertion
/// and returning-primary handling, in that order; none reads a deploy
/// lease. `planned` says whether a planned failover holds automatic
/// failover (before its decision) and whether its old primary is a
/// complete standby (decided, target not promoted).
async fn safety_paths(
    ctx: &Context,
    round: &mut RoundRecord,
    mut group: MysqlFailoverGroup,
    mut resolution: decision::Resolution,
    mut probes: Vec<SiteProbe>,
    operations: &operations::Operations,
) -> Result<Safety, Error> {
    let (held, standby_complete) = (operations.holds_automatic_failover(), operations.before_promotion());
    let mut recovery: Option<(&'static str, String)> = None;
    let mut diverged: Option<Computed> = None;
    let mut current = None;
    if let decision::Resolution::At { site, .. } = resolution.clone() {
        let out = emergency::check(ctx, round, &group, &site, &probes, held, standby_complete).await?;
        if let Some(decided) = out.decided {
            group = decided;
            resolution = decided_now(&group, resolution);
        }
        recovery = out.blocked;
        if round.get().is_some_and(|r| r.pending.is_some()) {
            // A pending promotion is finished on the record as it is now.
            round.reread(ctx).await?;
        }
        current = round.trusted().cloned();
        if let Some(rec) = current.clone() {
            if let Some(pending) = emergency::recover(ctx, round, &group, &rec, &probes).await? {
                recovery = Some((reason::OPERATION_IN_PROGRESS, pending));
            } else if rec.pending.is_some() {
                probes = sites::probe_all(&group, ctx).await;
                current = round.trusted().cloned();
            }
        }
    }
    // A failover in force that this operator decided: its verified record
    // holds the generation in force, past bootstrap (only a decided change
    // of the active site moves it).
    let failed_over = |generation: i64| round.trusted().is_some_and(|r| r.generation == generation && generation > 1);
    let restoring = restoring(round, &group);
    let updating = round.trusted().and_then(|r| {
        r.site_hold
            .as_ref()?
            .updating(k8s_openapi::jiff::Timestamp::now().as_second(), &r.active_site)
            .map(str::to_owned)
    });
    let sites = reassert::Sites { spare: restoring.as_deref(), updating: updating.as_deref() };
    if let decision::Resolution::At { site, generation, .. } = &resolution
        && reassert::reassert(ctx, &group, site, failed_over(*generation), &probes, sites).await
    {
        // Report what the sites are now, not what they were before the fence.
        probes = sites::probe_all(&group, ctx).await;
    }
    if let decision::Resolution::At { site, .. } = &resolution
        && semisync::maintain(ctx, &group, site, &probes).await
    {
        probes = sites::probe_all(&group, ctx).await;
    }
    let mut checked = replicas::Checked::default();
    if let decision::Resolution::At { site, .. } = &resolution {
        checked = replicas::check(ctx, &group, site, &mut probes).await;
    }
    let mut returning = std::collections::BTreeMap::new();
    if let decision::Resolution::At { .. } = &resolution
        && !held
        && let Some(rec) = &current
    {
        let rejoined = emergency::rejoin(ctx, &group, rec, &probes, &checked).await?;
        returning = rejoined.diverged;
        if !rejoined.repointed.is_empty() {
            // Report what the repointed sites are now: the probe before the
            // repoint shows no replication, and a condition built on it would
            // tell a person to configure what was just configured.
            probes = sites::probe_until_replicating(&group, ctx, &rejoined.repointed).await;
        }
    }
    if let decision::Resolution::At { site, .. } = &resolution {
        diverged = Some(diverged_condition(site, &returning, &checked, &group));
    }
    Ok(Safety { group, resolution, probes, recovery, diverged, checked })
}

/// The resolution after a decision this reconcile took: only a higher
/// generation, written by this process's own decision, replaces it (a
/// group object that shows anything else is a stale copy, not a decision).
fn decided_now(group: &MysqlFailoverGroup, was: decision::Resolution) -> decision::Resolution {
    match (group.decided(), was) {
        (Some((site, generation)), decision::Resolution::At { generation: g, .. }) if generation > g => {
            decision::Resolution::At { site: site.to_owned(), generation, restored_from: None }
        }
        (_, was) => was,
    }
}

/// The site a restore-in-place's Job may be restoring now: the round's
/// record holds it for that Job (`record::SiteHold::restoring`), and the
/// request is still `Restoring` (a Job deleted mid-run fails the request,
/// and its hold stays to its bound: the site is fenced like any other).
/// Reassertion spares it, and its being writable is no split brain.
fn restoring(round: &RoundRecord, group: &MysqlFailoverGroup) -> Option<String> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let rec = round.trusted()?;
    let site = rec.site_hold.as_ref()?.restoring(now, &rec.active_site)?;
    let state = group.status.as_ref()?.restore_in_place.as_deref()?;
    let request =
        crate::failover::request::recorded_id::<bloodraven_api::v1alpha1::RestoreInPlaceStatus>(&state.request_id);
    let ours = state.phase == "Restoring" && rec.site_hold.as_ref().is_some_and(|h| h.request() == request);
    ours.then(|| site.to_owned())
}
