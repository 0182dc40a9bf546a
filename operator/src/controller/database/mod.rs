//! The MysqlDatabase reconciler (leader only): reports in a `Ready`
//! condition whether the database has authority on its group
//! (`crate::authority`): the group exists, the group allows the database's
//! namespace, and no older MysqlDatabase of the same name on the group
//! speaks for the name. So a typo, a namespace the group does not accept,
//! or a name someone else holds shows up before a deploy pipeline is
//! refused; a refusal of the last two also gets a Warning Event on the
//! database. Woken by changes of the database, of any group, of any
//! namespace's labels, and of same-named databases.

use std::sync::Arc;
use std::time::Duration;

use bloodraven_api::names::OBSERVER_FIELD_MANAGER;
use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup, reason};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Config as WatcherConfig;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::conditions::{Computed, materialize};
use super::{Ctx, Error, kube_err};
use crate::authority::{self, Standing};

const CONTROLLER: &str = "database";
/// Re-check period, in case a group event was missed.
const RECHECK: Duration = Duration::from_secs(60);

/// Runs the controller until `shutdown` resolves.
pub async fn run(ctx: Ctx, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let databases: Api<MysqlDatabase> = Api::all(ctx.client.clone());
    let groups: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let controller = Controller::new(databases.clone(), WatcherConfig::default());
    let store = controller.store();
    let by_group = store.clone();
    let by_namespace = store.clone();
    let by_name = store.clone();
    let namespaces = kube::runtime::watcher(
        Api::<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>::all(ctx.client.clone()),
        WatcherConfig::default(),
    )
    .default_backoff()
    .touched_objects();
    controller
        .watches(groups, WatcherConfig::default(), move |group| {
            let name = group.name_any();
            refs(&by_group, |db| db.spec.failover_group_ref.name == name)
        })
        .watches_stream(namespaces, move |ns| {
            let name = ns.name_any();
            refs(&by_namespace, |db| db.namespace().as_deref() == Some(name.as_str()))
        })
        // A same-named database appearing or going changes who holds the name.
        .watches(databases, WatcherConfig::default(), move |changed| {
            let (name, group) = (changed.name_any(), changed.spec.failover_group_ref.name.clone());
            refs(&by_name, |db| db.name_any() == name && db.spec.failover_group_ref.name == group)
        })
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

fn refs(
    store: &kube::runtime::reflector::Store<MysqlDatabase>,
    keep: impl Fn(&MysqlDatabase) -> bool,
) -> Vec<ObjectRef<MysqlDatabase>> {
    store.state().into_iter().filter(|db| keep(db)).map(|db| ObjectRef::from_obj(&*db)).collect()
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
    let groups: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let group = groups.get_opt(group_name).await.map_err(kube_err("read the failover group"))?;
    let all = ctx.authority.databases.state();
    let standing =
        authority::standing(&db, group.as_ref(), all.iter().map(AsRef::as_ref), |ns| ctx.authority.labels(ns));
    let computed = match &standing {
        Standing::Authoritative => Computed::flag(
            "Ready",
            true,
            reason::GROUP_FOUND,
            format!(
                "failover group {group_name} exists and accepts this database; its deploymentClients may take deploy leases for instance {name}"
            ),
        ),
        Standing::GroupNotFound => Computed::flag(
            "Ready",
            false,
            reason::GROUP_NOT_FOUND,
            format!("failover group {group_name} does not exist; fix spec.failoverGroupRef.name or create the group"),
        ),
        Standing::NamespaceNotAllowed => Computed::flag(
            "Ready",
            false,
            reason::NAMESPACE_NOT_ALLOWED,
            format!(
                "failover group {group_name} does not accept MysqlDatabases from namespace {namespace} (spec.allowedDatabases.namespaces); this database grants no deploy-API authority until a cluster admin allows the namespace"
            ),
        ),
        Standing::NameConflict { namespace: holder } => Computed::flag(
            "Ready",
            false,
            reason::NAME_CONFLICT,
            format!(
                "the older MysqlDatabase {holder}/{name} already speaks for instance {name} on failover group {group_name}; this one grants no deploy-API authority: rename it"
            ),
        ),
    };
    let previous = db.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    if previous.iter().any(|c| {
        c.type_ == computed.type_
            && c.status == computed.status
            && c.reason == computed.reason
            && c.message == computed.message
    }) && db.status.as_ref().and_then(|s| s.observed_generation) == db.meta().generation
    {
        return Ok(Action::requeue(RECHECK));
    }
    let changed_reason = !previous.iter().any(|c| c.type_ == computed.type_ && c.reason == computed.reason);
    if changed_reason && matches!(standing, Standing::NamespaceNotAllowed | Standing::NameConflict { .. }) {
        let event = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: computed.reason.to_owned(),
            note: Some(computed.message.clone()),
            action: "Authorize".to_owned(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&event, &db.object_ref(&())).await {
            tracing::warn!(database = %name, namespace = %namespace, error = %err, "failed to publish an event");
        }
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
