//! The MysqlDatabase reconciler (leader only): reports in a `Ready`
//! condition whether the database has authority on its group
//! (`crate::authority`): the group exists, the group allows the database's
//! namespace, and no older MysqlDatabase of the same name on the group
//! speaks for the name. So a typo, a namespace the group does not accept,
//! or a name someone else holds shows up before a deploy pipeline is
//! refused; a refusal of the last two also gets a Warning Event on the
//! database. It also keeps the database's `<name>-primary` Service and
//! EndpointSlice pointing at the group's decided active site (`primary`),
//! reported in a `PrimaryService` condition. Woken by changes of the
//! database, of a group's metadata or decision, of any namespace's labels,
//! of same-named databases, and of its own `-primary` objects.

mod primary;
mod wakes;

pub(crate) use self::primary::desired::service_name;

use std::sync::Arc;
use std::time::Duration;

use bloodraven_api::names::{OBSERVER_FIELD_MANAGER, RELEASE_INSTANCE_ANNOTATION, cached};
use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup, reason};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
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
use crate::authority::{self, Standing};
use crate::tolerant::{Findings, ReadError};
use primary::{Decided, Primary};
use wakes::{changed_only, decision_fingerprint, metadata_fingerprint};

const CONTROLLER: &str = "database";
/// Re-check period, in case a group event was missed.
const RECHECK: Duration = Duration::from_secs(60);

/// What this controller's reconciles get: the shared context, the caches
/// of the `-primary` objects, and which groups are this shard's.
struct DbContext {
    ctx: Ctx,
    primary: Primary,
    shard: Shard,
}

type GroupMeta = PartialObjectMeta<MysqlFailoverGroup>;

/// Which groups are this operator's (`--group-selector`), from two
/// metadata caches, so that a database of another shard's group costs no
/// API read (with K shards and D databases, every re-check round cost K×D
/// group GETs before, nearly all thrown away). The selector is evaluated by
/// the API server (`mine` is a watch with it), never parsed here.
struct Shard {
    /// Every group's metadata (the unfiltered metadata watch).
    all: reflector::Store<GroupMeta>,
    /// This shard's groups' metadata; `None` without a selector (every
    /// group is this operator's).
    mine: Option<reflector::Store<GroupMeta>>,
}

impl Shard {
    /// Group `name` is known to exist and to be another shard's. `false`
    /// when either cache has not seen it yet: the caller then reads it.
    /// Both caches wake the group's databases when they change, so a group
    /// that moves into this shard is looked at again when `mine` sees it.
    fn elsewhere(&self, name: &str) -> bool {
        let key = ObjectRef::new(name);
        self.mine.as_ref().is_some_and(|mine| self.all.get(&key).is_some() && mine.get(&key).is_none())
    }

    /// Group `name` is this shard's, as far as the metadata caches know
    /// (always, without a selector). The shard is decided here, not from
    /// the decoded group cache the deploy API shares: a lag of that cache
    /// must neither hold a new group's claims back nor, were its watch
    /// failing, turn every re-check into a read.
    fn mine(&self, name: &str) -> bool {
        self.mine.as_ref().is_none_or(|mine| mine.get(&ObjectRef::new(name)).is_some())
    }
}

type DbCtx = Arc<DbContext>;

/// The MysqlDatabase a `-primary` object belongs to: the one its
/// `primary-of` label names in its namespace, else its controller
/// ownerReference's.
fn primary_owner<K: Resource>(object: &K) -> Option<ObjectRef<MysqlDatabase>> {
    let meta = object.meta();
    let namespace = meta.namespace.as_deref()?;
    let by_label = meta.labels.as_ref().and_then(|l| l.get(bloodraven_api::names::PRIMARY_OF_LABEL)).cloned();
    let by_owner = || {
        meta.owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "MysqlDatabase")
            .map(|o| o.name.clone())
    };
    Some(ObjectRef::new(&by_label.or_else(by_owner)?).within(namespace))
}

/// The most MysqlDatabases reconciled at once. Tenants create them, so
/// their number is theirs to choose, and a change of a group's claims
/// wakes every one of its databases: unbounded, 300 of one tenant made
/// hundreds of API calls at once, and the operator's own leader-Lease
/// renewal timed out behind them (it lost leadership, and with it every
/// group's failover, for seconds at a time). Each reconcile makes a few
/// calls, so this many at once still serves hundreds a second.
const CONCURRENCY: u16 = 16;

/// Runs the controller until `shutdown` resolves. `selector` is the
/// operator's `--group-selector` (empty: every group).
#[allow(clippy::too_many_lines)] // the controller's wiring: watches, wakes, predicates and the run loop, one step after another
pub(crate) async fn run(
    ctx: Ctx,
    selector: &str,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // Tolerant: a MysqlDatabase that does not decode is reported on itself
    // (condition + Event) and skipped; the others keep being served.
    let (reader, writer) = reflector::store();
    let databases = ctx
        .tolerant
        .watch::<MysqlDatabase>(WatcherConfig::default(), Some((writer, reader.clone())), Findings::Report)
        .applied_objects();
    // Groups wake their databases through two filtered watches. The group's
    // status is written on every probe (every probeIntervalSeconds), and a
    // plain watch would reconcile every database of the group each time.
    // Only what a database depends on passes:
    // - a metadata watch, which decodes whatever a spec holds, for the
    //   group's spec generation, labels, annotations, deletion and
    //   disappearance (a group that no longer decodes still wakes its
    //   databases, which report GroupInvalid);
    // - a full, tolerant watch (bad objects skipped; the failover-group
    //   controller reports them) for `status.activeSite`,
    //   `status.topologyGeneration` and `status.instanceClaims`, so the
    //   `-primary` Service is repointed within a watch round-trip of the
    //   decision.
    // A fingerprint per group is kept; a reconcile that changes nothing also
    // writes nothing (the caches below and the condition compare).
    // - with a `--group-selector`, a metadata watch of this shard's groups,
    //   whose cache and the unfiltered one's tell another shard's group
    //   apart without a read (`Shard`); it wakes a group's databases when
    //   the group comes into the shard or leaves it.
    // The decision watch is of this shard's groups only: another shard's
    // decisions are its operator's business.
    // managedFields are never read and were most of the operator's heap at
    // a thousand groups (every status write adds to them): dropped before
    // they reach either cache.
    let drop_managed_fields = |g: &mut GroupMeta| g.metadata.managed_fields = None;
    let group_meta_api = Api::<GroupMeta>::all(ctx.client.clone());
    let (all_groups, all_writer) = reflector::store();
    let group_meta = changed_only(
        watcher(group_meta_api.clone(), WatcherConfig::default())
            .default_backoff()
            .modify(drop_managed_fields)
            .reflect(all_writer),
        metadata_fingerprint,
    );
    let (shard_config, shard, shard_meta) = if selector.is_empty() {
        (WatcherConfig::default(), Shard { all: all_groups, mine: None }, futures::stream::empty().boxed())
    } else {
        let config = WatcherConfig::default().labels(selector);
        let (mine, mine_writer) = reflector::store();
        let events =
            watcher(group_meta_api, config.clone()).default_backoff().modify(drop_managed_fields).reflect(mine_writer);
        (config, Shard { all: all_groups, mine: Some(mine) }, changed_only(events, metadata_fingerprint).boxed())
    };
    let decisions = ctx.tolerant.watch::<MysqlFailoverGroup>(shard_config, None, Findings::Skip);
    let decisions = changed_only(decisions, decision_fingerprint);
    let namespaces = Api::<PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>::all(ctx.client.clone());
    let namespaces = watcher(namespaces, WatcherConfig::default()).default_backoff().touched_objects();
    let names = Api::<PartialObjectMeta<MysqlDatabase>>::all(ctx.client.clone());
    let names =
        watcher(names, WatcherConfig::default().page_size(cached::LIST_PAGE)).default_backoff().touched_objects();
    // The operator's own `-primary` objects (label-selected, so the caches
    // hold nothing else): compared before any write, and a deleted or
    // edited one wakes its database to be put back — found by its label
    // or its ownerReference, so that one that lost its ownerReference (and
    // must lose its EndpointSlice) wakes it too.
    // Tenants may label any Service of theirs `primary-of`: only what is
    // read is cached (`names::cached`).
    let only_primary = WatcherConfig::default().labels(primary::selector()).page_size(cached::LIST_PAGE);
    let (services, services_writer) = reflector::store::<Service>();
    let service_events = watcher(Api::<Service>::all(ctx.client.clone()), only_primary.clone())
        .default_backoff()
        .modify(|s| cached::trim(&mut s.metadata, &cached::SERVICE_ANNOTATIONS, cached::routing_label))
        .reflect(services_writer)
        .touched_objects();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    let slice_events = watcher(Api::<EndpointSlice>::all(ctx.client.clone()), only_primary)
        .default_backoff()
        .modify(|s| cached::trim(&mut s.metadata, &cached::SERVICE_ANNOTATIONS, cached::routing_label))
        .reflect(slices_writer)
        .touched_objects();
    // The slices Kubernetes' own controllers make for a Service (metadata
    // only): a selector someone added to a `-primary` Service makes the
    // EndpointSlice controller create some, which it leaves when the
    // selector goes; and the Endpoints controller's `Endpoints` object for
    // that selector, left behind too, is then mirrored into slices by the
    // EndpointSlice mirroring controller. Both route the Service. Such a
    // slice wakes the database whose Service it names, which deletes it
    // (and the Endpoints it mirrors).
    let made_for_selectors = WatcherConfig::default().labels(primary::CONTROLLER_SLICES).page_size(cached::LIST_PAGE);
    let (selector_slices, selector_writer) = reflector::store::<PartialObjectMeta<EndpointSlice>>();
    let selector_events = watcher(Api::<PartialObjectMeta<EndpointSlice>>::all(ctx.client.clone()), made_for_selectors)
        .default_backoff()
        .modify(|s| cached::trim(&mut s.metadata, &[], cached::routing_label))
        .reflect(selector_writer)
        .touched_objects();
    let by_service = services.clone();
    let (by_group, by_shard, by_decision, by_namespace, by_name) =
        (reader.clone(), reader.clone(), reader.clone(), reader.clone(), reader.clone());
    let acquisitions = ctx.leadership.acquisitions();
    let dctx = Arc::new(DbContext { ctx, primary: Primary { services, slices, selector_slices }, shard });
    Controller::for_stream(databases, reader)
        .watches_stream(group_meta, move |group| {
            let name = group.name_any();
            refs(&by_group, |db| db.spec.failover_group_ref.name == name)
        })
        .watches_stream(shard_meta, move |group| {
            let name = group.name_any();
            refs(&by_shard, |db| db.spec.failover_group_ref.name == name)
        })
        .watches_stream(decisions, move |group| {
            let name = group.name_any();
            refs(&by_decision, |db| db.spec.failover_group_ref.name == name)
        })
        .watches_stream(namespaces, move |ns| {
            let name = ns.name_any();
            refs(&by_namespace, |db| db.namespace().as_deref() == Some(name.as_str()))
        })
        // A same-named database appearing or going changes who holds the name.
        .watches_stream(names, move |changed| {
            let name = changed.name_any();
            refs(&by_name, |db| db.name_any() == name)
        })
        .watches_stream(service_events, |svc| primary_owner(&svc))
        .watches_stream(slice_events, |slice| primary_owner(&slice))
        .watches_stream(selector_events, move |slice| {
            let namespace = slice.metadata.namespace.clone()?;
            let service = slice.metadata.labels.as_ref()?.get("kubernetes.io/service-name")?.clone();
            let svc = by_service.get(&ObjectRef::new(&service).within(&namespace))?;
            primary_owner(&*svc)
        })
        .reconcile_all_on(acquisitions)
        .graceful_shutdown_on(shutdown)
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY))
        .run(reconcile, error_policy, dctx)
        .for_each(|_| async {})
        .await;
}

/// The Event to raise for `computed` given the `previous` conditions, if
/// any: the `Ready` refusals named by `announce` when their reason is new;
/// for `PrimaryService`, a Normal Event when it points somewhere new and a
/// Warning when a problem reason is new.
fn event_for(
    previous: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    computed: &Computed,
    announce: bool,
) -> Option<kube::runtime::events::Event> {
    use kube::runtime::events::{Event, EventType};
    let before = previous.iter().find(|c| c.type_ == computed.type_);
    let new_reason = before.is_none_or(|c| c.reason != computed.reason);
    let (type_, action) = match computed.type_ {
        "Ready" if announce && new_reason => (EventType::Warning, "Authorize"),
        primary::desired::CONDITION if computed.is_true() && before.is_none_or(|c| c.message != computed.message) => {
            (EventType::Normal, "PointPrimaryService")
        }
        // Every promotion passes through it for a moment (the decided site
        // answers read-only until promoted): said, but not a Warning, or an
        // alert on Warning Events would page at every planned failover. A site
        // that stays read-only is the group's alarm (NoPrimary).
        primary::desired::CONDITION if new_reason && computed.reason == reason::ACTIVE_SITE_NOT_WRITABLE => {
            (EventType::Normal, "PointPrimaryService")
        }
        primary::desired::CONDITION
            if !computed.is_true() && new_reason && computed.reason != reason::NO_ACTIVE_SITE =>
        {
            (EventType::Warning, "PointPrimaryService")
        }
        _ => return None,
    };
    Some(Event {
        type_,
        reason: computed.reason.to_owned(),
        note: Some(computed.message.clone()),
        action: action.to_owned(),
        secondary: None,
    })
}

/// Writes the database's conditions when they changed (leader only), with
/// the Events of [`event_for`]; `announce` says whether a new `Ready`
/// reason is a refusal worth an Event.
async fn write_conditions(
    ctx: &super::Context,
    db: &MysqlDatabase,
    name: &str,
    namespace: &str,
    computed: &[Computed],
    announce: bool,
) -> Result<Action, Error> {
    let previous = db.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let same = |c: &Computed| {
        previous
            .iter()
            .any(|p| p.type_ == c.type_ && p.status == c.status && p.reason == c.reason && p.message == c.message)
    };
    if previous.len() == computed.len()
        && computed.iter().all(same)
        && db.status.as_ref().and_then(|s| s.observed_generation) == db.meta().generation
    {
        return Ok(Action::requeue(RECHECK));
    }
    if !ctx.leadership.is_leader() {
        return Ok(Action::requeue(RECHECK));
    }
    for event in computed.iter().filter_map(|c| event_for(previous, c, announce)) {
        if let Err(err) = ctx.recorder.publish(&event, &db.object_ref(&())).await {
            tracing::warn!(database = %name, namespace = %namespace, error = %err, "failed to publish an event");
        }
    }
    let conditions = materialize(previous, computed, db.meta().generation, Timestamp::now());
    let patch = json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1",
        "kind": "MysqlDatabase",
        "status": { "conditions": conditions, "observedGeneration": db.meta().generation },
    });
    let api: Api<MysqlDatabase> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch_status(name, &PatchParams::apply(OBSERVER_FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(kube_err("write the database status"))?;
    Ok(Action::requeue(RECHECK))
}

/// What the schema says of a MysqlDatabase's spec, checked again: an object
/// stored under a looser schema (a CRD downgrade) may decode yet hold a
/// group name the operator must not put in a request path, or thousands of
/// deployment clients.
fn validate_spec(spec: &bloodraven_api::v1alpha1::MysqlDatabaseSpec) -> Result<(), String> {
    let subdomain = |s: &str| {
        (1..=253).contains(&s.len())
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
            && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric)
    };
    let shown = |v: &str| bloodraven_serving::log::escape(v, 64);
    if !subdomain(&spec.failover_group_ref.name) {
        return Err(format!(
            "spec.failoverGroupRef.name {:?} is not a DNS subdomain",
            shown(&spec.failover_group_ref.name)
        ));
    }
    if ["mysql", "information_schema", "performance_schema", "sys"].contains(&spec.schema.to_ascii_lowercase().as_str())
    {
        return Err(format!(
            "spec.schema {:?} is a system schema; name the application's own schema",
            shown(&spec.schema)
        ));
    }
    if spec.deployment_clients.len() > 64 {
        return Err(format!("spec.deploymentClients lists {} clients; at most 64", spec.deployment_clients.len()));
    }
    for c in &spec.deployment_clients {
        if !subdomain(&c.namespace) || !subdomain(&c.service_account) {
            return Err(format!(
                "spec.deploymentClients holds {:?}/{:?}, not a namespace and ServiceAccount name",
                shown(&c.namespace),
                shown(&c.service_account)
            ));
        }
    }
    Ok(())
}

/// The `Ready` condition of a MysqlDatabase from its standing (`None` when
/// the group's read failed) and how the group read went.
fn ready_condition(
    standing: Option<&Standing>,
    group: Result<(), &crate::tolerant::DecodeError>,
    name: &str,
    namespace: &str,
    group_name: &str,
) -> Computed {
    match (standing, group) {
        (_, Err(err)) => Computed::flag(
            "Ready",
            false,
            reason::GROUP_INVALID,
            format!("failover group {group_name} does not decode ({err}); see its InvalidObject condition"),
        ),
        (Some(Standing::Authoritative), _) => Computed::flag(
            "Ready",
            true,
            reason::GROUP_FOUND,
            format!(
                "failover group {group_name} exists and accepts this database; its deploymentClients may take deploy leases for instance {name}"
            ),
        ),
        (Some(Standing::GroupNotFound) | None, _) => Computed::flag(
            "Ready",
            false,
            reason::GROUP_NOT_FOUND,
            format!("failover group {group_name} does not exist; fix spec.failoverGroupRef.name or create the group"),
        ),
        (Some(Standing::NamespaceNotAllowed), _) => Computed::flag(
            "Ready",
            false,
            reason::NAMESPACE_NOT_ALLOWED,
            format!(
                "failover group {group_name} does not accept MysqlDatabases from namespace {namespace} (spec.allowedDatabases.namespaces); this database grants no deploy-API authority until a cluster admin allows the namespace"
            ),
        ),
        (Some(Standing::NameConflict { namespace: holder }), _) => Computed::flag(
            "Ready",
            false,
            reason::NAME_CONFLICT,
            format!(
                "namespace {holder} claimed instance {name} on failover group {group_name} (status.instanceClaims); this MysqlDatabase grants no deploy-API authority: rename it, or have a cluster admin hand the name over with the annotation {RELEASE_INSTANCE_ANNOTATION}={name} on the group"
            ),
        ),
        (Some(Standing::Unclaimed { candidate: true }), _) => Computed::flag(
            "Ready",
            false,
            reason::CLAIM_PENDING,
            format!(
                "this MysqlDatabase is the one to claim instance {name} on failover group {group_name}; the operator writes the claim with the group's next reconcile (within its probe interval)"
            ),
        ),
        (Some(Standing::ClaimLimitReached { limit }), _) => Computed::flag(
            "Ready",
            false,
            reason::CLAIM_LIMIT_REACHED,
            format!(
                "instance {name} is not claimed on failover group {group_name}: {limit}; this MysqlDatabase grants no deploy-API authority until a claim is dropped (a MysqlDatabase deleted) or a cluster admin raises the bound"
            ),
        ),
        (Some(Standing::Unclaimed { candidate: false }), _) => Computed::flag(
            "Ready",
            false,
            reason::NAME_CONFLICT,
            format!(
                "an older MysqlDatabase named {name} in another namespace claims instance {name} on failover group {group_name} first; this one grants no deploy-API authority: rename it"
            ),
        ),
    }
}

fn refs(
    store: &kube::runtime::reflector::Store<MysqlDatabase>,
    keep: impl Fn(&MysqlDatabase) -> bool,
) -> Vec<ObjectRef<MysqlDatabase>> {
    store.state().into_iter().filter(|db| keep(db)).map(|db| ObjectRef::from_obj(&*db)).collect()
}

#[allow(clippy::needless_pass_by_value)] // the signature kube's Controller::run requires
fn error_policy(db: Arc<MysqlDatabase>, err: &Error, dctx: DbCtx) -> Action {
    dctx.ctx.metrics.reconcile_errors_total.with_label_values(&[CONTROLLER, err.reason()]).inc();
    tracing::warn!(database = %db.name_any(), reason = err.reason(), error = %err, "database reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Where the `-primary` Service should point: the decided active site of
/// the group, when this database is its authority; otherwise why not.
fn target<'a>(
    standing: Option<&Standing>,
    group: Result<&'a Option<MysqlFailoverGroup>, &crate::tolerant::DecodeError>,
    group_name: &'a str,
) -> Result<Decided<'a>, String> {
    let g = match group {
        Err(_) => return Err(format!("failover group {group_name} cannot be read (see Ready)")),
        Ok(None) => return Err(format!("failover group {group_name} does not exist")),
        Ok(Some(g)) => g,
    };
    if standing != Some(&Standing::Authoritative) {
        return Err(format!("this MysqlDatabase has no authority on failover group {group_name} (see Ready)"));
    }
    let Some((site, generation)) = g.decided() else {
        return Err(format!("failover group {group_name} has no decided active site yet (bootstrap pending)"));
    };
    let Some(spec_site) = g.site(site) else {
        return Err(format!("the active site of failover group {group_name} is not in its spec.sites"));
    };
    let observed = g.status.as_ref().and_then(|s| s.health.iter().find(|h| h.site == site));
    // Where it last answered as itself (its known server_id; the failover
    // group's probes fail a site that answers as another server).
    let endpoint = crate::controller::failover_group::endpoint_of(&g.spec, site);
    let unconfirmed = observed.is_none_or(|h| h.answered_endpoint != endpoint);
    let read_only = observed.is_some_and(|h| h.writable == Some(false));
    Ok(Decided { group: group_name, site: spec_site, generation, unconfirmed, read_only, observed })
}

async fn reconcile(db: Arc<MysqlDatabase>, dctx: DbCtx) -> Result<Action, Error> {
    let ctx = &dctx.ctx;
    ctx.metrics.reconcile_total.with_label_values(&[CONTROLLER]).inc();
    if !ctx.leadership.is_leader() {
        return Ok(Action::requeue(RECHECK));
    }
    let name = db.meta().name.clone().ok_or(Error::NoName)?;
    let namespace = db.namespace().ok_or(Error::NoName)?;
    let group_name = &db.spec.failover_group_ref.name;
    if let Err(why) = validate_spec(&db.spec) {
        // Stored under a looser schema: never used as a name in a request or a log line.
        let computed = Computed::flag("Ready", false, reason::INVALID_SPEC, why);
        return write_conditions(ctx, &db, &name, &namespace, &[computed], false).await;
    }
    // A group of another shard (`--group-selector`): its operator speaks
    // for its databases and claims their names, not this one. Decided from
    // the caches when they know the group, so it costs no read.
    if dctx.shard.elsewhere(group_name) {
        ctx.metrics.database_group_reads_total.with_label_values(&["skipped"]).inc();
        return Ok(Action::requeue(RECHECK));
    }
    ctx.metrics.database_group_reads_total.with_label_values(&["api"]).inc();
    tracing::debug!(%namespace, database = %name, group = %group_name, "reading the database's failover group");
    let group = match ctx.tolerant.get::<MysqlFailoverGroup>(None, group_name).await {
        Ok(group) => Ok(group),
        Err(ReadError::Invalid(err)) => Err(err),
        Err(ReadError::Kube(err)) => return Err(kube_err("read the failover group")(err)),
    };
    // Not in this shard's metadata cache: another shard's group that the
    // cache of all groups had not seen yet, or this shard's that its cache
    // has not (its watch wakes the database when it does).
    if let Ok(Some(_)) = &group
        && !dctx.shard.mine(group_name)
    {
        return Ok(Action::requeue(RECHECK));
    }
    let all = ctx.authority.databases.state();
    // The claim itself is the group reconciler's (one writer per group,
    // in batches: `authority::claims_to_hold`); this reports where the
    // database stands, and the group's status change wakes it again.
    let standing = group.as_ref().ok().map(|group| {
        authority::standing(&db, group.as_ref(), all.iter().map(AsRef::as_ref), |ns| ctx.authority.labels(ns))
    });
    let computed = ready_condition(standing.as_ref(), group.as_ref().map(drop), &name, &namespace, group_name);
    let announce = matches!(
        standing,
        Some(Standing::NamespaceNotAllowed | Standing::NameConflict { .. } | Standing::ClaimLimitReached { .. })
    );
    let target = target(standing.as_ref(), group.as_ref(), group_name);
    let pointed = primary::keep(ctx, &dctx.primary, &db, target).await?;
    write_conditions(ctx, &db, &name, &namespace, &[computed, pointed], announce).await
}

#[cfg(test)]
mod tests;
