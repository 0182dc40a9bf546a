//! State bound to the group it belongs to. A group's deploy Leases,
//! tombstones, verification records and decision record carry its UID and
//! are deleted with it:
//!
//! - a finalizer (`bloodraven.shipstream.io/cleanup`), added by the leader
//!   on first sight, makes the deletion wait until the leader has removed
//!   them — whichever replica leads when the delete happens, and even if
//!   none is running at that moment (the group stays `Terminating` until
//!   one is);
//! - a sweep on every acquisition of leadership, and periodically while
//!   leading, deletes whatever a group of another UID left behind (a finalizer removed by hand, a group deleted
//!   before this version), and reads never take such leftovers as the
//!   current group's (`lease::store::GroupKey::owns`, `record::read`).

use std::collections::HashMap;

use bloodraven_api::names::GROUP_FINALIZER;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::{Api, Resource, ResourceExt};

use super::record;
use crate::controller::{Context, Ctx, Error, kube_err};
use crate::tolerant::ReadError;

fn has_finalizer(group: &MysqlFailoverGroup) -> bool {
    group.finalizers().iter().any(|f| f == GROUP_FINALIZER)
}

/// A JSON patch that adds or removes the finalizer, with a `test` of the
/// list as read, so a concurrent change of the list makes it fail (and the
/// next reconcile tries again) instead of clobbering someone's finalizer.
fn finalizer_patch(group: &impl Resource, add: bool) -> Result<json_patch::Patch, serde_json::Error> {
    let current = group.meta().finalizers.clone();
    let ops = match (add, current) {
        (true, None) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [GROUP_FINALIZER]},
        ]),
        (true, Some(list)) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": GROUP_FINALIZER},
        ]),
        (false, list) => {
            let list = list.unwrap_or_default();
            let index = list.iter().position(|f| f == GROUP_FINALIZER).unwrap_or(0);
            serde_json::json!([
                {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": GROUP_FINALIZER},
                {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
            ])
        }
    };
    serde_json::from_value(ops)
}

/// Patches the finalizer list; returns the group as written (`None` when
/// not leader, or when the group is gone).
async fn patch_finalizers(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    add: bool,
) -> Result<Option<MysqlFailoverGroup>, Error> {
    if !ctx.leadership.is_leader() {
        return Ok(None);
    }
    let patch =
        finalizer_patch(group, add).map_err(|source| Error::Patch { action: "change the finalizers", source })?;
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    match api.patch(&group.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch)).await {
        Ok(written) => Ok(Some(written)),
        // Gone already: nothing to hold.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(err) => Err(kube_err("update the group's finalizers")(err)),
    }
}

/// Adds the finalizer to a live group that lacks it (leader only), and
/// returns the group as it now is: the reconcile goes on with the new
/// resourceVersion, so its decision write is not refused for a change the
/// operator made itself.
pub(crate) async fn ensure_finalizer(
    ctx: &Context,
    group: std::sync::Arc<MysqlFailoverGroup>,
) -> Result<std::sync::Arc<MysqlFailoverGroup>, Error> {
    if has_finalizer(&group) {
        return Ok(group);
    }
    Ok(patch_finalizers(ctx, &group, true).await?.map_or(group, std::sync::Arc::new))
}

/// A group being deleted: deletes everything tied to it, then lets it go
/// (leader only; a failure leaves the finalizer for the next attempt).
pub(crate) async fn finalize(ctx: &Context, group: &MysqlFailoverGroup) -> Result<(), Error> {
    if !has_finalizer(group) || !ctx.leadership.is_leader() {
        return Ok(());
    }
    let name = group.name_any();
    // What a person still owed the group goes with it: say so, once, first.
    let key = crate::lease::store::GroupKey::of(group);
    let pending =
        ctx.leases.verifications(&key).await.map_err(|e| Error::leases("read the verification records")(e.into()))?;
    if !pending.is_empty() {
        let ops: Vec<String> = pending
            .iter()
            .map(|p| format!("{} (instance {})", p.verification.operation_id, p.verification.instance))
            .collect();
        let note = format!(
            "group deleted with schema verifications still pending for {}: verify those schemas by hand",
            ops.join(", ")
        );
        super::publish(
            ctx,
            group,
            kube::runtime::events::EventType::Warning,
            "SchemaVerificationDiscarded",
            note,
            "Finalize",
            None,
        )
        .await;
    }
    ctx.leases.forget_group(&name).await.map_err(|e| Error::leases("delete the group's deploy leases")(e.into()))?;
    if let Some(uid) = group.meta().uid.as_deref() {
        ctx.groups.bypass.forget(uid);
        ctx.groups.unswept.forget(uid);
        ctx.groups.missed.forget(uid);
        ctx.groups.replicas.forget(uid);
        ctx.groups.semi_sync.forget(uid);
    }
    let records: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    ctx.groups.records.delete(&records, &name).await;
    tracing::info!(group = %name, "group deleted: its deploy leases, tombstones, verification records and decision record are gone");
    patch_finalizers(ctx, group, false).await.map(drop)
}

/// Deletes every deploy Lease and decision record whose group no longer
/// exists with the UID it records. Needs every group of the cluster, not
/// only this operator's shard, so it lists them (metadata only: an object
/// that no longer decodes cannot stop it).
pub(crate) async fn sweep(ctx: &Context) -> Result<(usize, usize), Error> {
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    // Objects created after this instant may belong to a group the list misses.
    let listed_at = k8s_openapi::jiff::Timestamp::now();
    let list = api.list_metadata(&ListParams::default()).await.map_err(kube_err("list failover groups"))?;
    let live: HashMap<String, String> =
        list.items.iter().filter_map(|g| Some((g.metadata.name.clone()?, g.metadata.uid.clone()?))).collect();
    let leases = ctx
        .leases
        .sweep(&live, listed_at)
        .await
        .map_err(|e| Error::leases("sweep deploy leases of deleted groups")(e.into()))?;
    let records: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    // A group deleted while it does not decode never reaches the reconciler,
    // which runs the finalizer: finish its deletion here.
    for g in list.items.iter().filter(|g| g.metadata.deletion_timestamp.is_some() && has_finalizer_meta(g)) {
        let Some(name) = g.metadata.name.as_deref() else { continue };
        if matches!(ctx.tolerant.get::<MysqlFailoverGroup>(None, name).await, Err(ReadError::Invalid(_))) {
            finalize_unreadable(ctx, &records, g).await?;
        }
    }
    let records = record::sweep(&records, &live, listed_at).await?;
    Ok((leases, records))
}

fn has_finalizer_meta(g: &PartialObjectMeta<MysqlFailoverGroup>) -> bool {
    g.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == GROUP_FINALIZER))
}

/// Cleans up after a group that is being deleted but does not decode, by
/// its name, and removes the finalizer (leader only).
async fn finalize_unreadable(
    ctx: &Context,
    records: &Api<ConfigMap>,
    group: &PartialObjectMeta<MysqlFailoverGroup>,
) -> Result<(), Error> {
    let Some(name) = group.metadata.name.as_deref() else { return Ok(()) };
    if !ctx.leadership.is_leader() {
        return Ok(());
    }
    ctx.leases.forget_group(name).await.map_err(|e| Error::leases("delete the group's deploy leases")(e.into()))?;
    ctx.groups.records.delete(records, name).await;
    let patch =
        finalizer_patch(group, false).map_err(|source| Error::Patch { action: "remove the finalizer", source })?;
    let api: Api<PartialObjectMeta<MysqlFailoverGroup>> = Api::all(ctx.client.clone());
    match api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(err) => return Err(kube_err("remove the finalizer of an unreadable group")(err)),
    }
    tracing::info!(group = name, "an unreadable group was deleted: its stored state is gone and its finalizer removed");
    Ok(())
}

/// How often the leader sweeps after the sweep at acquisition. Objects
/// younger than a sweep's group list are left to the next one, so leftovers
/// of a group deleted just before an operator started go within this period.
const SWEEP_PERIOD: std::time::Duration = std::time::Duration::from_secs(30);

/// Sweeps each time this process becomes the leader, then every
/// [`SWEEP_PERIOD`] while it leads.
pub(crate) async fn sweep_while_leading(ctx: Ctx) {
    let mut acquisitions = Box::pin(ctx.leadership.acquisitions());
    while acquisitions.next().await.is_some() {
        while ctx.leadership.is_leader() {
            match sweep(&ctx).await {
                Ok((0, 0)) => {}
                Ok((leases, records)) => {
                    tracing::info!(leases, records, "swept state left by deleted groups");
                }
                Err(err) => tracing::warn!(error = %err, "failed to sweep state left by deleted groups"),
            }
            tokio::time::sleep(SWEEP_PERIOD).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(finalizers: Option<Vec<&str>>) -> MysqlFailoverGroup {
        let spec = serde_json::from_value(serde_json::json!({"sites": [], "initialActiveSite": "iad"})).unwrap();
        let mut g = MysqlFailoverGroup::new("g", spec);
        g.metadata.finalizers = finalizers.map(|l| l.into_iter().map(str::to_owned).collect());
        g
    }

    fn apply(g: &MysqlFailoverGroup, add: bool) -> Result<serde_json::Value, json_patch::PatchError> {
        let mut doc = serde_json::to_value(g).unwrap();
        // The API server's JSON patch (evanphx/json-patch) takes a missing
        // member as null in a `test`, as kube-runtime's finalizer helper
        // relies on; this crate does not, so the test document spells it out.
        if doc["metadata"].get("finalizers").is_none() {
            doc["metadata"]["finalizers"] = serde_json::Value::Null;
        }
        json_patch::patch(&mut doc, &finalizer_patch(g, add).unwrap())?;
        Ok(doc["metadata"]["finalizers"].clone())
    }

    #[test]
    fn the_finalizer_is_added_and_removed_without_touching_others() {
        assert_eq!(apply(&group(None), true).unwrap(), serde_json::json!([GROUP_FINALIZER]));
        assert_eq!(
            apply(&group(Some(vec!["other/x"])), true).unwrap(),
            serde_json::json!(["other/x", GROUP_FINALIZER])
        );
        assert_eq!(
            apply(&group(Some(vec!["other/x", GROUP_FINALIZER, "other/y"])), false).unwrap(),
            serde_json::json!(["other/x", "other/y"])
        );
    }

    #[test]
    fn a_list_changed_since_the_read_fails_the_patch() {
        let read = group(Some(vec!["other/x"]));
        let patch = finalizer_patch(&read, true).unwrap();
        let mut now = serde_json::to_value(group(Some(vec!["other/x", "other/y"]))).unwrap();
        assert!(json_patch::patch(&mut now, &patch).is_err());
    }
}
