//! Well-known names: the API group, annotations, labels, the deploy-API
//! audience, ports and Lease names. Source: `shared/DESIGN.md` ("Conventions")
//! and the lease seed (`shared/seeds/000_…`).

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
/// (lease seed: "Who is allowed to ask").
pub const DEPLOY_AUDIENCE: &str = "bloodraven-deploy";

/// TLS port of the deploy API (`/deploy/v1`).
pub const DEPLOY_API_PORT: u16 = 8443;

/// Plain HTTP port for `/metrics`, `/healthz` and `/readyz`; never serves `/deploy`.
pub const PLAIN_PORT: u16 = 8082;

/// TLS port of the admission webhook.
pub const WEBHOOK_PORT: u16 = 9443;

/// Annotation on a MysqlFailoverGroup that revokes every deploy lease of the
/// group with reason `OperatorRevoked` (lease seed: "Revoking by hand").
pub const REVOKE_DEPLOYMENT_LEASES_ANNOTATION: &str = "bloodraven.shipstream.io/revoke-deployment-leases";

/// Server-side-apply field manager of the operator's observations
/// (`status.health`, `status.conditions`, `status.observedGeneration`, `status.stable`).
pub const OBSERVER_FIELD_MANAGER: &str = "bloodraven-operator-observer";

/// Field manager of the operator's authoritative decisions
/// (`status.activeSite` with `status.topologyGeneration`), written as one
/// update with a resourceVersion precondition.
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

/// Field manager of the failover engine's progress (`status.plannedFailover`).
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
