//! The MysqlDatabase reconciler (leader only): reports in a `Ready`
//! condition whether the referenced MysqlFailoverGroup exists, so a typo in
//! `spec.failoverGroupRef.name` shows up before a deploy pipeline is refused.
//! Woken by changes of the database and by creation or deletion of any group.

use std::sync::Arc;
use std::time::Duration;

use bloodraven_api::names::OBSERVER_FIELD_MANAGER;
use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup, reason};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::Config as WatcherConfig;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::conditions::{Computed, materialize};
use super::{Ctx, Error, kube_err};
use crate::tolerant::{Findings, ReadError};

const CONTROLLER: &str = "database";
/// Re-check period, in case a group event was missed.
const RECHECK: Duration = Duration::from_secs(60);

/// Runs the controller until `shutdown` resolves.
pub async fn run(ctx: Ctx, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    // Tolerant: a MysqlDatabase that does not decode is reported on itself
    // (condition + Event) and skipped; the others keep being served.
    let (reader, writer) = reflector::store();
    let databases = ctx
        .tolerant
        .watch::<MysqlDatabase>(WatcherConfig::default(), Some((writer, reader.clone())), Findings::Report)
        .applied_objects();
    // Groups only wake databases by name: a metadata watch, which decodes
    // whatever a group's spec holds (the failover-group controller reports
    // a group that does not decode).
    let groups = Api::<PartialObjectMeta<MysqlFailoverGroup>>::all(ctx.client.clone());
    let groups = watcher(groups, WatcherConfig::default()).default_backoff().touched_objects();
    let store = reader.clone();
    Controller::for_stream(databases, reader)
        .watches_stream(groups, move |group| {
            let name = group.name_any();
            store
                .state()
                .into_iter()
                .filter(|db| db.spec.failover_group_ref.name == name)
                .map(|db| ObjectRef::from_obj(&*db))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

#[allow(clippy::needless_pass_by_value)] // the signature kube's Controller::run requires
fn error_policy(db: Arc<MysqlDatabase>, err: &Error, ctx: Ctx) -> Action {
    ctx.metrics.reconcile_errors_total.with_label_values(&[CONTROLLER, err.reason()]).inc();
    tracing::warn!(database = %db.name_any(), reason = err.reason(), error = %err, "database reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(db: Arc<MysqlDatabase>, ctx: Ctx) -> Result<Action, Error> {
    ctx.metrics.reconcile_total.with_label_values(&[CONTROLLER]).inc();
    if !ctx.leadership.is_leader() {
        return Ok(Action::requeue(RECHECK));
    }
    let name = db.meta().name.clone().ok_or(Error::NoName)?;
    let namespace = db.namespace().ok_or(Error::NoName)?;
    let group_name = &db.spec.failover_group_ref.name;
    let computed = match ctx.tolerant.get::<MysqlFailoverGroup>(None, group_name).await {
        Ok(Some(_)) => {
            Computed::flag("Ready", true, reason::GROUP_FOUND, format!("failover group {group_name} exists"))
        }
        Ok(None) => Computed::flag(
            "Ready",
            false,
            reason::GROUP_NOT_FOUND,
            format!("failover group {group_name} does not exist; fix spec.failoverGroupRef.name or create the group"),
        ),
        Err(ReadError::Invalid(err)) => Computed::flag(
            "Ready",
            false,
            reason::GROUP_INVALID,
            format!("failover group {group_name} does not decode ({err}); see its InvalidObject condition"),
        ),
        Err(ReadError::Kube(err)) => return Err(kube_err("read the failover group")(err)),
    };
    let previous = db.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    if previous.iter().any(|c| c.type_ == computed.type_ && c.status == computed.status && c.reason == computed.reason)
        && db.status.as_ref().and_then(|s| s.observed_generation) == db.meta().generation
    {
        return Ok(Action::requeue(RECHECK));
    }
    let conditions = materialize(previous, &[computed], db.meta().generation, Timestamp::now());
    let patch = json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1",
        "kind": "MysqlDatabase",
        "status": { "conditions": conditions, "observedGeneration": db.meta().generation },
    });
    if !ctx.leadership.is_leader() {
        return Ok(Action::requeue(RECHECK));
    }
    let api: Api<MysqlDatabase> = Api::namespaced(ctx.client.clone(), &namespace);
    api.patch_status(&name, &PatchParams::apply(OBSERVER_FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(kube_err("write the database status"))?;
    Ok(Action::requeue(RECHECK))
}
