//! What a round reports: the conditions of the operations (planned
//! failover, recovery, diverged sites), the observation write (health,
//! conditions, `stable`, `unstableReason`; the one writer of the last two
//! besides the engine's `stable: false` when a request starts), the
//! group's metrics, and an Event per condition that changed.

use crate::controller::Context;
use crate::controller::Error;
use crate::controller::conditions::Computed;
use crate::controller::conditions::materialize;
use crate::controller::conditions::transitions;
use crate::controller::kube_err;
use bloodraven_api::names::OBSERVER_FIELD_MANAGER;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::SiteHealth;
use bloodraven_api::v1alpha1::reason;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::Resource;
use kube::ResourceExt;
use kube::api::Patch;
use kube::api::PatchParams;
use kube::runtime::events::Event;
use kube::runtime::events::EventType;
use serde_json::json;

use super::{Assessment, MAX_EVENT_NOTE, Operations, SiteProbe, decision, identity, observed, replicas};

/// `SiteDiverged`: the returning sites rejoin left fenced (`returning`,
/// site → clause) and the sites the replica check found with errant
/// transactions, this round or (not compared this round) at the last one
/// (`status.health[].errantGtids`).
pub(super) fn diverged_condition(
    active: &str,
    returning: &std::collections::BTreeMap<String, String>,
    checked: &replicas::Checked,
    group: &MysqlFailoverGroup,
) -> Computed {
    use bloodraven_api::v1alpha1::ConditionType as T;
    let mut clauses = returning.clone();
    let health = group.status.as_ref().map(|s| s.health.as_slice()).unwrap_or_default();
    for site in group.spec.sites.iter().map(|s| s.name.as_str()).filter(|s| *s != active) {
        if clauses.contains_key(site) {
            continue;
        }
        let clause = match checked.errant.get(site) {
            Some(Some(e)) => Some(replicas::diverged_message(site, active, e)),
            Some(None) => None,
            None => health.iter().find(|h| h.site == site).and_then(|h| h.errant_gtids.as_ref()).map(|g| {
                format!("site {site} held transactions the active site {active} lacked when they were last compared (errant GTIDs {g}); it is never a failover target until a person reconciles it")
            }),
        };
        if let Some(clause) = clause {
            clauses.insert(site.to_owned(), clause);
        }
    }
    if clauses.is_empty() {
        Computed::flag(
            T::SiteDiverged.as_str(),
            false,
            reason::AS_EXPECTED,
            "no site holds transactions the active site lacks",
        )
    } else {
        Computed::flag(
            T::SiteDiverged.as_str(),
            true,
            reason::ERRANT_TRANSACTIONS,
            clauses.into_values().collect::<Vec<_>>().join("; "),
        )
    }
}

/// Adds the conditions of operations (planned failover, recovery after a
/// decision, diverged sites, decision conflicts) and lets a running
/// operation make the group unstable.
pub(super) fn operation_conditions(
    assessment: &mut Assessment,
    planned: &Operations,
    recovery: Option<&(&'static str, String)>,
    diverged: Option<&Computed>,
    resolution: &decision::Resolution,
) {
    use bloodraven_api::v1alpha1::ConditionType as T;
    let held = if planned.holds_automatic_failover() {
        Computed::flag(T::AutomaticFailoverHeld.as_str(), true, reason::OPERATION_IN_PROGRESS, planned.hold_message())
    } else {
        Computed::flag(
            T::AutomaticFailoverHeld.as_str(),
            false,
            reason::AS_EXPECTED,
            "no planned failover or switchover is draining and no Job runs on a standby; automatic failover is not held",
        )
    };
    let recovering = match (recovery, planned.recovering()) {
        (Some((r, m)), _) => Computed::flag(T::RecoveryPending.as_str(), true, r, m.clone()),
        (None, true) => Computed::flag(
            T::RecoveryPending.as_str(),
            true,
            reason::OPERATION_IN_PROGRESS,
            "a switchover is decided; promotion and repointing are under way",
        ),
        (None, false) => Computed::flag(T::RecoveryPending.as_str(), false, reason::AS_EXPECTED, "nothing is pending"),
    };
    let conflict = match resolution {
        decision::Resolution::Conflict(why) => {
            Computed::flag(T::DecisionConflict.as_str(), true, reason::DECISION_RECORD_MISMATCH, why.clone())
        }
        _ => Computed::flag(T::DecisionConflict.as_str(), false, reason::AS_EXPECTED, "the decision record verifies"),
    };
    let diverged = diverged.cloned().unwrap_or_else(|| {
        Computed::flag(T::SiteDiverged.as_str(), false, reason::AS_EXPECTED, "no site is known to have diverged")
    });
    // A site that is not a failover target is not a ready standby.
    if diverged.is_true()
        && let Some(ready) = assessment.conditions.iter_mut().find(|c| c.type_ == T::Ready.as_str() && c.is_true())
    {
        *ready = Computed::flag(T::Ready.as_str(), false, diverged.reason, diverged.message.clone());
    }
    let reclone = match planned.restore.reclone_site() {
        Some(old) => Computed::flag(
            T::RecloneRequired.as_str(),
            true,
            reason::RESTORED_IN_PLACE,
            format!(
                "a restore-in-place replaced the primary; {old}'s data predates it: {old} stays fenced, out of replication and is never promoted until a person re-clones it and annotates the group {}=<site>@<topologyGeneration> (see status.restoreInPlace)",
                bloodraven_api::names::RECLONE_DONE_ANNOTATION
            ),
        ),
        None => match &planned.unrestored {
            Some(why) => Computed::flag(T::RecloneRequired.as_str(), true, reason::RESTORE_FAILED, why.clone()),
            None => {
                Computed::flag(T::RecloneRequired.as_str(), false, reason::AS_EXPECTED, "no site awaits a re-clone")
            }
        },
    };
    let unstable = if planned.running() {
        Some(reason::OPERATION_IN_PROGRESS.to_owned())
    } else if reclone.is_true() {
        // The old primary is out of replication on purpose: what a person
        // does about it is the re-clone, not a repoint.
        Some(T::RecloneRequired.as_str().to_owned())
    } else if recovering.is_true() {
        Some(T::RecoveryPending.as_str().to_owned())
    } else if conflict.is_true() {
        Some(T::DecisionConflict.as_str().to_owned())
    } else {
        None
    };
    if let Some(why) = unstable {
        assessment.stable = false;
        // A problem condition found by the probes explains more than a
        // running operation; but a re-clone explains the old primary's
        // replication being off.
        let reclone_explains =
            reclone.is_true() && assessment.unstable_reason.as_deref() == Some(T::ReplicationNotRunning.as_str());
        if assessment.unstable_reason.is_none() || planned.running() || reclone_explains {
            assessment.unstable_reason = Some(why);
        }
    }
    assessment.conditions.extend([recovering, held, diverged, conflict, reclone]);
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn write_observation(
    api: &Api<MysqlFailoverGroup>,
    name: &str,
    group: &MysqlFailoverGroup,
    ctx: &Context,
    computed: &[Computed],
    stable: bool,
    unstable_reason: Option<String>,
    health: Vec<SiteHealth>,
) -> Result<(), Error> {
    let previous = group.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let now = Timestamp::now();
    let conditions = materialize(previous, computed, group.meta().generation, now);
    let next = observed::Observation {
        stable,
        unstable_reason: unstable_reason.as_deref(),
        observed_generation: group.meta().generation,
        conditions: &conditions,
        health: &health,
    };
    // Nothing a reader acts on changed: the stored status already reports
    // this probe (see `observed`).
    if !observed::must_write(group.status.as_ref(), &next) {
        ctx.metrics.status_writes_total.with_label_values(&["unchanged"]).inc();
        return Ok(());
    }
    let mut status = json!({
        "stable": stable,
        "health": health,
        "conditions": conditions,
        "observedGeneration": group.meta().generation,
    });
    // Left out when stable: server-side apply then removes the field this
    // manager set before, instead of storing a null. It does not remove a
    // value set by a merge patch (`mark_operation_in_progress`, under this
    // manager's name but another operation; or an older operator's engine
    // manager), so that one is removed by a merge patch first: written after, a reader
    // would see `stable: true` beside a reason in between; written first, it
    // sees an unstable group without a reason for a moment, which claims
    // nothing false.
    let stale_reason = unstable_reason.is_none() && group.status.as_ref().is_some_and(|s| s.unstable_reason.is_some());
    if let Some(reason) = unstable_reason {
        status["unstableReason"] = json!(reason);
    }
    let patch = json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1",
        "kind": "MysqlFailoverGroup",
        "status": status,
    });
    if !ctx.leadership.is_leader() {
        return Ok(());
    }
    if stale_reason {
        let clear = json!({ "status": { "unstableReason": null } });
        let params = PatchParams { field_manager: Some(OBSERVER_FIELD_MANAGER.into()), ..PatchParams::default() };
        match api.patch_status(name, &params, &Patch::Merge(&clear)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(err) => return Err(kube_err("clear the unstable reason")(err)),
        }
    }
    match api.patch_status(name, &PatchParams::apply(OBSERVER_FIELD_MANAGER).force(), &Patch::Apply(&patch)).await {
        Ok(_) => {
            ctx.metrics.status_writes_total.with_label_values(&["written"]).inc();
            Ok(())
        }
        // Deleted while it was being probed: nothing to report.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(err) => Err(kube_err("write the observed status")(err)),
    }
}

/// Marks `group` unstable (`OperationInProgress`) the moment an operation
/// starts running, rather than at the end of the round: the operation may
/// fence a site before the round's observation is written, and `kubectl get`
/// or automation reading `status.stable` must not see `true` meanwhile. The
/// observer's field manager writes it, so `stable` and `unstableReason` keep
/// one writer. A merge patch with the resourceVersion of `group` (the phase
/// just written); returns the group as written. Nothing is written when
/// status already says so.
pub(crate) async fn mark_operation_in_progress(
    ctx: &Context,
    group: MysqlFailoverGroup,
) -> Result<MysqlFailoverGroup, Error> {
    let status = group.status.as_ref();
    if status
        .is_some_and(|s| s.stable == Some(false) && s.unstable_reason.as_deref() == Some(reason::OPERATION_IN_PROGRESS))
    {
        return Ok(group);
    }
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let patch = json!({
        "metadata": { "resourceVersion": group.resource_version() },
        "status": { "stable": false, "unstableReason": reason::OPERATION_IN_PROGRESS },
    });
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let params = PatchParams { field_manager: Some(OBSERVER_FIELD_MANAGER.into()), ..PatchParams::default() };
    api.patch_status(&group.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("mark the group unstable for an operation"))
}

/// The `host:port` of `site` in `spec`, as [`SiteHealth::answered_endpoint`] records it.
pub(crate) fn endpoint_of(spec: &bloodraven_api::v1alpha1::MysqlFailoverGroupSpec, site: &str) -> Option<String> {
    spec.sites.iter().find(|s| s.name == site).map(|s| format!("{}:{}", s.host, s.port))
}

/// Health from this round's probes; `previous` gives each unanswering
/// site's last `answeredEndpoint`, `ids` each site's known identity.
pub(super) fn health_of(
    spec: &bloodraven_api::v1alpha1::MysqlFailoverGroupSpec,
    ids: &std::collections::BTreeMap<String, u32>,
    previous: &[SiteHealth],
    probes: &[SiteProbe],
    checked: &replicas::Checked,
) -> Vec<SiteHealth> {
    let now = Some(Time(Timestamp::now()));
    let kept = |site: &str| previous.iter().find(|h| h.site == site).and_then(|h| h.answered_endpoint.clone());
    // The last position an unanswering site was seen with: what a leader
    // that takes over after the primary died knows of it.
    let last_seen = |site: &str| previous.iter().find(|h| h.site == site).and_then(|h| h.gtid_position.clone());
    // Compared this round, or the last verdict: errant transactions do not
    // go away because a site or the active one stopped answering.
    let errant = |site: &str| match checked.errant.get(site) {
        Some(verdict) => verdict.as_ref().map(|e| e.gtids.clone()),
        None => previous.iter().find(|h| h.site == site).and_then(|h| h.errant_gtids.clone()),
    };
    probes
        .iter()
        .map(|p| match &p.outcome {
            Ok(o) => SiteHealth {
                site: p.site.clone(),
                reachable: true,
                writable: Some(o.writable),
                replication_running: Some(
                    o.replication.as_ref().is_some_and(crate::mysql::ReplicationObservation::running),
                ),
                replication_lag_seconds: o.replication.as_ref().and_then(|r| r.lag_seconds),
                gtid_position: Some(o.gtid_position.clone()),
                source_server_id: o.replication.as_ref().and_then(|r| r.source_server_id),
                server_id: Some(o.server_id),
                version: Some(o.version.clone()),
                answered_endpoint: endpoint_of(spec, &p.site),
                identity: identity::learned(ids, p),
                errant_gtids: errant(&p.site),
                error_reason: None,
                message: None,
                last_probe_time: now.clone(),
            },
            Err(f) => SiteHealth {
                site: p.site.clone(),
                reachable: false,
                error_reason: Some(f.reason.to_owned()),
                message: Some(f.message.clone()),
                last_probe_time: now.clone(),
                answered_endpoint: kept(&p.site),
                gtid_position: last_seen(&p.site),
                identity: identity::learned(ids, p),
                errant_gtids: errant(&p.site),
                ..SiteHealth::default()
            },
        })
        .collect()
}

pub(super) fn record_metrics(
    ctx: &Context,
    group: &str,
    generation: Option<i64>,
    a: &Assessment,
    probes: &[SiteProbe],
) {
    let m = &ctx.metrics;
    if let Some(g) = generation {
        m.topology_generation.with_label_values(&[group]).set(g);
    }
    m.group_stable.with_label_values(&[group]).set(i64::from(a.stable));
    #[allow(clippy::cast_precision_loss)] // milliseconds since the epoch fit a f64 exactly
    let probed_at = Timestamp::now().as_millisecond() as f64 / 1000.0;
    for p in probes {
        let labels = [group, p.site.as_str()];
        m.site_up.with_label_values(&labels).set(i64::from(p.outcome.is_ok()));
        m.site_last_probe_timestamp_seconds.with_label_values(&labels).set(probed_at);
        let obs = p.outcome.as_ref().ok();
        m.site_writable.with_label_values(&labels).set(i64::from(obs.is_some_and(|o| o.writable)));
        match obs.and_then(|o| o.replication.as_ref()).and_then(|r| r.lag_seconds) {
            Some(lag) => m.replication_lag_seconds.with_label_values(&labels).set(lag as f64),
            None => {
                let _ = m.replication_lag_seconds.remove_label_values(&labels);
            }
        }
    }
}

/// One Event per condition that changed status: Warning when a problem
/// condition turns True (or Ready turns False), Normal when it clears.
pub(super) async fn announce(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    previous: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    computed: &[Computed],
) {
    for c in transitions(previous, computed) {
        // Announced per operation by `deploy_leases`, with the operation named.
        if c.type_ == bloodraven_api::v1alpha1::ConditionType::SchemaVerificationRequired.as_str() {
            continue;
        }
        let first_sight = !previous.iter().any(|p| p.type_ == c.type_);
        let problem = if c.type_ == "Ready" { !c.is_true() } else { c.status != "False" };
        if first_sight && !problem {
            // A condition appearing healthy on the first reconcile is not news.
            continue;
        }
        let type_ = if problem { EventType::Warning } else { EventType::Normal };
        let note = format!("{} is {}: {}", c.type_, c.status, c.message);
        // The action names the condition, so Events of different conditions
        // with one reason are not folded into one series.
        publish(ctx, group, type_, c.reason, note, c.type_, None).await;
    }
}

/// Publishes an Event about `group`, with `secondary` as the related object.
pub(crate) async fn publish(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    type_: EventType,
    reason: &str,
    note: String,
    action: &str,
    secondary: Option<k8s_openapi::api::core::v1::ObjectReference>,
) {
    if !ctx.leadership.is_leader() {
        return;
    }
    // The API server refuses a note over 1024 characters (and the Event with it).
    let note = if note.chars().count() > MAX_EVENT_NOTE {
        let mut cut: String = note.chars().take(MAX_EVENT_NOTE - 3).collect();
        cut.push_str("...");
        cut
    } else {
        note
    };
    let event = Event { type_, reason: reason.to_owned(), note: Some(note), action: action.to_owned(), secondary };
    if let Err(err) = ctx.recorder.publish(&event, &group.object_ref(&())).await {
        tracing::warn!(group = %group.name_any(), reason, error = %err, "failed to publish an event");
    }
}
