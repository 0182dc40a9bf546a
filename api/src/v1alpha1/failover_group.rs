//! `MysqlFailoverGroup`: a two-site MySQL/MariaDB failover group.
//!
//! The spec is the user's intent: the two sites, which one bootstrap expects
//! to find writable, the failover policy and an optional planned failover
//! request. The status is the operator's alone (the webhook refuses status
//! writes by anyone else): observations (`health`, `conditions`, `stable`)
//! written by server-side apply, and decisions (`activeSite` with
//! `topologyGeneration`) written by one update with a resourceVersion
//! precondition, so a decision is never lost to a concurrent observation.
//!
//! Invariant: `status.topologyGeneration` increases by exactly one on every
//! authoritative change of active site (bootstrap completion included) and
//! never otherwise; it is not `metadata.generation` (docs/concepts.md, "The
//! generation is the fence").

use super::ordered_update::{OrderedUpdateRequest, OrderedUpdateStatus};
use super::planned_failover::{IgnoredRequest, PlannedFailoverRequest, PlannedFailoverStatus};
use super::restore_in_place::{RestoreInPlaceRequest, RestoreInPlaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a two-site failover group. Cluster-scoped: the deploy API
/// addresses a group by name alone.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "bloodraven.shipstream.io",
    version = "v1alpha1",
    kind = "MysqlFailoverGroup",
    plural = "mysqlfailovergroups",
    shortname = "mfg",
    category = "bloodraven",
    status = "MysqlFailoverGroupStatus",
    printcolumn = r#"{"name":"Active","type":"string","jsonPath":".status.activeSite","description":"Site holding the primary role"}"#,
    printcolumn = r#"{"name":"Generation","type":"integer","jsonPath":".status.topologyGeneration","description":"Durable count of authoritative active-site changes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"One writable primary at the active site and a replica following it"}"#,
    printcolumn = r#"{"name":"Stable","type":"boolean","jsonPath":".status.stable","description":"False during any operation or unhealthy state"}"#,
    printcolumn = r#"{"name":"Request","type":"string","jsonPath":".status.plannedFailover.requestId","description":"The planned failover in progress or last finished"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.plannedFailover.phase","description":"Its phase"}"#,
    printcolumn = r#"{"name":"Verify-Schema","type":"string","jsonPath":".status.conditions[?(@.type==\"SchemaVerificationRequired\")].status","description":"True: a migration was revoked after its DDL started; a person must verify the schema"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.unstableReason","priority":1}"#,
    printcolumn = r#"{"name":"Update","type":"string","jsonPath":".status.orderedUpdate.phase","description":"The ordered update in progress or last finished: its phase","priority":1}"#,
    printcolumn = r#"{"name":"Restore","type":"string","jsonPath":".status.restoreInPlace.phase","description":"The restore-in-place in progress or last finished: its phase","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("size(self.sites) > 2 || self.sites.exists(s, s.name == self.initialActiveSite)").message("initialActiveSite must name one of spec.sites").reason(kube::core::Reason::FieldValueInvalid).field_path(".initialActiveSite"))]
#[x_kube(validation = Rule::new("size(self.sites) != 2 || self.sites[0].host != self.sites[1].host || self.sites[0].port != self.sites[1].port").message("the two sites must be different servers (host or port must differ)").reason(kube::core::Reason::FieldValueInvalid).field_path(".sites"))]
#[x_kube(validation = Rule::new("size(self.sites) > 2 || size(oldSelf.sites) > 2 || self.sites.all(s, oldSelf.sites.exists(o, o.name == s.name))").message("site names cannot change: status and history refer to them; create a new group to rename a site").reason(kube::core::Reason::FieldValueForbidden).field_path(".sites"))]
#[x_kube(validation = Rule::new("!has(self.plannedFailover) || size(self.sites) > 2 || self.sites.exists(s, s.name == self.plannedFailover.targetSite)").message("plannedFailover.targetSite must name one of spec.sites").reason(kube::core::Reason::FieldValueInvalid).field_path(".plannedFailover.targetSite"))]
#[x_kube(validation = Rule::new("!has(self.restoreInPlace) || !has(self.restoreInPlace.site) || size(self.sites) > 2 || self.sites.exists(s, s.name == self.restoreInPlace.site)").message("restoreInPlace.site must name one of spec.sites").reason(kube::core::Reason::FieldValueInvalid).field_path(".restoreInPlace.site"))]
#[serde(rename_all = "camelCase")]
pub struct MysqlFailoverGroupSpec {
    /// The two sites of the group, each a MySQL or MariaDB server. Exactly two;
    /// names are unique (a list keyed by `name`).
    #[schemars(length(min = 2, max = 2))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub sites: Vec<Site>,

    /// Name of the site bootstrap expects to find writable, with the other
    /// site replicating from it. Used only until the group is bootstrapped
    /// (`status.topologyGeneration` set); after that `status.activeSite` rules.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))]
    pub initial_active_site: String,

    /// Probing and automatic (emergency) failover policy.
    #[serde(default)]
    pub failover: FailoverPolicy,

    /// A planned failover request. Setting a new `requestId`
    /// asks the operator to move the primary to `targetSite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_failover: Option<PlannedFailoverRequest>,

    /// An ordered update: a user-supplied Job run once per site, standby
    /// first; then a switchover to the updated standby, made as a planned
    /// failover makes it (generation + 1); then the former primary's Job,
    /// on a fenced replica of the new primary; then, with `switchBack`, a
    /// second switchover back. A Job never runs on the primary. Setting a
    /// new `requestId` asks the operator to run it; a request runs once.
    /// Progress is in `status.orderedUpdate`.
    ///
    /// One operation at a time per group: a request taken up while another
    /// ordered update, restore-in-place or planned failover is in flight,
    /// or while the group is not stable, is refused at admission: it ends
    /// `Failed` with a message naming what is in the way, touches nothing,
    /// and is not retried (request again, with a new `requestId`, once the
    /// other is final). A live deploy failover-hold defers it instead
    /// (`Deferred`, retried when the hold ends, as a planned failover).
    // Boxed, as are the other disruptions' requests and statuses: a group
    // is held by value across the operator's awaits, and four more inline
    // structs put those futures past clippy's `large_futures` bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered_update: Option<Box<OrderedUpdateRequest>>,

    /// A restore-in-place: a user-supplied Job restores one site (default
    /// the standby) from the user's backup while the primary serves on;
    /// the operator then checks the restored site (it answers, does not
    /// replicate, and is the server the site is known as), fences the old
    /// primary, decides (generation + 1; every deploy lease is revoked),
    /// promotes the restored site and points the `-primary` Services at it.
    /// Writes the old primary took after the backup are not in the restored
    /// data: that is what the request asks for, and why it is never
    /// automatic. The old primary then stays fenced, out of replication and
    /// never promoted (`status.restoreInPlace.recloneSite`) until a person
    /// re-clones it from the new primary and sets the group annotation
    /// `bloodraven.shipstream.io/reclone-done: <site>@<topologyGeneration>`;
    /// only then does the request complete. Setting a new `requestId` asks
    /// the operator to run it; a request runs once. Progress is in
    /// `status.restoreInPlace`.
    ///
    /// One operation at a time per group: a request taken up while another
    /// restore-in-place, ordered update or planned failover is in flight
    /// (a restore awaiting its re-clone mark is in flight) is refused at
    /// admission: it ends `Failed` with a message naming what is in the
    /// way, touches nothing, and is not retried (request again, with a new
    /// `requestId`, once the other is final). A live deploy failover-hold
    /// defers it instead (`Deferred`, retried when the hold ends, as a
    /// planned failover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_in_place: Option<Box<RestoreInPlaceRequest>>,

    /// Which namespaces may attach MysqlDatabases to this group (the Gateway
    /// API `allowedRoutes` pattern). A MysqlDatabase in any other namespace
    /// gets `Ready=False` (`NamespaceNotAllowed`) and no deploy-API
    /// authority. Default: no namespace — a cluster-scoped group is shared
    /// infrastructure, and attaching to it grants a group-wide migration
    /// mutex, so the cluster admin opts namespaces in.
    #[serde(default)]
    pub allowed_databases: AllowedDatabases,
}

/// Which MysqlDatabases may attach to a group.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedDatabases {
    /// The namespaces whose MysqlDatabases may attach.
    #[serde(default)]
    pub namespaces: DatabaseNamespaces,
    /// The most instance names the group holds claims for (its
    /// `status.instanceClaims`); a MysqlDatabase past it gets `Ready=False`
    /// (`ClaimLimitReached`). Bounds the group's status, which every
    /// failover writes: 1,000 claims of the longest names (253-character
    /// instances, 63-character namespaces) are 347,031 bytes of JSON, well
    /// under the API server's 1.5 MiB object limit.
    #[serde(default = "default_max_instances")]
    #[schemars(range(min = 1, max = MAX_INSTANCE_CLAIMS))]
    pub max_instances: u32,
    /// The most instance names one namespace may claim on the group, so
    /// one tenant cannot take every claim from the others.
    #[serde(default = "default_max_instances_per_namespace")]
    #[schemars(range(min = 1, max = MAX_INSTANCE_CLAIMS))]
    pub max_instances_per_namespace: u32,
}

/// The largest `maxInstances` (and so the longest `status.instanceClaims`).
pub const MAX_INSTANCE_CLAIMS: u32 = 1000;

fn default_max_instances() -> u32 {
    MAX_INSTANCE_CLAIMS
}

fn default_max_instances_per_namespace() -> u32 {
    100
}

impl Default for AllowedDatabases {
    fn default() -> Self {
        Self {
            namespaces: DatabaseNamespaces::default(),
            max_instances: default_max_instances(),
            max_instances_per_namespace: default_max_instances_per_namespace(),
        }
    }
}

/// Namespaces allowed to attach MysqlDatabases to a group.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("self.from != 'Selector' || has(self.selector)").message("from: Selector needs a selector").reason(kube::core::Reason::FieldValueRequired).field_path(".selector"))]
#[serde(rename_all = "camelCase")]
pub struct DatabaseNamespaces {
    /// `None` (default): no namespace; `All`: every namespace; `Selector`:
    /// namespaces whose labels match `selector` (every namespace carries
    /// `kubernetes.io/metadata.name: <name>`, so a list of names is a
    /// `matchExpressions` `In` on that key).
    #[serde(default)]
    pub from: NamespacesFrom,
    /// Label selector over Namespaces; required when `from` is `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

impl DatabaseNamespaces {
    /// Whether a namespace with `labels` may attach MysqlDatabases (`None`:
    /// the namespace is not known, which only `All` accepts). A selector the
    /// API server accepted but that cannot be read allows nothing. The one
    /// rule the operator (claims) and the webhook (an early refusal) share.
    pub fn admits(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        match self.from {
            NamespacesFrom::None => false,
            NamespacesFrom::All => true,
            NamespacesFrom::Selector => {
                let (Some(selector), Some(labels)) = (self.selector.clone(), labels) else { return false };
                kube::core::Selector::try_from(selector).is_ok_and(|s| kube::core::SelectorExt::matches(&s, labels))
            }
        }
    }
}

/// Where a group accepts MysqlDatabases from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NamespacesFrom {
    /// No namespace may attach (the default).
    #[default]
    None,
    /// Every namespace may attach.
    All,
    /// Namespaces matching `selector` may attach.
    Selector,
}

/// One site of a group: where its server listens and how to log in.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Site {
    /// Site name, a DNS label (e.g. `iad`, `pdx`); used in status, metrics and the deploy API.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Host name or IP address of the site's MySQL/MariaDB server:
    /// a DNS name or IPv4 address, or an IPv6 address without brackets; never
    /// `host:port` (the port has its own field).
    #[schemars(
        length(min = 1, max = 253),
        regex(
            pattern = r"^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*|[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)$"
        )
    )]
    pub host: String,
    /// TCP port of the server, 1–65535.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Secret holding the operator's account on this site, with keys
    /// `username` and `password`.
    pub credentials_secret_ref: SecretRef,
}

/// A reference to a Secret in a named namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SecretRef {
    /// Namespace of the Secret (a DNS label).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: String,
    /// Name of the Secret (a DNS subdomain).
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub name: String,
}

/// Probing and emergency-failover policy. The detection budget of an
/// emergency failover is about `failureThreshold × probeIntervalSeconds`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverPolicy {
    /// Whether the operator promotes the standby on its own when the primary
    /// fails. Default true.
    #[serde(default = "default_true")]
    pub automatic: bool,
    /// Seconds from the end of one round of probes to the start of the next,
    /// 1–300. Default 5. (Rounds never overlap, so a probe timeout longer
    /// than the interval only slows the rounds down.)
    #[serde(default = "default_probe_interval")]
    #[schemars(range(min = 1, max = 300))]
    pub probe_interval_seconds: u32,
    /// Consecutive failed probes of the primary before an emergency
    /// failover, 1–100. Default 3.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_threshold: u32,
    /// Seconds a single probe (connect and queries) may take, 1–60. Default 2.
    #[serde(default = "default_probe_timeout")]
    #[schemars(range(min = 1, max = 60))]
    pub probe_timeout_seconds: u32,
    /// Largest replication lag, in seconds, at which a planned failover is
    /// admitted, 0–86400. Default 10. Lag alone never makes a group unstable.
    #[serde(default = "default_max_lag")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_lag_seconds: u32,
    /// Seconds a planned failover may spend fencing the old primary
    /// (`read_only`, then ending client sessions), 1–300. Default 10. A
    /// transaction holding the global read lock longer than this fails the
    /// request with the old primary writable again and no generation
    /// change. Commits waiting for a semi-sync acknowledgement are not
    /// waited for past 1 s: their sessions are ended first.
    #[serde(default = "default_fence_timeout")]
    #[schemars(range(min = 1, max = 300))]
    pub fence_timeout_seconds: u32,
    /// Seconds a planned failover waits for the target to apply everything
    /// the fenced primary wrote (`MASTER_GTID_WAIT`), 1–3600. Default 30.
    /// Past it the request fails, the old primary is made writable again and
    /// the generation does not move.
    #[serde(default = "default_catch_up_timeout")]
    #[schemars(range(min = 1, max = 3600))]
    pub catch_up_timeout_seconds: u32,
    /// Semi-synchronous replication (AFTER_SYNC; MariaDB's built in, MySQL's
    /// plugins, which each site must load): the primary waits for the
    /// standby to acknowledge each commit before the client sees it, so an
    /// emergency failover loses no acknowledged write while the standby is
    /// connected. A site that cannot do it is named by the condition
    /// SemiSyncUnavailable. Default false (asynchronous: writes
    /// acknowledged in the last moments before a primary dies can be lost;
    /// see docs/failover-groups.md).
    #[serde(default)]
    pub semi_sync: bool,
    /// With semiSync, how long a commit on the primary may wait for an
    /// acknowledgement while no standby acknowledges before the operator
    /// falls back to asynchronous replication on it, 1–3600. Default 10
    /// (the servers' own default timeout). The operator sets the server's
    /// own timeout to its maximum, so the fallback is a decision about the
    /// decided primary only, and is reported (SemiSyncUnavailable, reason
    /// StandbyNotAcknowledging) until the standby acknowledges again: a
    /// paused or cut-off primary that runs again never acknowledges a
    /// commit its standby lacks.
    #[serde(default = "default_semi_sync_fallback")]
    #[schemars(range(min = 1, max = 3600))]
    pub semi_sync_fallback_seconds: u32,
    /// With semiSync, the timeout the operator sets on the primary's server
    /// (rpl_semi_sync_master_timeout, MySQL rpl_semi_sync_source_timeout),
    /// in seconds, 0–86400: the server's own fallback, for when the
    /// operator cannot act (it is down, or cut off from the primary). 0
    /// (the default) sets the largest the servers take, about 49 days:
    /// the server never falls back on its own, so a primary cut off from
    /// its standby and the operator, or paused and failed away from,
    /// acknowledges no commit its standby lacks, and while neither the
    /// standby nor the operator can act, commits wait until a person acts
    /// (docs/runbook.md, SemiSyncUnavailable). Any other value trades that
    /// for availability: past it the server acknowledges without the
    /// standby, and a primary cut off or paused longer loses those writes.
    #[serde(default)]
    #[schemars(range(min = 0, max = 86400))]
    pub semi_sync_server_timeout_seconds: u32,
    /// How many transactions an automatic (emergency) promotion may abandon,
    /// 0–1000000. Default 0. The abandoned transactions are those the
    /// operator last saw on the primary (its last answered probe) that the
    /// standby lacks at the decision: a standby that stopped receiving
    /// without its threads stopping. Beyond the bound nothing is promoted:
    /// the group waits (`RecoveryPending`, reason `StandbyBehind`) until the
    /// primary comes back, or a person accepts the loss with the annotation
    /// `bloodraven.shipstream.io/promote-despite-loss`. With semi-sync on,
    /// every acknowledged transaction reached the standby while it was
    /// connected, so what the bound counts is what the primary committed
    /// without an acknowledgement (after a semi-sync timeout).
    #[serde(default)]
    #[schemars(range(min = 0, max = 1_000_000))]
    pub max_abandoned_transactions: u32,
}

fn default_true() -> bool {
    true
}
fn default_probe_interval() -> u32 {
    5
}
fn default_failure_threshold() -> u32 {
    3
}
fn default_probe_timeout() -> u32 {
    2
}
fn default_max_lag() -> u32 {
    10
}
fn default_fence_timeout() -> u32 {
    10
}
fn default_catch_up_timeout() -> u32 {
    30
}
fn default_semi_sync_fallback() -> u32 {
    10
}

impl Default for FailoverPolicy {
    fn default() -> Self {
        FailoverPolicy {
            automatic: default_true(),
            probe_interval_seconds: default_probe_interval(),
            failure_threshold: default_failure_threshold(),
            probe_timeout_seconds: default_probe_timeout(),
            max_lag_seconds: default_max_lag(),
            fence_timeout_seconds: default_fence_timeout(),
            catch_up_timeout_seconds: default_catch_up_timeout(),
            semi_sync: false,
            semi_sync_fallback_seconds: default_semi_sync_fallback(),
            semi_sync_server_timeout_seconds: 0,
            max_abandoned_transactions: 0,
        }
    }
}

/// Observed and decided state of a group. Written by the operator only.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MysqlFailoverGroupStatus {
    /// The site the operator decided holds the primary role. Set by bootstrap
    /// and by every failover, together with `topologyGeneration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_site: Option<String>,
    /// Durable counter of authoritative active-site changes: 1 after
    /// bootstrap, +1 on each promotion. Absent until bootstrap completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub topology_generation: Option<i64>,
    /// False during any operation phase and whenever the group is Degraded,
    /// SplitBrain, NoPrimary, recovery is pending or replication is not
    /// running. Replication lag alone never makes it false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<bool>,
    /// Why `stable` is false: the first failing condition type, or the
    /// operation phase (e.g. `AutomaticFailoverHeld`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstable_reason: Option<String>,
    /// The last probe of each site.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["site"]))]
    pub health: Vec<SiteHealth>,
    /// Which namespace's MysqlDatabase speaks for each instance name of the
    /// group: the first accepted MysqlDatabase of a name claims it, and keeps
    /// it while it exists (deleting and re-creating it in the same namespace
    /// keeps it too); a same-named one elsewhere is a conflict, however old.
    /// A claim whose MysqlDatabase is gone is dropped only when no other
    /// claims the name, or by the `release-instance` annotation. Written by
    /// the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["instance"]), length(max = MAX_INSTANCE_CLAIMS))]
    pub instance_claims: Vec<InstanceClaim>,
    /// The planned failover in progress or last finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_failover: Option<PlannedFailoverStatus>,
    /// A `spec.plannedFailover` the operator did not take up because its
    /// `requestId` was taken up before: a request runs once. Cleared when a
    /// new request is taken up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_planned_failover: Option<IgnoredRequest>,
    /// The ordered update in progress or last finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered_update: Option<Box<OrderedUpdateStatus>>,
    /// The restore-in-place in progress or last finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_in_place: Option<Box<RestoreInPlaceStatus>>,
    /// A `spec.orderedUpdate` the operator did not take up because its
    /// `requestId` was taken up before: a request runs once. Cleared when a
    /// new ordered update is taken up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_ordered_update: Option<IgnoredRequest>,
    /// A `spec.restoreInPlace` the operator did not take up because its
    /// `requestId` was taken up before: a request runs once. Cleared when a
    /// new restore-in-place is taken up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_restore_in_place: Option<IgnoredRequest>,
    /// The last emergency failover, and what its promotion abandoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency_failover: Option<EmergencyFailoverStatus>,
    /// Kubernetes-style conditions: Ready, Degraded, SplitBrain, NoPrimary,
    /// ReplicationNotRunning, RecoveryPending, SchemaVerificationRequired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` of the spec the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// An emergency failover as the operator decided it: which site took over,
/// and what its promotion abandoned of what the primary was last seen with.
/// Kept (with the decision record) for the person who reconciles the old
/// primary.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmergencyFailoverStatus {
    /// When it was decided.
    pub time: Time,
    /// The former active site.
    pub from_site: String,
    /// The promoted site.
    pub to_site: String,
    /// The topology generation of the decision.
    pub topology_generation: i64,
    /// The former primary's GTID position at its last answered probe
    /// (absent when this operator never saw it answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_last_seen: Option<String>,
    /// The promoted site's GTID position at the decision.
    pub standby_position: String,
    /// The transactions the promotion abandoned (absent: none known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned_gtids: Option<String>,
    /// How many.
    #[serde(default)]
    pub abandoned_transactions: u64,
    /// Whether a person accepted the loss (`promote-despite-loss`).
    #[serde(default)]
    pub loss_accepted: bool,
}
/// An instance name and the namespace whose MysqlDatabase speaks for it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceClaim {
    /// The instance: a MysqlDatabase name.
    pub instance: String,
    /// The namespace of the MysqlDatabase that claimed it.
    pub namespace: String,
}

/// The result of the last probe of one site.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteHealth {
    /// Site name, from `spec.sites[].name`.
    pub site: String,
    /// Whether the operator could connect and run the probe queries.
    pub reachable: bool,
    /// Whether the server accepts writes (`read_only` = 0, and on MySQL
    /// `super_read_only` = 0). Absent when unreachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<bool>,
    /// Whether replication is configured, both the IO and SQL threads run,
    /// and it is not stalled (behind the active site by GTID without
    /// receiving or applying anything for a bound: see the
    /// `ReplicationNotRunning` condition). Absent when unreachable; false on
    /// a server with no replication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_running: Option<bool>,
    /// Seconds the replica is behind its source (`Seconds_Behind_Master`)
    /// at `lastProbeTime`; absent when not replicating or unknown. A move of
    /// less than 5 s and less than a fifth is not written by itself, only
    /// with the next change (`bloodraven_replication_lag_seconds` has every
    /// probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag_seconds: Option<u64>,
    /// The server's GTID position: `gtid_current_pos` on MariaDB,
    /// `gtid_executed` on MySQL, as last seen: at `lastProbeTime` when the
    /// site answered, else the last one it answered with (kept while it is
    /// unreachable). A moved position alone is not written, only with the
    /// next change, except while another site may lack the writable site's
    /// transactions: then at once, because a leader that takes over reads
    /// from here what a promotion would abandon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid_position: Option<String>,
    /// The `server_id` of the server this site replicates from, if any
    /// (0–4294967295: the bound is stated so a stored value always decodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4_294_967_295_u32))]
    pub source_server_id: Option<u32>,
    /// The site's own `server_id` (0–4294967295).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4_294_967_295_u32))]
    pub server_id: Option<u32>,
    /// Server version string, e.g. `10.11.14-MariaDB-0+deb12u2-log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `host:port` at which the site last answered a probe (kept while it
    /// does not answer). Automatic failover counts the active site's missed
    /// probes only at that endpoint: after its host or port changes in spec,
    /// it waits until the site has answered at the new one (a typo must not
    /// fail over a primary that is alive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_endpoint: Option<String>,
    /// The `server_id` the operator knows this site by (0–4294967295):
    /// learned when the site first answered (or, for a non-active site,
    /// when a server replicating from the active one answered there), and
    /// kept. A server answering at the site's address with another
    /// `server_id` is another server (a mistyped or swapped address): its
    /// probe fails with `UnexpectedServer` and nothing is done to it. The
    /// group annotation `bloodraven.shipstream.io/site-identity:
    /// "site=serverId,…"` sets it by hand (a server replaced on purpose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4_294_967_295_u32))]
    pub identity: Option<u32>,
    /// Transactions this site holds that the active site lacks (errant
    /// GTIDs), as last compared: a non-active site's executed GTID set is
    /// read on every probe round, then the active site's after it. Kept
    /// while the comparison cannot be made (either site unreachable): the
    /// transactions do not go away. A site with errant GTIDs is
    /// `SiteDiverged` and never a failover target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errant_gtids: Option<String>,
    /// Stable reason of the last probe failure (e.g. `SiteUnreachable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Human-readable detail of the last probe failure. Never holds a password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the probe was taken whose results this status holds: the
    /// last probe that changed the group's observed status. Status is
    /// written only when an observation changes (reachable, writable,
    /// replication, server ids, version, errors, conditions, lag by 5 s or
    /// a fifth, a new spec generation), never because it is old, and
    /// `health` is written whole, so every site carries the time of that
    /// one probe. A group that stays healthy keeps the same
    /// `lastProbeTime` for as long as nothing changes: this is not the
    /// time of the last probe and its age says nothing about whether the
    /// operator runs. The time of each site's last probe is the metric
    /// `bloodraven_site_last_probe_timestamp_seconds`; that the operator
    /// is alive shows in the leader Lease's `renewTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
}

impl MysqlFailoverGroup {
    /// The spec entry of the site named `name`, if any.
    pub fn site(&self, name: &str) -> Option<&Site> {
        self.spec.sites.iter().find(|s| s.name == name)
    }

    /// The decided active site and topology generation, when bootstrapped.
    pub fn decided(&self) -> Option<(&str, i64)> {
        let status = self.status.as_ref()?;
        Some((status.active_site.as_deref()?, status.topology_generation?))
    }
}
