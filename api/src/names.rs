//! Well-known names: the API group, annotations, labels, the deploy-API
//! audience, ports and Lease names.

/// API group of every Bloodraven custom resource.
pub const GROUP: &str = "bloodraven.shipstream.io";

/// Version of the custom resources this crate describes.
pub const VERSION: &str = "v1alpha1";

/// Namespace the operator and webhook run in, in the chart and the playground.
pub const DEFAULT_NAMESPACE: &str = "bloodraven";

/// Name of the operator's leader-election `coordination.k8s.io/v1` Lease, in
/// the operator's namespace. Separate from every deploy Lease.
pub const LEADER_LEASE_NAME: &str = "bloodraven-leader";

/// Audience a deploy-API caller's projected ServiceAccount token must carry
/// (docs/deploy-api.md, "Who may ask").
pub const DEPLOY_AUDIENCE: &str = "bloodraven-deploy";

/// TLS port of the deploy API (`/deploy/v1`).
pub const DEPLOY_API_PORT: u16 = 8443;

/// Plain HTTP port for `/metrics`, `/healthz` and `/readyz`; never serves `/deploy`.
pub const PLAIN_PORT: u16 = 8082;

/// TLS port of the admission webhook.
pub const WEBHOOK_PORT: u16 = 9443;

/// Annotation on a MysqlFailoverGroup that revokes every deploy lease of the
/// group with reason `OperatorRevoked` (docs/deploy-api.md, "Revocation and tombstones").
pub const REVOKE_DEPLOYMENT_LEASES_ANNOTATION: &str = "bloodraven.shipstream.io/revoke-deployment-leases";

/// Annotation on a MysqlFailoverGroup beside [`REVOKE_DEPLOYMENT_LEASES_ANNOTATION`]:
/// who asked, as the API server names the user (`kubectl bloodraven revoke`
/// writes it). The webhook admits only the requesting user's own name; the
/// operator says it in its Events and removes it with the revocation's.
pub const REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION: &str = "bloodraven.shipstream.io/revoke-deployment-leases-by";

/// Annotation on a MysqlFailoverGroup beside [`SCHEMA_VERIFIED_ANNOTATION`]:
/// who verified the schema, as the API server names the user (`kubectl
/// bloodraven verify-schema` writes it); admitted and removed as
/// [`REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION`] is.
pub const SCHEMA_VERIFIED_BY_ANNOTATION: &str = "bloodraven.shipstream.io/schema-verified-by";

/// Server-side-apply field manager of the operator's observations
/// (`status.health`, `status.conditions`, `status.observedGeneration`,
/// `status.stable`, `status.unstableReason`): the one writer of the group's
/// stability.
pub const OBSERVER_FIELD_MANAGER: &str = "bloodraven-operator-observer";

/// Field manager of the operator's authoritative decisions
/// (`status.activeSite` with `status.topologyGeneration`, and
/// `status.emergencyFailover` with the decision it describes), written as
/// one update with a resourceVersion precondition; also of the decision
/// records.
pub const DECIDER_FIELD_MANAGER: &str = "bloodraven-operator-decider";

/// Key of the username in a site's credentials Secret.
pub const SECRET_USERNAME_KEY: &str = "username";

/// Key of the password in a site's credentials Secret.
pub const SECRET_PASSWORD_KEY: &str = "password";

/// Optional key of the replication account's name in a site's credentials
/// Secret: the account a repointed replica uses to connect to the new
/// primary (`REPLICATION SLAVE`). Absent: the operator's own account.
pub const SECRET_REPLICATION_USERNAME_KEY: &str = "replicationUsername";

/// Optional key of the replication account's password (with
/// [`SECRET_REPLICATION_USERNAME_KEY`]).
pub const SECRET_REPLICATION_PASSWORD_KEY: &str = "replicationPassword";

/// Field manager of the failover engine's progress (`status.plannedFailover`,
/// `status.ignoredPlannedFailover`).
pub const ENGINE_FIELD_MANAGER: &str = "bloodraven-operator-engine";

/// Finalizer on every MysqlFailoverGroup the operator manages: the group's
/// deploy Leases, tombstones, verification records and decision record are
/// deleted before the group is, whichever replica leads when it is deleted.
pub const GROUP_FINALIZER: &str = "bloodraven.shipstream.io/cleanup";

/// Annotation on a MysqlFailoverGroup by which a person says the schema was
/// verified after a lease was lost mid-DDL: a comma-separated list of
/// operationIds, or `all`. The operator clears the matching
/// `SchemaVerificationRequired` records, then removes the annotation.
pub const SCHEMA_VERIFIED_ANNOTATION: &str = "bloodraven.shipstream.io/schema-verified";

/// Annotation on a MysqlFailoverGroup by which a cluster admin hands an
/// instance name over: the value is the instance whose claim
/// (`status.instanceClaims`) is dropped, so the oldest accepted
/// MysqlDatabase of that name claims it next. The operator removes it.
pub const RELEASE_INSTANCE_ANNOTATION: &str = "bloodraven.shipstream.io/release-instance";

/// Annotation on a MysqlFailoverGroup by which a person accepts that an
/// emergency promotion abandons more transactions than
/// `spec.failover.maxAbandonedTransactions`: `<standby>@<topologyGeneration>`
/// (the generation the group is at, so an annotation left behind never
/// accepts a later failover). The operator records the acceptance (status,
/// decision record, Event) and removes the annotation.
pub const PROMOTE_DESPITE_LOSS_ANNOTATION: &str = "bloodraven.shipstream.io/promote-despite-loss";

/// Annotation on a MysqlFailoverGroup by which a person says the old
/// primary of a restore-in-place was re-cloned from the new primary:
/// `<site>@<topologyGeneration>` (the site named in
/// `status.restoreInPlace.recloneSite` and the generation the restore
/// decided, so an annotation left behind never releases the old primary of
/// a later restore). Until then that site stays fenced, out of replication
/// and is never promoted. The operator records the mark
/// (`status.restoreInPlace.recloneDoneTime`, an Event), completes the
/// request and removes the annotation.
pub const RECLONE_DONE_ANNOTATION: &str = "bloodraven.shipstream.io/reclone-done";

/// Group annotation setting sites' identities by hand: `"site=serverId,…"`
/// (a server replaced on purpose with a new `server_id`); see
/// `status.health[].identity`.
pub const SITE_IDENTITY_ANNOTATION: &str = "bloodraven.shipstream.io/site-identity";

/// Field manager of the operator's instance claims (`status.instanceClaims`).
pub const CLAIMS_FIELD_MANAGER: &str = "bloodraven-operator-claims";

/// Field manager of the `<mysqldatabase>-primary` Services and
/// EndpointSlices the operator keeps (server-side apply).
pub const PRIMARY_SERVICE_FIELD_MANAGER: &str = "bloodraven-operator-primary";

/// Suffix of the Service that points at a MysqlDatabase's primary:
/// `<mysqldatabase>-primary`, in the MysqlDatabase's namespace.
pub const PRIMARY_SERVICE_SUFFIX: &str = "-primary";

/// Label on the `-primary` Service and EndpointSlice: the name of the
/// MysqlDatabase they belong to (the operator watches objects carrying it).
pub const PRIMARY_OF_LABEL: &str = "bloodraven.shipstream.io/primary-of";

/// Annotation on the `-primary` Service and EndpointSlice: the failover group.
pub const GROUP_ANNOTATION: &str = "bloodraven.shipstream.io/group";

/// Annotation on the `-primary` Service and EndpointSlice: the active site
/// they point at.
pub const ACTIVE_SITE_ANNOTATION: &str = "bloodraven.shipstream.io/active-site";

/// Annotation on the `-primary` Service and EndpointSlice: the group's
/// `status.topologyGeneration` they were written for.
pub const TOPOLOGY_GENERATION_ANNOTATION: &str = "bloodraven.shipstream.io/topology-generation";

/// `app.kubernetes.io/managed-by` value of objects the operator creates.
pub const MANAGED_BY: &str = "bloodraven-operator";

/// `endpointslice.kubernetes.io/managed-by` value of the EndpointSlices the
/// operator keeps, so the EndpointSlice controller leaves them alone.
pub const ENDPOINT_SLICE_MANAGER: &str = "bloodraven.shipstream.io";

/// Port the `-primary` Service listens on when it is a ClusterIP Service
/// (the site's own port is the target): MySQL's well-known port.
pub const PRIMARY_SERVICE_PORT: u16 = 3306;

/// Name prefixes of the operator's state objects in its namespace, by
/// resource: deploy Leases, tombstones and
/// verification records; decision-record ConfigMaps; the decision-record
/// key Secret. Only the operator's ServiceAccount may write or delete them
/// (the webhook's `operator-state` guard).
pub mod state {
    /// `coordination.k8s.io` Leases: lease slots, tombstones, verification records.
    pub const LEASE_PREFIXES: [&str; 3] = ["bloodraven-deploy-", "bloodraven-tombstone-", "bloodraven-verify-"];
    /// ConfigMaps: the decision records `bloodraven-topology-<hash>`.
    pub const CONFIGMAP_PREFIXES: [&str; 1] = ["bloodraven-topology-"];
    /// Secrets: the decision-record digest key `bloodraven-record-key` (a full name).
    pub const SECRET_NAMES: [&str; 1] = ["bloodraven-record-key"];

    /// The decision record of `group` (fixed length, whatever the group's
    /// name): `bloodraven-topology-<sha256(group)[..16]>`. Its data holds
    /// `group`, `groupUID`, `activeSite` and `topologyGeneration`.
    pub fn record_name(group: &str) -> String {
        use sha2::{Digest, Sha256};
        let hex = format!("{:x}", Sha256::digest(group.as_bytes()));
        format!("{}{}", CONFIGMAP_PREFIXES[0], &hex[..16])
    }
}

/// History tables of known migration tools, and Bloodraven's own runner's
/// (`bloodraven_schema_history`). The sidecar fingerprints their rows to
/// detect the DDL boundary of a migration that does not report it; the
/// migration runner stops before its first revision on a schema that
/// another tool's table says is managed (`--ignore-foreign-history`).
pub const HISTORY_TABLES: &[&str] = &[
    "flyway_schema_history",
    "schema_migrations",
    "_prisma_migrations",
    "alembic_version",
    "goose_db_version",
    "bloodraven_schema_history",
];

/// Annotations and names of sidecar injection into a migration Job (the
/// webhook's mutating half; docs/webhook.md).
pub mod inject {
    /// `"true"` asks for injection.
    pub const INJECT: &str = "bloodraven.shipstream.io/inject";
    /// The MysqlFailoverGroup (required with [`INJECT`]).
    pub const GROUP: &str = "bloodraven.shipstream.io/group";
    /// The instance: the MysqlDatabase's name (required with [`INJECT`]).
    pub const INSTANCE: &str = "bloodraven.shipstream.io/instance";
    /// Optional: the container that runs the migration, when the Pod has several.
    pub const CONTAINER: &str = "bloodraven.shipstream.io/container";
    /// Optional: the lease TTL in seconds (the sidecar's `--ttl`, [5, 120]).
    pub const TTL: &str = "bloodraven.shipstream.io/ttl";
    /// Optional: the sidecar's `--ddl-boundary` (`at-start` or `reported`).
    pub const DDL_BOUNDARY: &str = "bloodraven.shipstream.io/ddl-boundary";
    /// Optional: a Secret of the Job's namespace holding the migration's
    /// database URL (`NAME`, key `url`, or `NAME/KEY`), mounted in the
    /// sidecar only as its `--db-url-file`: the sidecar then learns the
    /// DDL boundary from the schema and the history tables
    /// (`--ddl-boundary=reported`).
    pub const DB_URL_SECRET: &str = "bloodraven.shipstream.io/db-url-secret";
    /// Set by the webhook on a Job it injected: the webhook's version.
    pub const INJECTED: &str = "bloodraven.shipstream.io/injected";
    /// The injected native sidecar (an init container, `restartPolicy: Always`).
    pub const SIDECAR_CONTAINER: &str = "bloodraven-sidecar";
    /// The injected init container that copies the wrapper into the shared volume.
    pub const INSTALL_CONTAINER: &str = "bloodraven-install";
    /// The shared emptyDir (local socket, state file, the wrapper binary).
    pub const RUN_VOLUME: &str = "bloodraven-run";
    /// The projected ServiceAccount token (audience `bloodraven-deploy`), mounted in the sidecar only.
    pub const TOKEN_VOLUME: &str = "bloodraven-token";
    /// The Secret volume of [`DB_URL_SECRET`], mounted in the sidecar only.
    pub const DB_URL_VOLUME: &str = "bloodraven-db-url";
    /// Where [`DB_URL_VOLUME`] is mounted; the URL is the file `url` there.
    pub const DB_URL_DIR: &str = "/var/run/secrets/bloodraven-db";
    /// Where the shared volume is mounted in every container that uses it.
    pub const RUN_DIR: &str = "/run/bloodraven";
    /// The wrapper the migration container's command is prefixed with.
    pub const WRAPPER: [&str; 3] = ["/run/bloodraven/bin/bloodraven-sidecar", "exec", "--"];
    /// The environment variable set to `"true"` on the migration container:
    /// `bloodraven-migrate apply --require-lease` — it refuses to touch the
    /// database (exit 8) when it finds no sidecar socket, so a copy of the
    /// Job that lost its sidecar fails instead of migrating unfenced.
    pub const REQUIRE_LEASE_ENV: &str = "BLOODRAVEN_MIGRATION_REQUIRE_LEASE";
}

/// The Jobs of the planned disruptions that run a user's Job (the ordered
/// update, restore-in-place): the labels the operator sets on each Job it
/// creates from a request's `jobTemplate`, and the environment it adds to
/// every container (init containers included), replacing a variable of the
/// same name.
pub mod site_job {
    /// Label: the site the Job works on.
    pub const SITE_LABEL: &str = "bloodraven.shipstream.io/site";
    /// Label: which request made it, [`OPERATION_ORDERED_UPDATE`] or
    /// [`OPERATION_RESTORE_IN_PLACE`].
    pub const OPERATION_LABEL: &str = "bloodraven.shipstream.io/operation";
    /// [`OPERATION_LABEL`] of an ordered update's Job.
    pub const OPERATION_ORDERED_UPDATE: &str = "ordered-update";
    /// [`OPERATION_LABEL`] of a restore-in-place's Job.
    pub const OPERATION_RESTORE_IN_PLACE: &str = "restore-in-place";
    /// Label a cluster admin puts on a namespace, with value
    /// [`NAMESPACE_ALLOWED`], to let requests run their Jobs there. The
    /// operator may create Jobs in any namespace, and a Job runs as any
    /// ServiceAccount of its namespace: without this opt-in, whoever may
    /// edit a group could run a Pod as `kube-system`'s accounts.
    pub const NAMESPACE_LABEL: &str = "bloodraven.shipstream.io/site-jobs";
    /// The value of [`NAMESPACE_LABEL`] that allows Jobs.
    pub const NAMESPACE_ALLOWED: &str = "allowed";
    /// Annotation a cluster admin puts beside [`NAMESPACE_LABEL`]: the
    /// MysqlFailoverGroups whose requests may run Jobs in the namespace,
    /// comma-separated, or [`NAMESPACE_ANY_GROUP`]. Whoever may edit one
    /// group must not run Pods as the ServiceAccounts, and with the
    /// Secrets, of a namespace a cluster admin allowed for another.
    pub const NAMESPACE_GROUPS_ANNOTATION: &str = "bloodraven.shipstream.io/site-jobs-groups";
    /// [`NAMESPACE_GROUPS_ANNOTATION`] for every group.
    pub const NAMESPACE_ANY_GROUP: &str = "*";
    /// Annotation: the request's `requestId` (up to 128 characters: too
    /// long for a label value).
    pub const REQUEST_ID_ANNOTATION: &str = "bloodraven.shipstream.io/request-id";

    /// Environment: the MysqlFailoverGroup's name.
    pub const GROUP_ENV: &str = "BLOODRAVEN_GROUP";
    /// Environment: the site's name (`spec.sites[].name`).
    pub const SITE_ENV: &str = "BLOODRAVEN_SITE";
    /// Environment: the site's `host`.
    pub const SITE_HOST_ENV: &str = "BLOODRAVEN_SITE_HOST";
    /// Environment: the site's `port`, in decimal.
    pub const SITE_PORT_ENV: &str = "BLOODRAVEN_SITE_PORT";
    /// Environment: the site's role in the request: [`ROLE_STANDBY`],
    /// [`ROLE_FORMER_PRIMARY`] or [`ROLE_RESTORE`].
    pub const SITE_ROLE_ENV: &str = "BLOODRAVEN_SITE_ROLE";
    /// Environment: the request's `requestId`.
    pub const REQUEST_ID_ENV: &str = "BLOODRAVEN_REQUEST_ID";

    /// [`SITE_ROLE_ENV`]: the ordered update's first Job, on the standby (a
    /// replica of the primary, which serves on).
    pub const ROLE_STANDBY: &str = "standby";
    /// [`SITE_ROLE_ENV`]: the ordered update's second Job, on the former
    /// primary after the switchover (a fenced replica of the new primary).
    pub const ROLE_FORMER_PRIMARY: &str = "former-primary";
    /// [`SITE_ROLE_ENV`]: restore-in-place's Job, on the site being
    /// restored (not the primary, which serves on).
    pub const ROLE_RESTORE: &str = "restore";
}

/// The deploy Lease objects the operator keeps in its namespace
/// (`bloodraven-deploy-*`, `bloodraven-tombstone-*`, `bloodraven-verify-*`):
/// their names, labels and annotations, for every component that reads them
/// (the operator writes them; the webhook refuses hand edits; tools and
/// tests read them). Names hash the group (and the operation), so any group
/// name and operationId fit in 63 characters.
pub mod deploy_lease {
    use sha2::{Digest, Sha256};

    use crate::deploy::LeaseKind;

    /// Label on every deploy Lease: what it is ([`ROLE_SLOT`],
    /// [`ROLE_TOMBSTONE`] or [`ROLE_VERIFICATION`]).
    pub const ROLE_LABEL: &str = "bloodraven.shipstream.io/deploy-lease";
    /// [`ROLE_LABEL`] of a lease slot (`bloodraven-deploy-…`).
    pub const ROLE_SLOT: &str = "slot";
    /// [`ROLE_LABEL`] of a revocation tombstone (`bloodraven-tombstone-…`).
    pub const ROLE_TOMBSTONE: &str = "tombstone";
    /// [`ROLE_LABEL`] of a schema-verification record (`bloodraven-verify-…`).
    pub const ROLE_VERIFICATION: &str = "verification";
    /// Label on every deploy Lease: [`group_hash`] of its group.
    pub const GROUP_HASH_LABEL: &str = "bloodraven.shipstream.io/group-hash";

    /// Prefix every deploy annotation shares; the operator owns every
    /// annotation under it on its Leases.
    pub const ANNOTATION_PREFIX: &str = "bloodraven.shipstream.io/";
    /// Annotation: the group's name.
    pub const GROUP: &str = "bloodraven.shipstream.io/group";
    /// Annotation: the group's UID (a Lease of another UID belongs to a deleted group).
    pub const GROUP_UID: &str = "bloodraven.shipstream.io/group-uid";
    /// Annotation on a slot: its kind (`migration`, `failover-hold`).
    pub const KIND: &str = "bloodraven.shipstream.io/kind";
    /// Annotation on a tombstone or verification record: the operationId
    /// (a slot keeps it in `spec.holderIdentity`).
    pub const OPERATION_ID: &str = "bloodraven.shipstream.io/operation-id";
    /// Annotation: the MysqlDatabase name.
    pub const INSTANCE: &str = "bloodraven.shipstream.io/instance";
    /// Annotation: hex SHA-256 of the lease token (never the token).
    pub const TOKEN_SHA256: &str = "bloodraven.shipstream.io/token-sha256";
    /// Annotation: the topology generation of the grant (slot) or of the
    /// revocation (tombstone, verification record).
    pub const TOPOLOGY_GENERATION: &str = "bloodraven.shipstream.io/topology-generation";
    /// Annotation: the last reported `ddlState`.
    pub const DDL_STATE: &str = "bloodraven.shipstream.io/ddl-state";
    /// Annotation: the revision last reported with a renewal.
    pub const REVISION: &str = "bloodraven.shipstream.io/revision";
    /// Annotation on a tombstone: the [`crate::deploy::RevokeReason`].
    pub const REVOKE_REASON: &str = "bloodraven.shipstream.io/revoke-reason";
    /// Annotation: `namespace/serviceAccount` the grant was made to (not a secret).
    pub const CLIENT: &str = "bloodraven.shipstream.io/client";
    /// Annotation on a verification record: how the lease ended
    /// (`TopologyChanged`, `OperatorRevoked` or `Lapsed`).
    pub const ENDING: &str = "bloodraven.shipstream.io/ending";
    /// Annotation on the hold slot, written by a planned failover's admission.
    pub const ADMITTED: &str = "bloodraven.shipstream.io/admitted";
    /// Annotation on a verification record once its Event was published.
    pub const ANNOUNCED: &str = "bloodraven.shipstream.io/announced";

    /// Hex SHA-256 of `s`, its first `n` characters (n ≤ 64).
    fn short_hash(s: &str, n: usize) -> String {
        let mut hex = format!("{:x}", Sha256::digest(s.as_bytes()));
        hex.truncate(n);
        hex
    }

    /// The value of [`GROUP_HASH_LABEL`] for `group`: 16 hex characters.
    pub fn group_hash(group: &str) -> String {
        short_hash(group, 16)
    }

    /// What names an operation's records: its client and operationId (two
    /// tenants may pick the same operationId), or the operationId alone for
    /// a grant stored before grants recorded their client.
    fn operation_key(client: Option<&str>, operation_id: &str) -> String {
        match client {
            Some(c) => format!("{c}\n{operation_id}"),
            None => operation_id.to_owned(),
        }
    }

    /// `bloodraven-deploy-<h(group)>-<kind>`: a group's slot Lease of `kind`.
    pub fn slot_name(group: &str, kind: LeaseKind) -> String {
        format!("bloodraven-deploy-{}-{}", group_hash(group), kind.as_str())
    }

    /// `bloodraven-tombstone-<h(group)>-<h(client, operationId)>`: the
    /// tombstone of `client`'s revoked operation.
    pub fn tombstone_name(group: &str, client: Option<&str>, operation_id: &str) -> String {
        format!("bloodraven-tombstone-{}-{}", group_hash(group), short_hash(&operation_key(client, operation_id), 16))
    }

    /// `bloodraven-verify-<h(group)>-<h(client, operationId)>`: the
    /// verification record of `client`'s operation.
    pub fn verification_name(group: &str, client: Option<&str>, operation_id: &str) -> String {
        format!("bloodraven-verify-{}-{}", group_hash(group), short_hash(&operation_key(client, operation_id), 16))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn names_fit_any_group_and_tell_tenants_apart() {
            let long = "g".repeat(253);
            assert!(slot_name(&long, LeaseKind::FailoverHold).len() <= 63);
            assert!(tombstone_name(&long, Some(&"c".repeat(300)), &"o".repeat(128)).len() <= 63);
            assert!(verification_name(&long, Some(&"c".repeat(300)), &"o".repeat(128)).len() <= 63);
            assert_ne!(tombstone_name("g", None, "a"), tombstone_name("g", None, "b"));
            assert_ne!(
                tombstone_name("g", Some("tenant-a/sa"), "release-1"),
                tombstone_name("g", Some("tenant-b/sa"), "release-1"),
                "two tenants' operations of one id are two records"
            );
            // The names stored Leases already have: they must not change.
            assert_eq!(slot_name("playground", LeaseKind::Migration), "bloodraven-deploy-f3cc87f78b21d53d-migration");
            assert_eq!(group_hash("playground").len(), 16);
        }
    }
}

/// What the operator and the webhook keep of an object's metadata in their
/// watch caches. Tenants write MysqlDatabases, and may label any Service of
/// theirs `primary-of`; an object may carry up to 256 KiB of annotations
/// and any number of labels, none of which either process reads. Kept as
/// stored, 470 MysqlDatabases with 240 KiB of annotations each took the
/// operator (256 MiB) and both webhook replicas (128 MiB) out of memory.
#[cfg(feature = "crd")]
pub mod cached {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// The annotations read from a cached MysqlFailoverGroup (written by
    /// cluster admins and the operator): the operator's own.
    pub const GROUP_ANNOTATIONS: [&str; 8] = [
        super::REVOKE_DEPLOYMENT_LEASES_ANNOTATION,
        super::REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION,
        super::SCHEMA_VERIFIED_ANNOTATION,
        super::SCHEMA_VERIFIED_BY_ANNOTATION,
        super::RELEASE_INSTANCE_ANNOTATION,
        super::PROMOTE_DESPITE_LOSS_ANNOTATION,
        super::SITE_IDENTITY_ANNOTATION,
        super::RECLONE_DONE_ANNOTATION,
    ];

    /// The annotations read from a cached `-primary` Service.
    pub const SERVICE_ANNOTATIONS: [&str; 3] =
        [super::GROUP_ANNOTATION, super::ACTIVE_SITE_ANNOTATION, super::TOPOLOGY_GENERATION_ANNOTATION];

    /// Page size of the first list of a watch of objects tenants write:
    /// kube's default (500) holds 500 objects of up to 1.5 MiB in memory at
    /// once before any of them is trimmed.
    pub const LIST_PAGE: u32 = 50;

    /// The label prefixes read from a cached Service or EndpointSlice: the
    /// operator's own, and Kubernetes' that say who routes it
    /// (`service.kubernetes.io/…`, `endpointslice.kubernetes.io/…`,
    /// `kubernetes.io/service-name`, `app.kubernetes.io/managed-by`).
    pub const ROUTING_LABEL_PREFIXES: [&str; 5] = [
        "bloodraven.shipstream.io/",
        "service.kubernetes.io/",
        "endpointslice.kubernetes.io/",
        "kubernetes.io/service-name",
        "app.kubernetes.io/managed-by",
    ];

    /// Whether a label is one [`ROUTING_LABEL_PREFIXES`] names.
    pub fn routing_label(key: &str) -> bool {
        ROUTING_LABEL_PREFIXES.iter().any(|p| key.starts_with(p))
    }

    /// All labels (objects cluster admins write).
    pub fn all_labels(_: &str) -> bool {
        true
    }

    /// No label.
    pub fn no_labels(_: &str) -> bool {
        false
    }

    /// Drops `managedFields`, every annotation but `annotations`, and every
    /// label `keep_label` refuses.
    pub fn trim(meta: &mut ObjectMeta, annotations: &[&str], keep_label: fn(&str) -> bool) {
        meta.managed_fields = None;
        if let Some(a) = meta.annotations.take() {
            let kept: BTreeMap<String, String> =
                a.into_iter().filter(|(k, _)| annotations.contains(&k.as_str())).collect();
            meta.annotations = (!kept.is_empty()).then_some(kept);
        }
        if let Some(l) = meta.labels.take() {
            let kept: BTreeMap<String, String> = l.into_iter().filter(|(k, _)| keep_label(k)).collect();
            meta.labels = (!kept.is_empty()).then_some(kept);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn only_what_is_read_is_kept() {
            let mut meta = ObjectMeta {
                annotations: Some(BTreeMap::from([
                    ("x".repeat(64), "y".repeat(240 * 1024)),
                    (super::super::RELEASE_INSTANCE_ANNOTATION.to_owned(), "ledger".to_owned()),
                ])),
                labels: Some(BTreeMap::from([("team".to_owned(), "a".to_owned())])),
                managed_fields: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry::default(),
                ]),
                ..ObjectMeta::default()
            };
            let mut group = meta.clone();
            trim(&mut group, &GROUP_ANNOTATIONS, all_labels);
            assert_eq!(group.annotations.unwrap().len(), 1);
            assert!(group.labels.is_some() && group.managed_fields.is_none());
            let mut service = meta.clone();
            service.labels.get_or_insert_default().insert("service.kubernetes.io/headless".into(), String::new());
            trim(&mut service, &SERVICE_ANNOTATIONS, routing_label);
            assert_eq!(service.labels.unwrap().into_keys().collect::<Vec<_>>(), ["service.kubernetes.io/headless"]);
            trim(&mut meta, &[], no_labels);
            assert!(meta.annotations.is_none() && meta.labels.is_none());
        }
    }
}
