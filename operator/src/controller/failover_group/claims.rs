//! The group's instance claims (`status.instanceClaims`, see
//! `crate::authority`), written here only, for the whole group in one
//! patch per reconcile (`authority::claims_to_hold`): on each probe the
//! leader claims every unclaimed name an accepted MysqlDatabase wants,
//! within the group's bounds, drops a claim whose MysqlDatabase is gone
//! when nobody else wants the name, and hands a name over when a cluster
//! admin annotates the group with `release-instance=<instance>` (then
//! removes the annotation, with an Event).

use bloodraven_api::names::{CLAIMS_FIELD_MANAGER, RELEASE_INSTANCE_ANNOTATION};
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::publish;
use crate::authority::claims_to_hold;
use crate::controller::{Context, Error, kube_err};

/// Drops stale or released claims (leader only); returns the group as
/// last written, when it wrote (its resourceVersion moved, and the writes
/// that follow in the reconcile carry it).
pub(super) async fn maintain(ctx: &Context, group: &MysqlFailoverGroup) -> Result<Option<MysqlFailoverGroup>, Error> {
    if !ctx.leadership.is_leader() {
        return Ok(None);
    }
    let mut written = None;
    let name = group.name_any();
    let released = group.annotations().get(RELEASE_INSTANCE_ANNOTATION).map(|v| v.trim().to_owned());
    let all = ctx.authority.databases.state();
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    if let Some(claims) =
        claims_to_hold(group, all.iter().map(AsRef::as_ref), |ns| ctx.authority.labels(ns), released.as_deref())
    {
        let patch = json!({
            "metadata": { "resourceVersion": group.resource_version() },
            "status": { "instanceClaims": claims },
        });
        let params = PatchParams { field_manager: Some(CLAIMS_FIELD_MANAGER.into()), ..PatchParams::default() };
        written = Some(
            api.patch_status(&name, &params, &Patch::Merge(&patch))
                .await
                .map_err(kube_err("write the instance claims"))?,
        );
        tracing::info!(group = %name, released = released.as_deref().unwrap_or(""), "instance claims written");
    }
    if let Some(instance) = released {
        let note = format!(
            "a cluster admin released instance {instance}: the oldest accepted MysqlDatabase of that name claims it next"
        );
        publish(ctx, group, EventType::Normal, "InstanceReleased", note, "ReleaseInstance", None).await;
        let patch = json!({"metadata": {"annotations": {RELEASE_INSTANCE_ANNOTATION: null}}});
        written = Some(
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err("remove the release-instance annotation"))?,
        );
    }
    Ok(written)
}
