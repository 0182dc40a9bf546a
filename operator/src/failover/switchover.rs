//! The steps a switchover takes on the sites, shared by every request that
//! runs one (a planned failover, the switchover inside an ordered update,
//! the fence and promotion of a restore-in-place): fence the old primary,
//! wait for the target to catch up, make the old primary writable again
//! after a drain that failed, promote the target, repoint the old primary.
//! Which step comes next is the rules' (`bloodraven_core::failover::planned`);
//! the request's own bookkeeping (its phase, history and Events) is its
//! engine's.

use crate::controller::Context;
use crate::controller::Error;
use crate::controller::LeaseError;
use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::deploy_leases;
use crate::controller::failover_group::publish;
use crate::controller::failover_group::sites;
use crate::failover::decision;
use crate::failover::record;
use crate::failover::round::RoundRecord;
use crate::mysql::Flavor;
use crate::mysql::ProbeTarget;
use crate::mysql::SiteObservation;
use crate::mysql::actions;
use crate::mysql::statements::{self, Source};
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::reason;
use bloodraven_core::failover::planned::Phase;
use bloodraven_core::failover::planned::drain::Slice;
use bloodraven_core::failover::planned::target_readiness;
use bloodraven_core::lease::machine::Grant;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use std::time::Duration;

/// What one round of a switchover saw, for its steps.
pub(crate) struct Step {
    /// The planned failover's phase the step belongs to (a leg of an
    /// ordered update maps its phases onto these).
    pub(crate) phase: Phase,
    /// The failpoints' prefix: `planned`, `ordered-update`, `restore`.
    pub(crate) failpoints: &'static str,
    pub(crate) source: String,
    pub(crate) source_spec: bloodraven_api::v1alpha1::Site,
    pub(crate) target_spec: bloodraven_api::v1alpha1::Site,
    pub(crate) tgt: Option<SiteObservation>,
    pub(crate) flavor: Flavor,
    /// `@@version` of the source (or the target), for the bypass check.
    pub(crate) version: String,
    pub(crate) policy: bloodraven_api::v1alpha1::FailoverPolicy,
    pub(crate) fence_bound: Duration,
    pub(crate) action_bound: Duration,
    /// A restore-in-place's recorded request: its decision also records
    /// that the source awaits a re-clone ([`record::SiteHold::Reclone`]).
    pub(crate) reclone: Option<String>,
    /// The sites whose probe answered as another server than the one they
    /// are known by (`UnexpectedServer`), each with the probe's message:
    /// see [`Step::refuse_foreign`].
    pub(crate) foreign: Vec<(String, String)>,
}

impl Step {
    /// The bounds of a fence (`fenceTimeoutSeconds`) and of every other
    /// action on a site (five probe timeouts).
    pub(crate) fn bounds(policy: &bloodraven_api::v1alpha1::FailoverPolicy) -> (Duration, Duration) {
        let fence = Duration::from_secs(u64::from(policy.fence_timeout_seconds.clamp(1, 300)));
        (fence, Duration::from_secs(u64::from(policy.probe_timeout_seconds.clamp(1, 60)) * 5))
    }

    /// The sites of `probes` that answered as another server (see
    /// [`Step::foreign`]).
    pub(crate) fn foreign_in(probes: &[SiteProbe]) -> Vec<(String, String)> {
        probes
            .iter()
            .filter_map(|p| match &p.outcome {
                Err(f) if f.answered_as.is_some() => Some((p.site.clone(), f.message.clone())),
                _ => None,
            })
            .collect()
    }

    /// Refuses to `action` the sites `sites` when one of them answered as
    /// another server: its spec address now reaches a server it is not (a
    /// mistyped or swapped address, edited in mid-request), and the rules,
    /// which read such a site as unseen, would fence, unfence, promote or
    /// repoint that server. The step is retried each round (the request
    /// keeps its phase and bounds) until the address is fixed.
    fn refuse_foreign(&self, action: &'static str, sites: &[&str]) -> Result<(), Error> {
        match self.foreign.iter().find(|(site, _)| sites.contains(&site.as_str())) {
            Some((site, message)) => Err(Error::Site { action, site: site.clone(), message: message.clone() }),
            None => Ok(()),
        }
    }
}

/// What one drive learned that the sites do not show.
#[derive(Default)]
pub(crate) struct Local {
    pub(crate) hold: Option<Grant>,
    pub(crate) fence_failed: Option<String>,
    pub(crate) caught_up: Option<bool>,
    pub(crate) promotion_position: Option<String>,
    /// Why admission waits for another request's site hold in the decision
    /// record ([`record::foreign_hold`]), read when the drive began.
    pub(crate) foreign_hold: Option<String>,
}

pub(crate) fn site_err(action: &'static str, site: &str, err: &crate::mysql::ProbeError) -> Error {
    let (_, message) = crate::mysql::classify(err);
    Error::Site { action, site: site.to_owned(), message }
}

pub(crate) async fn credentials(
    ctx: &Context,
    site: &bloodraven_api::v1alpha1::Site,
) -> Result<crate::mysql::Credentials, Error> {
    sites::read_credentials(site, ctx).await.map_err(|f| Error::Site {
        action: "read credentials for",
        site: site.name.clone(),
        message: f.message,
    })
}

/// Fences the old primary (`read_only`, then ends every client session),
/// within `fenceTimeoutSeconds`; a failure is kept for the table.
pub(crate) async fn fence(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    local: &mut Local,
    step: &Step,
    site: &str,
) -> Result<(), Error> {
    step.refuse_foreign("fence", &[site])?;
    let spec = group.site(site).cloned().ok_or(Error::NoName)?;
    let creds = credentials(ctx, &spec).await?;
    let target = ProbeTarget { host: spec.host.clone(), port: spec.port };
    report_bypass(ctx, group, &spec.name, &target, &creds, step).await;
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    match actions::fence(&target, &creds, step.flavor, step.fence_bound).await {
        Ok(done) => {
            tracing::info!(group = %group.name_any(), site = %site, killed = done.killed.len(), left = done.left.len(), "old primary fenced");
            ctx.failpoint.hit(&format!("{}-after-fence", step.failpoints));
        }
        Err(err) => {
            let (_, message) = crate::mysql::classify(&err);
            tracing::warn!(group = %group.name_any(), site = %site, error = %message, "fence failed");
            local.fence_failed = Some(message);
        }
    }
    Ok(())
}

/// Makes the old primary writable again after a drain that failed.
pub(crate) async fn unfence(ctx: &Context, group: &MysqlFailoverGroup, step: &Step, site: &str) -> Result<(), Error> {
    step.refuse_foreign("unfence", &[site])?;
    let spec = group.site(site).cloned().ok_or(Error::NoName)?;
    let creds = credentials(ctx, &spec).await?;
    let at = ProbeTarget { host: spec.host.clone(), port: spec.port };
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    actions::unfence(&at, &creds, step.flavor, step.action_bound).await.map_err(|e| site_err("unfence", site, &e))?;
    tracing::warn!(group = %group.name_any(), site = %site, "old primary made writable again after a failed drain");
    Ok(())
}

/// Promotes the decided target.
pub(crate) async fn promote(ctx: &Context, group: &MysqlFailoverGroup, step: &Step, site: &str) -> Result<(), Error> {
    step.refuse_foreign("promote", &[site, &step.target_spec.name])?;
    let creds = credentials(ctx, &step.target_spec).await?;
    let at = ProbeTarget { host: step.target_spec.host.clone(), port: step.target_spec.port };
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let semi_sync = (step.policy.semi_sync && step.tgt.as_ref().is_some_and(|t| t.semi_sync.is_some()))
        .then(|| statements::semi_sync_timeout_ms(step.policy.semi_sync_server_timeout_seconds));
    actions::promote(&at, &creds, step.flavor, semi_sync, step.action_bound)
        .await
        .map_err(|e| site_err("promote", site, &e))?;
    tracing::info!(group = %group.name_any(), site = %site, "promoted");
    ctx.failpoint.hit(&format!("{}-after-promote", step.failpoints));
    Ok(())
}

/// Repoints the old primary at the new one.
pub(crate) async fn repoint(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    step: &Step,
    site: &str,
    new_primary: &str,
) -> Result<(), Error> {
    step.refuse_foreign("repoint", &[site, &step.target_spec.name])?;
    let Some(spec) = group.site(site).cloned() else { return Ok(()) };
    let creds = credentials(ctx, &spec).await?;
    let repl = sites::read_replication_credentials(&step.target_spec, ctx).await.map_err(|f| Error::Site {
        action: "read replication credentials for",
        site: site.to_owned(),
        message: f.message,
    })?;
    let at = ProbeTarget { host: spec.host.clone(), port: spec.port };
    let from = Source {
        host: step.target_spec.host.clone(),
        port: step.target_spec.port,
        user: repl.username.clone(),
        password: repl.password.clone(),
    };
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    actions::repoint(&at, &creds, step.flavor, &from, step.action_bound)
        .await
        .map_err(|e| site_err("repoint", site, &e))?;
    tracing::info!(group = %group.name_any(), site = %site, source = %new_primary, "repointed");
    ctx.failpoint.hit(&format!("{}-after-repoint", step.failpoints));
    Ok(())
}

/// A deploy-lease call of the drive, bounded by the group's probe timeout:
/// the drive runs before the safety paths in a reconcile, and a slow lease
/// store must not delay an emergency failover (an error here ends the
/// drive, and the reconcile goes on to the safety paths).
pub(crate) async fn bounded<T>(
    group: &MysqlFailoverGroup,
    action: &'static str,
    call: impl std::future::Future<Output = Result<T, crate::lease::service::ServiceError>>,
) -> Result<T, Error> {
    let bound = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    let answer = match tokio::time::timeout(bound, call).await {
        Ok(answer) => answer.map_err(LeaseError::from),
        Err(_) => Err(LeaseError::Timeout { seconds: bound.as_secs() }),
    };
    answer.map_err(Error::leases(action))
}

/// Reports accounts that can write through `read_only` on `site` (MariaDB
/// `READ_ONLY ADMIN`, or `SUPER` before 10.11; themselves, through roles or
/// `PUBLIC`) other than the exact one the operator is connected as, right
/// before the fence: a Warning Event, and a fresh check for the
/// `ReadOnlyBypassAccounts` condition. The fence ends their sessions anyway.
pub(crate) async fn report_bypass(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    site: &str,
    target: &ProbeTarget,
    creds: &crate::mysql::Credentials,
    step: &Step,
) {
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    match actions::read_only_bypass(target, creds, step.flavor, &step.version, timeout).await {
        Ok(found) => {
            ctx.groups.bypass.store(&group.uid().unwrap_or_default(), site, found.clone());
            if found.accounts.is_empty() {
                return;
            }
            let shown: Vec<String> =
                found.accounts.iter().take(10).map(|a| bloodraven_serving::log::escape(a, 80)).collect();
            publish(
                ctx,
                group,
                EventType::Warning,
                reason::READ_ONLY_ADMIN_ACCOUNTS,
                format!(
                    "on site {site}, {} can write through read_only (READ_ONLY ADMIN, or SUPER before MariaDB 10.11); the fence ends their sessions, but application and migration accounts should not hold these privileges",
                    shown.join(", ")
                ),
                "Fence",
                None,
            )
            .await;
        }
        Err(err) => {
            tracing::debug!(site, error = %crate::mysql::classify(&err).1, "could not list read_only bypass accounts");
        }
    }
}

/// Whether `target` may be promoted by a planned failover: what the replica
/// check found of it (errant transactions, a stall) refuses it before
/// anything this probe shows, since both come from rounds a single probe
/// cannot replace; then [`target_readiness`].
pub(crate) fn admissible(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    source: &str,
    source_obs: Option<&SiteObservation>,
    target: &str,
    probes: &[SiteProbe],
) -> Result<(), String> {
    if let Some(problem) = crate::controller::failover_group::replicas::known_problem(ctx, group, target) {
        return Err(problem);
    }
    target_readiness(group.spec.failover.max_lag_seconds, source, source_obs, target, probes)
}

/// Waits one slice (`slice`, from the drain's bound) for the target to
/// apply the old primary's position. `false`: not yet, and the bound has not
/// run out (wait again next round); `true`: the wait is over, caught up or
/// not ([`Local::caught_up`]).
pub(crate) async fn catch_up(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    local: &mut Local,
    step: &Step,
    site: &str,
    slice: Slice,
) -> Result<bool, Error> {
    step.refuse_foreign("catch up", &[&step.source, &step.target_spec.name])?;
    let creds = credentials(ctx, &step.source_spec).await?;
    let at = ProbeTarget { host: step.source_spec.host.clone(), port: step.source_spec.port };
    let positions = actions::positions(&at, &creds, step.flavor, step.action_bound)
        .await
        .map_err(|e| site_err("read the GTID position of", &step.source, &e))?;
    let tcreds = credentials(ctx, &step.target_spec).await?;
    let tat = ProbeTarget { host: step.target_spec.host.clone(), port: step.target_spec.port };
    // A target that cannot be asked is one that did not catch up:
    // the old primary is made writable again and the request fails,
    // rather than leaving it fenced while the wait is retried.
    let reached = match actions::catch_up(&tat, &tcreds, step.flavor, &positions.binlog, slice.wait).await {
        Ok(reached) => reached,
        Err(e) => {
            let (_, message) = crate::mysql::classify(&e);
            tracing::warn!(group = %group.name_any(), site = %site, error = %message, "catch-up failed");
            false
        }
    };
    if !reached && !slice.last {
        tracing::debug!(group = %group.name_any(), site = %site, "catching up; waiting again");
        return Ok(false);
    }
    local.caught_up = Some(reached);
    ctx.failpoint.hit(&format!("{}-after-catch-up", step.failpoints));
    local.promotion_position = Some(positions.binlog);
    Ok(true)
}

/// The decision of a switchover, by `what` (for the Event: "planned
/// failover r1"): `site` becomes the active site at the next generation
/// (record, then status), and every deploy lease is revoked. `None`: the
/// decision record no longer shows the source as active, and nothing was
/// decided (the caller fails its request).
pub(crate) async fn decide(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
    local: &Local,
    step: &Step,
    site: &str,
    what: &str,
) -> Result<Option<MysqlFailoverGroup>, Error> {
    let Some(rec) = round.reread(ctx).await?.cloned() else {
        return Err(Error::Site {
            action: "decide for",
            site: site.to_owned(),
            message: "the decision record is gone".into(),
        });
    };
    if rec.tampered.is_some() || rec.active_site != step.source {
        return Ok(None);
    }
    let mut extra = rec.extra();
    extra.promotion_position = local.promotion_position.clone().or(step.tgt.as_ref().map(|o| o.gtid_position.clone()));
    if let Some(request) = &step.reclone {
        let (site, generation) = (step.source.clone(), rec.generation + 1);
        extra.site_hold = Some(record::SiteHold::Reclone { site, generation, request: request.clone() });
    }
    let decided = decision::decide(ctx, round, group, site, &extra, None).await?;
    ctx.failpoint.hit(&format!("{}-after-decide", step.failpoints));
    let generation = rec.generation + 1;
    tracing::info!(group = %group.name_any(), site = %site, generation, operation = %what, "switchover decided");
    publish(
        ctx,
        &decided,
        EventType::Normal,
        "ActiveSiteChanged",
        format!(
            "{what}: {site} is the active site at topologyGeneration {generation} (was {}); every deploy lease of the group is revoked",
            step.source
        ),
        "Decide",
        None,
    )
    .await;
    ctx.metrics.topology_generation.with_label_values(&[&group.name_any()]).set(generation);
    // The generation already revokes every lease (a renewal compares
    // it); the tombstones and Events may wait for the next round.
    deploy_leases::maintain_after_decision(ctx, &decided).await;
    Ok(Some(decided))
}

/// The admission check of a request (`request_id`): the live failover-hold
/// that defers it; `None` admits and fences the hold slot
/// (`lease::Service::admit`), so no hold is granted between the check and
/// the drain.
pub(crate) async fn admit(ctx: &Context, group: &MysqlFailoverGroup, request_id: &str) -> Result<Option<Grant>, Error> {
    if !ctx.deploy_api {
        return Ok(None);
    }
    let marker = format!("{request_id}@{}", k8s_openapi::jiff::Timestamp::now());
    bounded(group, "admit the request", ctx.leases.admit(&group.name_any(), &marker)).await
}
