//! Keeps each MysqlDatabase's `<name>-primary` Service (and its
//! EndpointSlice) pointing at the group's decided active site, so
//! applications find the primary without reading status
//! (docs/connecting.md). Leader only. What the objects should be is
//! [`desired`]; this module reads, compares and writes.
//!
//! Invariants:
//! - The operator changes or deletes only objects carrying a controller
//!   ownerReference to the MysqlDatabase's UID. A same-named Service or
//!   EndpointSlice of anyone else is left untouched and reported
//!   (`PrimaryServiceConflict`). Updates carry the UID that was checked as
//!   a precondition (the API server answers 409 "uid mismatch" if the
//!   object was replaced meanwhile); creation is a server-side apply
//!   without `force`, so an object someone created a moment earlier makes
//!   it fail with a field conflict instead of being taken over.
//! - Nothing is written when the stored objects already match (compared
//!   with the label-selected watch caches): a reconcile with no change
//!   costs no API call.
//! - Without a target, and whenever the operator does not keep the Service
//!   (someone else's Service of the name, or ours that lost its
//!   ownerReference), its EndpointSlice is deleted, so a connection fails
//!   fast rather than reaching a former primary.
//! - Only the operator routes the Service: a field someone else added that
//!   can send traffic elsewhere (a `selector`, `externalIPs`, an extra port,
//!   a `loadBalancer*` field, …) is removed (server-side apply alone never
//!   removes another manager's field), with a Warning Event naming the
//!   fields and who set them. Removed before the condition is reported, so
//!   `PrimaryService=True` never stands beside them. What Kubernetes'
//!   controllers made to route the Service for such a selector is deleted
//!   too: the EndpointSlice controller's slices (it leaves them when a
//!   selector goes; controller ownerReference: our Service), and the
//!   `Endpoints` object of the Service's name that the Endpoints
//!   controller leaves behind, with the slices the mirroring controller
//!   makes of it (controller ownerReference: that object). They are the
//!   only objects the operator deletes that are not its own.

pub(super) mod desired;

use bloodraven_api::names::{PRIMARY_OF_LABEL, PRIMARY_SERVICE_FIELD_MANAGER};
use bloodraven_api::v1alpha1::reason;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use self::desired::{CONDITION, Owner, Plan, owned_by};
use crate::controller::conditions::Computed;
use crate::controller::{Context, Error, kube_err};

pub(super) use self::desired::Decided;

/// The watch caches of the operator's `-primary` objects (label
/// `bloodraven.shipstream.io/primary-of`).
#[derive(Clone)]
pub(super) struct Primary {
    /// `-primary` Services.
    pub services: Store<Service>,
    /// `-primary` EndpointSlices.
    pub slices: Store<EndpointSlice>,
    /// The EndpointSlice controller's slices (metadata): those made for a
    /// selector someone added to a `-primary` Service are deleted.
    pub selector_slices: Store<PartialObjectMeta<EndpointSlice>>,
}

impl std::fmt::Debug for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primary").finish_non_exhaustive()
    }
}

/// The label selector of the caches: objects carrying the `primary-of` label.
pub(super) fn selector() -> &'static str {
    PRIMARY_OF_LABEL
}

/// Where one object stands against the plan.
enum Found<K> {
    /// Ours (controller ownerReference to the database), as stored.
    Ours(K),
    /// Someone else's: never touched.
    Foreign,
    /// No such object.
    Absent,
}

/// The `PrimaryService` condition while the Service keeps its endpoint
/// (`with_service` names the Service): the active site has not answered as
/// itself at its spec endpoint, or answered read-only.
enum Unconfirmed {
    Endpoint { site: String, endpoint: String, observed: String },
    ReadOnly { site: String, generation: i64 },
}

impl Unconfirmed {
    fn with_service(self, service: &str) -> Computed {
        match self {
            Unconfirmed::Endpoint { site, endpoint, observed } => Computed::flag(
                CONDITION,
                false,
                reason::ACTIVE_SITE_ENDPOINT_UNCONFIRMED,
                format!(
                    "Service {service} keeps its endpoint: spec says active site {site} is at {endpoint}, but the last probe {observed}; it follows once the site answers there as itself (its known server_id, status.health[].identity). Check spec.sites for a typo or swapped addresses"
                ),
            ),
            Unconfirmed::ReadOnly { site, generation } => Computed::flag(
                CONDITION,
                false,
                reason::ACTIVE_SITE_NOT_WRITABLE,
                format!(
                    "Service {service} keeps its endpoint: active site {site} (topology generation {generation}) answered read-only at the last probe; it follows once the site answers writable (it is promoted right after its decision), so no reconnect reaches a new primary that still refuses writes. If it stays so, see the group's RecoveryPending and NoPrimary conditions"
                ),
            ),
        }
    }
}

/// Why the Service and its slice must stay as they are for `target`, if
/// they must: the decided site has not answered as itself at its spec
/// endpoint, or answered read-only (a decided site is promoted right after
/// its decision; routing to it before it answers writable would hand every
/// reconnecting client error 1290).
fn held_back(target: &Result<Decided<'_>, String>) -> Option<Unconfirmed> {
    target.as_ref().ok().filter(|d| d.unconfirmed || d.read_only).map(unconfirmed_condition)
}

fn unconfirmed_condition(d: &Decided<'_>) -> Unconfirmed {
    if !d.unconfirmed && d.read_only {
        return Unconfirmed::ReadOnly { site: d.site.name.clone(), generation: d.generation };
    }
    let observed = match d.observed {
        None => "has not been written for it yet".to_owned(),
        Some(h) => match (h.answered_endpoint.as_deref(), h.error_reason.as_deref()) {
            (Some(at), Some(why)) => format!("did not find it there ({why}; it last answered as itself at {at})"),
            (Some(at), None) => format!("found it at {at}"),
            (None, _) => "has not reached it yet".to_owned(),
        },
    };
    Unconfirmed::Endpoint { site: d.site.name.clone(), endpoint: format!("{}:{}", d.site.host, d.site.port), observed }
}

/// The object `name` in `namespace`: from the cache when it is ours there,
/// else read (a cache miss is either an object that does not carry our
/// label, or a cache that has not caught up).
async fn find<K>(api: &Api<K>, cache: &Store<K>, namespace: &str, name: &str, uid: &str) -> Result<Found<K>, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    if let Some(k) = cache.get(&ObjectRef::new(name).within(namespace))
        && owned_by(k.meta(), uid)
    {
        return Ok(Found::Ours((*k).clone()));
    }
    match api.get_opt(name).await.map_err(kube_err("read the primary Service or EndpointSlice"))? {
        Some(k) if owned_by(k.meta(), uid) => Ok(Found::Ours(k)),
        Some(_) => Ok(Found::Foreign),
        None => Ok(Found::Absent),
    }
}

/// Server-side applies `want` under the operator's field manager: over an
/// object of ours with its UID as precondition and `force` (fields someone
/// edited are taken back), or as a creation without `force`.
async fn apply<K>(ctx: &Context, api: &Api<K>, mut want: K, existing: Option<&ObjectMeta>) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if !ctx.leadership.is_leader() {
        return Ok(());
    }
    let mut params = PatchParams::apply(PRIMARY_SERVICE_FIELD_MANAGER);
    if let Some(meta) = existing {
        want.meta_mut().uid.clone_from(&meta.uid);
        params = params.force();
    }
    let name = want.meta().name.clone().unwrap_or_default();
    api.patch(&name, &params, &Patch::Apply(&want))
        .await
        .map_err(kube_err("apply the primary Service or EndpointSlice"))?;
    ctx.metrics.primary_service_writes_total.with_label_values(&[K::kind(&()).as_ref(), "apply"]).inc();
    Ok(())
}

/// Deletes the operator's own EndpointSlice `name` (by the cache: only an
/// object carrying our label and controller ownerReference), with its UID
/// as precondition; `true` when one was deleted.
async fn delete_own_slice(
    ctx: &Context,
    primary: &Primary,
    slices: &Api<EndpointSlice>,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<bool, Error> {
    let Some(have) = primary.slices.get(&ObjectRef::new(name).within(namespace)).filter(|s| owned_by(s.meta(), uid))
    else {
        return Ok(false);
    };
    if !ctx.leadership.is_leader() {
        return Ok(false);
    }
    delete_slice(ctx, slices, name, have.metadata.uid.clone(), "delete the primary EndpointSlice").await
}

/// Deletes EndpointSlice `name` with `uid` as precondition; `false` when it
/// was already gone or replaced (404, 409).
async fn delete_slice(
    ctx: &Context,
    slices: &Api<EndpointSlice>,
    name: &str,
    uid: Option<String>,
    what: &'static str,
) -> Result<bool, Error> {
    let params =
        DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..DeleteParams::default() };
    match slices.delete(name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return Ok(false),
        Err(err) => return Err(kube_err(what)(err)),
    }
    ctx.metrics.primary_service_writes_total.with_label_values(&["EndpointSlice", "delete"]).inc();
    Ok(true)
}

/// Removes what someone else wrote into our Service `have` that could route
/// traffic elsewhere ([`desired::stray_routing`]), as a merge patch fenced
/// by its UID and resourceVersion (a Service changed meanwhile is read
/// again on the next reconcile), and says so in a Warning Event naming the
/// fields and the field managers that set them.
async fn remove_stray_routing(
    ctx: &Context,
    services: &Api<Service>,
    db: &bloodraven_api::v1alpha1::MysqlDatabase,
    cached: &Service,
    want: &Service,
) -> Result<(), Error> {
    if !ctx.leadership.is_leader() {
        return Ok(());
    }
    // Read again: the cache keeps no managedFields (it names who set each
    // field), and the patch is fenced by the stored resourceVersion.
    let name = cached.metadata.name.clone().unwrap_or_default();
    let Some(have) = services
        .get_opt(&name)
        .await
        .map_err(kube_err("read the primary Service"))?
        .filter(|s| s.metadata.uid == cached.metadata.uid)
    else {
        return Ok(());
    };
    let have = &have;
    let Some((mut patch, fields)) = desired::stray_routing(have, want) else { return Ok(()) };
    let meta = patch["metadata"].as_object_mut().map(std::mem::take).unwrap_or_default();
    patch["metadata"] =
        serde_json::json!({"uid": have.metadata.uid, "resourceVersion": have.metadata.resource_version});
    for (key, value) in meta {
        patch["metadata"][key] = value;
    }
    services
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_err("remove routing fields from the primary Service"))?;
    ctx.metrics.primary_service_writes_total.with_label_values(&["Service", "remove-routing"]).inc();
    // Names a tenant chose: quoted, and a few of them only.
    let managers: Vec<String> = desired::managers_of(have, &fields)
        .iter()
        .take(5)
        .map(|m| format!("{:?}", m.chars().take(64).collect::<String>()))
        .collect();
    let by = if managers.is_empty() { String::new() } else { format!(" (set by {})", managers.join(", ")) };
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: reason::PRIMARY_SERVICE_TAMPERED.into(),
        note: Some(format!(
            "removed {} from Service {name}{by}: only the operator routes it; connect through it, or through a Service of your own",
            fields.join(", ")
        )),
        action: "PointPrimaryService".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &db.object_ref(&())).await {
        tracing::warn!(service = %name, error = %err, "failed to publish an event");
    }
    tracing::warn!(service = %name, fields = %fields.join(","), managers = %managers.join(","), "removed routing fields the operator does not set from the primary Service");
    Ok(())
}

/// The label selector of [`Primary::selector_slices`]: the slices of the
/// two controllers that route a Service on behalf of whoever edits it (the
/// EndpointSlice controller, for a selector; its mirroring controller, for
/// an `Endpoints` object of the Service's name).
pub(super) const CONTROLLER_SLICES: &str = "endpointslice.kubernetes.io/managed-by in (endpointslice-controller.k8s.io,endpointslicemirroring-controller.k8s.io)";

/// Who made a slice that routes our Service, and so what to delete.
enum Made {
    /// The EndpointSlice controller, for a selector (controller
    /// ownerReference: our Service): the slice.
    ForSelector,
    /// The mirroring controller, from the `Endpoints` object of the
    /// Service's name (controller ownerReference: that object, with this
    /// UID): the object, then the slice.
    Mirrored { endpoints_uid: Option<String> },
}

fn made_by(meta: &ObjectMeta, service: &str, service_uid: &str) -> Option<Made> {
    if owned_by(meta, service_uid) {
        return Some(Made::ForSelector);
    }
    let managed_by = meta.labels.as_ref()?.get("endpointslice.kubernetes.io/managed-by")?;
    let owner = meta.owner_references.iter().flatten().find(|o| o.controller == Some(true))?;
    (managed_by == "endpointslicemirroring-controller.k8s.io" && owner.kind == "Endpoints" && owner.name == service)
        .then(|| Made::Mirrored { endpoints_uid: Some(owner.uid.clone()) })
}

/// Deletes the slices Kubernetes' controllers made to route our Service
/// `service` (UID `service_uid`) in `namespace`, found in the cache of
/// theirs: those made for a selector someone added, and those mirrored
/// from an `Endpoints` object of the Service's name (the Endpoints
/// controller leaves one behind when such a selector goes), with that
/// object. Our Service has no selector, so no `Endpoints` object of its
/// name is anyone's but a leftover or a forgery. `true` when one was
/// deleted.
async fn delete_selector_slices(
    ctx: &Context,
    primary: &Primary,
    slices: &Api<EndpointSlice>,
    namespace: &str,
    service: &str,
    service_uid: &str,
) -> Result<bool, Error> {
    if !ctx.leadership.is_leader() || service_uid.is_empty() {
        return Ok(false);
    }
    let made: Vec<_> = primary
        .selector_slices
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/service-name")).map(String::as_str)
                    == Some(service)
        })
        .filter_map(|s| made_by(&s.metadata, service, service_uid).map(|m| (s, m)))
        .collect();
    let mut deleted = false;
    for (slice, made) in made {
        if let Made::Mirrored { endpoints_uid } = made {
            let endpoints: Api<Endpoints> = Api::namespaced(ctx.client.clone(), namespace);
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: endpoints_uid, resource_version: None }),
                ..DeleteParams::default()
            };
            match endpoints.delete(service, &params).await {
                Ok(_) => {
                    ctx.metrics.primary_service_writes_total.with_label_values(&["Endpoints", "delete"]).inc();
                    tracing::warn!(service = %service, namespace = %namespace, "deleted an Endpoints object of the primary Service's name, which the EndpointSlice mirroring controller routed");
                    deleted = true;
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(err) => return Err(kube_err("delete an Endpoints object of the primary Service's name")(err)),
            }
        }
        let name = slice.metadata.name.clone().unwrap_or_default();
        let uid = slice.metadata.uid.clone();
        if !delete_slice(ctx, slices, &name, uid, "delete an EndpointSlice made for the primary Service").await? {
            continue;
        }
        tracing::warn!(service = %service, namespace = %namespace, slice = %name, "deleted an EndpointSlice a Kubernetes controller made for the primary Service");
        deleted = true;
    }
    Ok(deleted)
}

fn headless(name: &str, namespace: &str) -> Computed {
    Computed::flag(
        CONDITION,
        false,
        reason::PRIMARY_SERVICE_CONFLICT,
        format!(
            "Service {name} in namespace {namespace} is headless (clusterIP: None), which the operator never makes and cannot undo (the field is immutable); it keeps no endpoint for it: delete the Service, and the operator creates it again"
        ),
    )
}

fn conflict(kind: &str, name: &str, namespace: &str) -> Computed {
    Computed::flag(
        CONDITION,
        false,
        reason::PRIMARY_SERVICE_CONFLICT,
        format!(
            "a {kind} {name} exists in namespace {namespace} that this MysqlDatabase does not own (no controller ownerReference to it); the operator leaves it alone and keeps no primary Service: delete or rename that {kind}, or rename this MysqlDatabase"
        ),
    )
}

/// Brings the `-primary` Service and EndpointSlice of `db` in line with
/// `target` (the decided site, or why there is none) and returns the
/// `PrimaryService` condition. Writes only as the leader and only what
/// differs. Errors: a failed read or write (retried by the controller).
#[allow(clippy::too_many_lines)] // the Service, then its EndpointSlice, each read, compared and written in order
pub(super) async fn keep(
    ctx: &Context,
    primary: &Primary,
    db: &bloodraven_api::v1alpha1::MysqlDatabase,
    target: Result<Decided<'_>, String>,
) -> Result<Computed, Error> {
    let (Some(name), Some(namespace), Some(uid)) = (&db.metadata.name, &db.metadata.namespace, &db.metadata.uid) else {
        return Err(Error::NoName);
    };
    let owner = Owner { name, namespace, uid };
    let site = target.as_ref().ok().map(|d| (d.site.name.clone(), d.generation));
    let unconfirmed = held_back(&target);
    let (service, create, slice, condition) = match desired::plan(owner, target) {
        Plan::NameInvalid(condition) => return Ok(condition),
        Plan::Keep { service, create, slice, condition } => (service, create, slice, condition),
    };
    let svc_name = service.metadata.name.clone().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), namespace);

    let have_service = match find(&services, &primary.services, namespace, &svc_name, uid).await? {
        Found::Foreign => {
            // Not ours (someone else's, or ours without its ownerReference):
            // our slice, still labelled with the Service's name, would keep
            // routing to whichever site it last named.
            delete_own_slice(ctx, primary, &slices, namespace, &svc_name, uid).await?;
            return Ok(conflict("Service", &svc_name, namespace));
        }
        // Made headless by whoever created it (an ownerReference to the
        // database is no proof of who did): not kept either.
        Found::Ours(have) if desired::headless_instead(&have, &service) => {
            delete_own_slice(ctx, primary, &slices, namespace, &svc_name, uid).await?;
            return Ok(headless(&svc_name, namespace));
        }
        found => found,
    };
    let have_slice = if slice.is_some() {
        match find(&slices, &primary.slices, namespace, &svc_name, uid).await? {
            Found::Foreign => return Ok(conflict("EndpointSlice", &svc_name, namespace)),
            found => found,
        }
    } else {
        // Nothing to write, only ours to delete: the cache alone (a reconcile
        // with no change costs no API call). A foreign slice is left alone.
        match primary.slices.get(&ObjectRef::new(&svc_name).within(namespace)) {
            Some(have) if owned_by(have.meta(), uid) => Found::Ours((*have).clone()),
            _ => Found::Absent,
        }
    };
    // Whatever else happens, nobody but the operator routes the Service:
    // strays are removed, and the slices made for a selector deleted.
    let mut changed = false;
    if let Found::Ours(have) = &have_service {
        if desired::stray_routing(have, &service).is_some() {
            remove_stray_routing(ctx, &services, db, have, &service).await?;
            changed = true;
        }
        let uid = have.metadata.uid.clone().unwrap_or_default();
        changed |= delete_selector_slices(ctx, primary, &slices, namespace, &svc_name, &uid).await?;
    }
    if let Some(unconfirmed) = unconfirmed {
        // Leave both as they are: the active site has not answered as
        // itself where spec now says it is, or not yet writable.
        return Ok(unconfirmed.with_service(&svc_name));
    }

    match have_service {
        Found::Foreign => unreachable!("returned above"),
        Found::Ours(have) if desired::service_matches(&have, &service) => {}
        Found::Ours(have) => {
            apply(ctx, &services, service, Some(&have.metadata)).await?;
            changed = true;
        }
        Found::Absent if create => {
            apply(ctx, &services, service, None).await?;
            changed = true;
        }
        Found::Absent => {}
    }
    match slice {
        Some(want) => match have_slice {
            Found::Foreign => unreachable!("returned above"),
            Found::Ours(have) if desired::slice_matches(&have, &want) => {}
            Found::Ours(have) => {
                apply(ctx, &slices, want, Some(&have.metadata)).await?;
                changed = true;
            }
            Found::Absent => {
                apply(ctx, &slices, want, None).await?;
                changed = true;
            }
        },
        None => {
            // Only ours, which always carries the label the cache selects:
            // a foreign same-named slice is not ours to delete.
            if matches!(have_slice, Found::Ours(_)) {
                changed |= delete_own_slice(ctx, primary, &slices, namespace, &svc_name, uid).await?;
            }
        }
    }
    if changed {
        let (site, generation) = site.unwrap_or_default();
        tracing::info!(
            database = %name,
            namespace = %namespace,
            service = %svc_name,
            site = %site,
            generation,
            reason = condition.reason,
            "primary service written"
        );
    }
    Ok(condition)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn slice(managed_by: &str, owner_kind: &str, owner_name: &str, owner_uid: &str) -> ObjectMeta {
        ObjectMeta {
            labels: Some([("endpointslice.kubernetes.io/managed-by".to_owned(), managed_by.to_owned())].into()),
            owner_references: Some(vec![OwnerReference {
                kind: owner_kind.into(),
                name: owner_name.into(),
                uid: owner_uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_slices_made_to_route_the_service_are_told_apart_from_others() {
        let selector = slice("endpointslice-controller.k8s.io", "Service", "app-primary", "svc-uid");
        assert!(matches!(made_by(&selector, "app-primary", "svc-uid"), Some(Made::ForSelector)));
        let mirrored = slice("endpointslicemirroring-controller.k8s.io", "Endpoints", "app-primary", "ep-uid");
        match made_by(&mirrored, "app-primary", "svc-uid") {
            Some(Made::Mirrored { endpoints_uid }) => assert_eq!(endpoints_uid.as_deref(), Some("ep-uid")),
            _ => panic!("a mirrored slice of the Service's Endpoints"),
        }
        // Another Service's slices, and a mirrored slice of another Endpoints object.
        let other = slice("endpointslice-controller.k8s.io", "Service", "app-primary", "another-uid");
        assert!(made_by(&other, "app-primary", "svc-uid").is_none());
        let elsewhere = slice("endpointslicemirroring-controller.k8s.io", "Endpoints", "other", "ep-uid");
        assert!(made_by(&elsewhere, "app-primary", "svc-uid").is_none());
    }

    /// The Service follows a decision only once the decided site answers
    /// writable where spec says it is: a promotion in flight (read-only)
    /// and an endpoint not yet confirmed both keep the old routing, each
    /// with its own reason.
    #[test]
    fn the_service_follows_a_decided_site_only_once_it_answers_writable() {
        let pdx = bloodraven_api::v1alpha1::Site {
            name: "pdx".into(),
            host: "10.0.0.6".into(),
            port: 3306,
            credentials_secret_ref: bloodraven_api::v1alpha1::SecretRef {
                namespace: "bloodraven".into(),
                name: "creds".into(),
            },
        };
        let decided = |unconfirmed, read_only| -> Result<Decided<'_>, String> {
            Ok(Decided { group: "g", site: &pdx, generation: 2, unconfirmed, read_only, observed: None })
        };
        assert!(held_back(&decided(false, false)).is_none(), "writable and confirmed: follow");
        let Some(held) = held_back(&decided(false, true)) else { panic!("read-only: keep the old routing") };
        let c = held.with_service("app-primary");
        assert_eq!((c.status, c.reason), ("False", reason::ACTIVE_SITE_NOT_WRITABLE));
        assert!(c.message.contains("pdx") && c.message.contains("answers writable"), "{}", c.message);
        let Some(held) = held_back(&decided(true, true)) else { panic!("unconfirmed: keep the old routing") };
        assert_eq!(held.with_service("app-primary").reason, reason::ACTIVE_SITE_ENDPOINT_UNCONFIRMED);
        // No decision to follow: the plan says what to do (nothing is held back here).
        assert!(held_back(&Err("undecided".into())).is_none());
    }
}
