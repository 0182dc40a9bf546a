//! Which MysqlDatabase speaks for a lease `instance`, and who may act for it
//! (docs/deploy-api.md, "Who may ask").
//!
//! Rules, all decided from watch caches (no API-server read):
//! 1. A MysqlDatabase may attach to a group only from a namespace the group
//!    allows (`spec.allowedDatabases.namespaces`: `None` by default, `All`,
//!    or `Selector` over the Namespace's labels).
//! 2. A name is spoken for by the namespace that claimed it
//!    (`status.instanceClaims` of the group, written by the operator): the
//!    first accepted MysqlDatabase of a name claims it (of several at once,
//!    the oldest by `creationTimestamp`, then namespace), and a same-named
//!    one in another namespace is a conflict however old it is, so an object
//!    parked elsewhere and attached later never displaces a live holder.
//!    The claim stays while its MysqlDatabase exists, and across a delete
//!    and re-create in the same namespace; it is dropped when that
//!    MysqlDatabase is gone and nobody else claims the name, or by a cluster
//!    admin's `release-instance` annotation. Databases from namespaces that
//!    are not allowed never take part.
//! 3. A caller may act for `(group, instance)` only when the authoritative
//!    MysqlDatabase of that name lists its `(namespace, serviceAccount)` in
//!    `spec.deploymentClients`.
//!
//! The database reconciler reports rules 1 and 2 as conditions; the deploy
//! API applies rule 3 before any other read a request causes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

/// An authenticated deploy client: a ServiceAccount.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Caller {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub service_account: String,
}

impl Caller {
    /// `namespace/serviceAccount`: how a grant records who it was granted to
    /// (not a secret; stored on the Lease).
    pub(crate) fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.service_account)
    }
}

/// Where a MysqlDatabase stands with its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// It is the one authority for its name in its group.
    Authoritative,
    /// The group it names does not exist.
    GroupNotFound,
    /// Its namespace is not allowed by the group's `spec.allowedDatabases`.
    NamespaceNotAllowed,
    /// The MysqlDatabase of the same name in `namespace` claimed the name.
    NameConflict {
        /// Namespace holding the claim.
        namespace: String,
    },
    /// Nobody claimed the name yet; `candidate` when this MysqlDatabase is
    /// the one to claim it (the oldest accepted one of the name).
    Unclaimed {
        /// Whether this MysqlDatabase claims it next.
        candidate: bool,
    },
    /// The candidate for its name, but the group holds its
    /// `maxInstances` claims, or the namespace its `maxInstancesPerNamespace`.
    ClaimLimitReached {
        /// Which bound, in words, with its value.
        limit: String,
    },
}

/// Which of `group`'s claim bounds a new claim for `namespace` would pass,
/// given `claims`, in words; `None` when it fits.
pub(crate) fn claim_limit(
    group: &MysqlFailoverGroup,
    claims: &[bloodraven_api::v1alpha1::InstanceClaim],
    namespace: &str,
) -> Option<String> {
    let rule = &group.spec.allowed_databases;
    let total = usize::try_from(rule.max_instances).unwrap_or(usize::MAX);
    let per_namespace = usize::try_from(rule.max_instances_per_namespace).unwrap_or(usize::MAX);
    if claims.len() >= total {
        return Some(format!("the group holds its spec.allowedDatabases.maxInstances ({total}) claims"));
    }
    let mine = claims.iter().filter(|c| c.namespace == namespace).count();
    (mine >= per_namespace).then(|| {
        format!(
            "namespace {namespace} holds its spec.allowedDatabases.maxInstancesPerNamespace ({per_namespace}) claims on the group"
        )
    })
}

/// Whether `group` lets MysqlDatabases of a namespace with `labels` attach
/// (`None`: the namespace is not known, which only `All` accepts).
pub(crate) fn namespace_allowed(group: &MysqlFailoverGroup, labels: Option<&BTreeMap<String, String>>) -> bool {
    group.spec.allowed_databases.namespaces.admits(labels)
}

/// The order in which same-named MysqlDatabases claim their name: oldest first.
fn claim_key(db: &MysqlDatabase) -> (Option<k8s_openapi::jiff::Timestamp>, String, String) {
    (
        db.metadata.creation_timestamp.as_ref().map(|t| t.0),
        db.namespace().unwrap_or_default(),
        db.metadata.uid.clone().unwrap_or_default(),
    )
}

/// Whether `db` is attached to `group` from an accepted namespace.
fn attached(
    db: &MysqlDatabase,
    group: &MysqlFailoverGroup,
    labels: &impl Fn(&str) -> Option<BTreeMap<String, String>>,
) -> bool {
    db.spec.failover_group_ref.name == group.name_any()
        && namespace_allowed(group, labels(&db.namespace().unwrap_or_default()).as_ref())
}

/// The namespace holding the claim of instance `name` on `group`, if any.
pub(crate) fn claim_of<'a>(group: &'a MysqlFailoverGroup, name: &str) -> Option<&'a str> {
    group.status.as_ref()?.instance_claims.iter().find(|c| c.instance == name).map(|c| c.namespace.as_str())
}

/// The standing of `db`, given its group (if it exists), every MysqlDatabase
/// of the cluster, and a lookup of namespace labels.
pub(crate) fn standing<'a>(
    db: &MysqlDatabase,
    group: Option<&MysqlFailoverGroup>,
    all: impl IntoIterator<Item = &'a MysqlDatabase>,
    labels: impl Fn(&str) -> Option<BTreeMap<String, String>>,
) -> Standing {
    let Some(group) = group else { return Standing::GroupNotFound };
    if !attached(db, group, &labels) {
        return Standing::NamespaceNotAllowed;
    }
    let name = db.name_any();
    let namespace = db.namespace().unwrap_or_default();
    match claim_of(group, &name) {
        Some(holder) if holder == namespace => Standing::Authoritative,
        Some(holder) => Standing::NameConflict { namespace: holder.to_owned() },
        None => {
            let first = all
                .into_iter()
                .filter(|d| d.name_any() == name && attached(d, group, &labels))
                .min_by_key(|d| claim_key(d));
            let candidate = first.is_none_or(|f| claim_key(f) >= claim_key(db));
            let claims = group.status.as_ref().map(|s| s.instance_claims.as_slice()).unwrap_or_default();
            match claim_limit(group, claims, &namespace) {
                Some(limit) if candidate => Standing::ClaimLimitReached { limit },
                _ => Standing::Unclaimed { candidate },
            }
        }
    }
}

/// The claims `group` should hold: [`pruned_claims`], then a claim for
/// every unclaimed name that an accepted MysqlDatabase wants (the oldest
/// of the name, oldest names first), while the group's bounds allow.
/// Decided here, for the whole group at once, and written by the group's
/// reconciler in one patch: one writer per group, so claims never race on
/// the group's resourceVersion (each MysqlDatabase writing its own claim
/// made hundreds of conflicts a minute, and starved the group's other
/// writers). Returns `None` when nothing changes.
pub(crate) fn claims_to_hold<'a>(
    group: &MysqlFailoverGroup,
    all: impl IntoIterator<Item = &'a MysqlDatabase>,
    labels: impl Fn(&str) -> Option<BTreeMap<String, String>>,
    released: Option<&str>,
) -> Option<Vec<bloodraven_api::v1alpha1::InstanceClaim>> {
    let all: Vec<&MysqlDatabase> = all.into_iter().collect();
    let current = group.status.as_ref().map(|s| s.instance_claims.clone()).unwrap_or_default();
    let pruned = pruned_claims(group, all.iter().copied(), &labels, released);
    let mut claims = pruned.clone().unwrap_or_else(|| current.clone());
    // The oldest accepted MysqlDatabase of each name no claim holds.
    let mut firsts: BTreeMap<String, &MysqlDatabase> = BTreeMap::new();
    for db in all.iter().copied().filter(|d| attached(d, group, &labels)) {
        let name = db.name_any();
        if released == Some(name.as_str()) && current.iter().any(|c| c.instance == name) {
            // Released this round: claimed again by the next one, from a list without it.
            continue;
        }
        if claims.iter().any(|c| c.instance == name) {
            continue;
        }
        let entry = firsts.entry(name).or_insert(db);
        if claim_key(db) < claim_key(entry) {
            *entry = db;
        }
    }
    let mut next: Vec<&MysqlDatabase> = firsts.into_values().collect();
    next.sort_by_key(|d| claim_key(d));
    let mut added = false;
    for db in next {
        let namespace = db.namespace().unwrap_or_default();
        if claim_limit(group, &claims, &namespace).is_some() {
            continue;
        }
        claims.push(bloodraven_api::v1alpha1::InstanceClaim { instance: db.name_any(), namespace });
        added = true;
    }
    (added || pruned.is_some()).then_some(claims)
}

/// The claims `group` should hold once stale ones are dropped: a claim
/// whose MysqlDatabase is gone (deleted, attached elsewhere, or its
/// namespace no longer accepted) is dropped only when no other accepted
/// MysqlDatabase wants the name, so nobody takes a name over without a
/// person deciding; `released` names an instance a cluster admin released.
/// Returns `None` when nothing changes.
pub(crate) fn pruned_claims<'a>(
    group: &MysqlFailoverGroup,
    all: impl IntoIterator<Item = &'a MysqlDatabase>,
    labels: impl Fn(&str) -> Option<BTreeMap<String, String>>,
    released: Option<&str>,
) -> Option<Vec<bloodraven_api::v1alpha1::InstanceClaim>> {
    let claims = group.status.as_ref().map(|s| s.instance_claims.clone()).unwrap_or_default();
    let all: Vec<&MysqlDatabase> = all.into_iter().collect();
    let keep: Vec<_> = claims
        .iter()
        .filter(|c| {
            if released == Some(c.instance.as_str()) {
                return false;
            }
            let mut wanting =
                all.clone().into_iter().filter(|d| d.name_any() == c.instance && attached(d, group, &labels));
            let holder_present = wanting.clone().any(|d| d.namespace().as_deref() == Some(c.namespace.as_str()));
            holder_present || wanting.next().is_some()
        })
        .cloned()
        .collect();
    (keep.len() != claims.len()).then_some(keep)
}

/// The watch caches authority is decided from.
#[derive(Clone)]
pub(crate) struct Authority {
    /// Every MysqlDatabase.
    pub databases: Store<MysqlDatabase>,
    /// Every MysqlFailoverGroup this operator manages.
    pub groups: Store<MysqlFailoverGroup>,
    /// Every Namespace's metadata (labels for `Selector`).
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

impl Authority {
    /// Labels of namespace `name`, from the cache.
    pub(crate) fn labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces.get(&ObjectRef::new(name)).map(|ns| ns.labels().clone())
    }

    /// Annotations of namespace `name`, from the cache.
    pub(crate) fn namespace_annotations(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces.get(&ObjectRef::new(name)).map(|ns| ns.annotations().clone())
    }

    /// The group `name`, from the cache.
    pub(crate) fn group(&self, name: &str) -> Option<Arc<MysqlFailoverGroup>> {
        self.groups.get(&ObjectRef::new(name))
    }

    /// The instances of `group` that `caller` may act for: names of
    /// authoritative MysqlDatabases of the group listing the caller.
    pub(crate) fn instances(&self, caller: &Caller, group: &str) -> BTreeSet<String> {
        let Some(g) = self.group(group) else { return BTreeSet::new() };
        let all = self.databases.state();
        all.iter()
            .filter(|db| db.spec.failover_group_ref.name == group && lists(db, caller))
            .filter(|db| {
                standing(db, Some(&g), all.iter().map(AsRef::as_ref), |ns| self.labels(ns)) == Standing::Authoritative
            })
            .map(|db| db.name_any())
            .collect()
    }

    /// The authoritative MysqlDatabases of `group`.
    pub(crate) fn authoritative(&self, group: &str) -> Vec<Arc<MysqlDatabase>> {
        let Some(g) = self.group(group) else { return Vec::new() };
        let all = self.databases.state();
        all.iter()
            .filter(|db| db.spec.failover_group_ref.name == group)
            .filter(|db| {
                standing(db, Some(&g), all.iter().map(AsRef::as_ref), |ns| self.labels(ns)) == Standing::Authoritative
            })
            .cloned()
            .collect()
    }

    /// Whether `caller` is listed by some MysqlDatabase naming `group`,
    /// whatever its standing (only to tell such a caller that the group
    /// does not exist, which its own MysqlDatabase's status says anyway).
    pub(crate) fn names_group(&self, caller: &Caller, group: &str) -> bool {
        self.databases.state().iter().any(|db| db.spec.failover_group_ref.name == group && lists(db, caller))
    }
}

/// Starts a metadata-only watch cache of every Namespace (labels, for
/// `Selector`; the site Jobs' opt-in, label and annotation) and waits for
/// its first list.
pub(crate) async fn namespace_reflector(client: kube::Client) -> Store<PartialObjectMeta<Namespace>> {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, reflector, watcher};
    let (reader, writer) = reflector::store();
    // `Api<PartialObjectMeta<_>>` lists and watches metadata only.
    let api = kube::Api::<PartialObjectMeta<Namespace>>::all(client);
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|ns| {
            let kept = [bloodraven_api::names::site_job::NAMESPACE_GROUPS_ANNOTATION];
            bloodraven_api::names::cached::trim(&mut ns.metadata, &kept, bloodraven_api::names::cached::all_labels);
        })
        .reflect(writer)
        .touched_objects();
    tokio::spawn(stream.for_each(|_| async {}));
    if reader.wait_until_ready().await.is_err() {
        tracing::warn!("the Namespace reflector stopped before its first list");
    }
    reader
}

fn lists(db: &MysqlDatabase, caller: &Caller) -> bool {
    db.spec
        .deployment_clients
        .iter()
        .any(|c| c.namespace == caller.namespace && c.service_account == caller.service_account)
}

#[cfg(test)]
#[allow(clippy::unnecessary_wraps)] // the helpers have the shapes of the lookups they stand in for
mod tests {
    use bloodraven_api::v1alpha1::{
        AllowedDatabases, DatabaseNamespaces, DeploymentClient, FailoverGroupRef, MysqlDatabaseSpec,
        MysqlFailoverGroupSpec, NamespacesFrom,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn group(from: NamespacesFrom, selector: Option<LabelSelector>) -> MysqlFailoverGroup {
        let spec: MysqlFailoverGroupSpec = serde_json::from_value(serde_json::json!({
            "sites": [], "initialActiveSite": "iad",
        }))
        .unwrap();
        let mut g = MysqlFailoverGroup::new("g", spec);
        g.spec.allowed_databases =
            AllowedDatabases { namespaces: DatabaseNamespaces { from, selector }, ..AllowedDatabases::default() };
        g
    }

    fn db(ns: &str, name: &str, created: i64) -> MysqlDatabase {
        let mut d = MysqlDatabase::new(
            name,
            MysqlDatabaseSpec {
                failover_group_ref: FailoverGroupRef { name: "g".into() },
                schema: "s".into(),
                deployment_clients: vec![DeploymentClient { namespace: ns.into(), service_account: "sa".into() }],
            },
        );
        d.metadata.namespace = Some(ns.into());
        d.metadata.creation_timestamp = Some(Time(Timestamp::from_second(1_700_000_000 + created).unwrap()));
        d
    }

    fn names(ns: &str) -> Option<BTreeMap<String, String>> {
        let mut l = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), ns.to_owned())]);
        if ns.starts_with("team-") {
            l.insert("tenant".into(), "trusted".into());
        }
        Some(l)
    }

    fn only(ns: &[&str]) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(ns.iter().map(|s| (*s).to_owned()).collect()),
            }]),
            match_labels: None,
        })
    }

    #[test]
    fn namespaces_are_allowed_only_as_the_group_says() {
        let cases = [
            (group(NamespacesFrom::None, None), "team-a", false),
            (group(NamespacesFrom::All, None), "anything", true),
            (group(NamespacesFrom::Selector, only(&["app"])), "app", true),
            (group(NamespacesFrom::Selector, only(&["app"])), "tenant-b", false),
            (
                group(
                    NamespacesFrom::Selector,
                    Some(LabelSelector {
                        match_labels: Some([("tenant".to_owned(), "trusted".to_owned())].into()),
                        match_expressions: None,
                    }),
                ),
                "team-x",
                true,
            ),
            // Selector without a selector (the schema refuses it): nothing.
            (group(NamespacesFrom::Selector, None), "app", false),
        ];
        for (g, ns, want) in cases {
            assert_eq!(namespace_allowed(&g, names(ns).as_ref()), want, "{ns} under {:?}", g.spec.allowed_databases);
        }
        assert!(!namespace_allowed(&group(NamespacesFrom::Selector, only(&["app"])), None), "unknown namespace");
    }

    fn claimed(mut g: MysqlFailoverGroup, claims: &[(&str, &str)]) -> MysqlFailoverGroup {
        let status = g.status.get_or_insert_with(Default::default);
        status.instance_claims = claims
            .iter()
            .map(|(i, n)| bloodraven_api::v1alpha1::InstanceClaim { instance: (*i).into(), namespace: (*n).into() })
            .collect();
        g
    }

    #[test]
    fn the_claim_speaks_for_a_name_however_old_the_others_are() {
        let victim = db("counter-app", "counter-app", 10);
        // Attack input: created earlier, attached (or accepted) later.
        let parked = db("tenant-b", "counter-app", 0);
        let all = [victim.clone(), parked.clone()];
        let g = claimed(group(NamespacesFrom::All, None), &[("counter-app", "counter-app")]);
        assert_eq!(standing(&victim, Some(&g), &all, names), Standing::Authoritative);
        assert_eq!(
            standing(&parked, Some(&g), &all, names),
            Standing::NameConflict { namespace: "counter-app".into() }
        );
        // A different name is no conflict; nobody claimed it yet.
        let other = db("tenant-b", "other-app", 10);
        assert_eq!(standing(&other, Some(&g), [&victim, &other], names), Standing::Unclaimed { candidate: true });
        // No group: no standing.
        assert_eq!(standing(&victim, None, &all, names), Standing::GroupNotFound);
    }

    #[test]
    fn of_several_first_claimants_the_oldest_claims() {
        let g = group(NamespacesFrom::All, None);
        let (a, b) = (db("aaa", "x", 5), db("bbb", "x", 5));
        let all = [b.clone(), a.clone()];
        assert_eq!(standing(&a, Some(&g), &all, names), Standing::Unclaimed { candidate: true });
        assert_eq!(standing(&b, Some(&g), &all, names), Standing::Unclaimed { candidate: false });
    }

    #[test]
    fn a_database_from_a_namespace_not_allowed_neither_acts_nor_claims() {
        let g = group(NamespacesFrom::Selector, only(&["counter-app"]));
        let squatter = db("tenant-b", "counter-app", 0);
        let victim = db("counter-app", "counter-app", 10);
        let all = [squatter.clone(), victim.clone()];
        assert_eq!(standing(&squatter, Some(&g), &all, names), Standing::NamespaceNotAllowed);
        assert_eq!(standing(&victim, Some(&g), &all, names), Standing::Unclaimed { candidate: true });
    }

    #[test]
    fn a_claim_outlives_its_database_only_while_someone_else_wants_the_name() {
        let g = claimed(group(NamespacesFrom::All, None), &[("counter-app", "counter-app"), ("gone", "x")]);
        let victim = db("counter-app", "counter-app", 10);
        let squatter = db("tenant-b", "counter-app", 0);
        let first = g.status.as_ref().unwrap().instance_claims[0].clone();
        // Everyone in place: only the claim nobody wants goes.
        assert_eq!(pruned_claims(&g, &[victim.clone(), squatter.clone()], names, None), Some(vec![first.clone()]));
        // The victim deleted (a replace --force): the squatter wants the name,
        // so the claim stays for the victim's return.
        assert_eq!(pruned_claims(&g, std::slice::from_ref(&squatter), names, None), Some(vec![first]));
        // Nobody wants it: dropped.
        let g1 = claimed(group(NamespacesFrom::All, None), &[("counter-app", "counter-app")]);
        assert_eq!(pruned_claims(&g1, &[], names, None), Some(vec![]));
        // A cluster admin released it.
        assert_eq!(pruned_claims(&g1, &[victim.clone(), squatter.clone()], names, Some("counter-app")), Some(vec![]));
        assert_eq!(pruned_claims(&g1, &[victim, squatter], names, None), None);
    }

    #[test]
    fn one_writer_claims_every_wanted_name_at_once_oldest_first_within_the_bounds() {
        let mut g = group(NamespacesFrom::All, None);
        g.spec.allowed_databases.max_instances = 4;
        g.spec.allowed_databases.max_instances_per_namespace = 2;
        // A tenant's storm, older than the other tenant's one database.
        let storm: Vec<_> = (0..5).map(|i| db("tenant-a", &format!("db-{i}"), i)).collect();
        let other = db("tenant-b", "ledger", 100);
        let all: Vec<_> = storm.iter().chain([&other]).cloned().collect();
        let claims = claims_to_hold(&g, &all, names, None).expect("claims to write");
        let held: Vec<_> = claims.iter().map(|c| (c.instance.as_str(), c.namespace.as_str())).collect();
        // tenant-a gets its two (the oldest), and tenant-b is not starved.
        assert_eq!(held, [("db-0", "tenant-a"), ("db-1", "tenant-a"), ("ledger", "tenant-b")]);
        let g = claimed(g, &held);
        assert_eq!(claims_to_hold(&g, &all, names, None), None, "nothing more fits: nothing to write");
        match standing(&storm[2], Some(&g), &all, names) {
            Standing::ClaimLimitReached { limit } => assert!(limit.contains("maxInstancesPerNamespace (2)"), "{limit}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(standing(&other, Some(&g), &all, names), Standing::Authoritative);
        // The group's own bound.
        let mut full = g.clone();
        full.spec.allowed_databases.max_instances = 3;
        let late = db("tenant-c", "late", 200);
        let all2: Vec<_> = all.iter().cloned().chain([late.clone()]).collect();
        assert_eq!(claims_to_hold(&full, &all2, names, None), None);
        match standing(&late, Some(&full), &all2, names) {
            Standing::ClaimLimitReached { limit } => assert!(limit.contains("maxInstances (3)"), "{limit}"),
            other => panic!("{other:?}"),
        }
        // A database deleted frees its claim for the next one of its namespace.
        let fewer: Vec<_> = all.iter().filter(|d| d.name_any() != "db-0").cloned().collect();
        let claims = claims_to_hold(&g, &fewer, names, None).expect("pruned and claimed again");
        let held: Vec<_> = claims.iter().map(|c| c.instance.as_str()).collect();
        assert_eq!(held, ["db-1", "ledger", "db-2"]);
    }

    #[test]
    fn an_unclaimed_candidate_waits_for_the_group_and_a_younger_namesake_never_claims() {
        let g = group(NamespacesFrom::All, None);
        let first = db("team-a", "app", 0);
        let second = db("team-b", "app", 5);
        let all = [first.clone(), second.clone()];
        assert_eq!(standing(&first, Some(&g), &all, names), Standing::Unclaimed { candidate: true });
        assert_eq!(standing(&second, Some(&g), &all, names), Standing::Unclaimed { candidate: false });
        let claims = claims_to_hold(&g, &all, names, None).unwrap();
        assert_eq!(claims.len(), 1);
        assert_eq!((claims[0].instance.as_str(), claims[0].namespace.as_str()), ("app", "team-a"));
    }
}
