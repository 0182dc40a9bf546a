//! Condition types and reasons of a MysqlFailoverGroup and a MysqlDatabase.
//! Types are those docs/failover-groups.md lists ("Conditions"); reasons are stable CamelCase words
//! used in conditions, Events and metric labels alike.

use std::fmt;

/// The condition types a MysqlFailoverGroup carries (docs/failover-groups.md, "Conditions").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConditionType {
    /// The group has exactly one writable primary at its active site and a
    /// replica replicating from it.
    Ready,
    /// A site is unreachable, or the operator cannot observe it (credentials,
    /// authentication, spec errors).
    Degraded,
    /// More than one site is writable.
    SplitBrain,
    /// No site is writable.
    NoPrimary,
    /// The replica's IO or SQL thread is stopped, or it replicates from
    /// somewhere other than the primary.
    ReplicationNotRunning,
    /// Steps after an authoritative decision (promotion, repointing) are
    /// still to be done.
    RecoveryPending,
    /// A deploy lease was revoked after DDL had started: a person must verify
    /// the schema.
    SchemaVerificationRequired,
    /// A planned failover is running, so the operator's automatic failover
    /// waits for it.
    AutomaticFailoverHeld,
    /// A site that lost the primary role holds transactions the new primary
    /// lacks (errant GTIDs): it stays fenced until a person acts.
    SiteDiverged,
    /// The decision record does not verify (edited by hand) or disagrees
    /// with status in a way no decision explains: failover is refused until
    /// a person resolves it.
    DecisionConflict,
    /// Accounts other than the operator's can write through `read_only` on a
    /// site (MariaDB `READ_ONLY ADMIN` or `SUPER`): the fence ends their
    /// sessions, but they should not belong to applications or migrations,
    /// so such accounts are reported with this condition and an Event.
    ReadOnlyBypassAccounts,
    /// `spec.failover.semiSync` asks for semi-synchronous replication, but a
    /// site cannot do it (MySQL without the semi-sync plugins loaded):
    /// acknowledged writes are not kept through a failover there.
    SemiSyncUnavailable,
    /// A restore-in-place replaced this site's data: its old data predates
    /// nothing the group trusts, so it stays fenced, out of replication and
    /// is never promoted until a person re-clones it from the primary and
    /// marks it done (`bloodraven.shipstream.io/reclone-done`).
    RecloneRequired,
}

impl ConditionType {
    /// Every type, in the order the operator writes them.
    pub const ALL: [ConditionType; 13] = [
        ConditionType::Ready,
        ConditionType::Degraded,
        ConditionType::SplitBrain,
        ConditionType::NoPrimary,
        ConditionType::ReplicationNotRunning,
        ConditionType::RecoveryPending,
        ConditionType::SchemaVerificationRequired,
        ConditionType::AutomaticFailoverHeld,
        ConditionType::SiteDiverged,
        ConditionType::DecisionConflict,
        ConditionType::ReadOnlyBypassAccounts,
        ConditionType::SemiSyncUnavailable,
        ConditionType::RecloneRequired,
    ];

    /// The type's name as it appears in `status.conditions[].type`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Degraded => "Degraded",
            ConditionType::SplitBrain => "SplitBrain",
            ConditionType::NoPrimary => "NoPrimary",
            ConditionType::ReplicationNotRunning => "ReplicationNotRunning",
            ConditionType::RecoveryPending => "RecoveryPending",
            ConditionType::SchemaVerificationRequired => "SchemaVerificationRequired",
            ConditionType::AutomaticFailoverHeld => "AutomaticFailoverHeld",
            ConditionType::SiteDiverged => "SiteDiverged",
            ConditionType::DecisionConflict => "DecisionConflict",
            ConditionType::ReadOnlyBypassAccounts => "ReadOnlyBypassAccounts",
            ConditionType::SemiSyncUnavailable => "SemiSyncUnavailable",
            ConditionType::RecloneRequired => "RecloneRequired",
        }
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Condition and Event reasons. Stable: dashboards and alerts match on them.
pub mod reason {
    /// Everything observed is as the group's roles require.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// A restore-in-place decided away from a site whose data no longer
    /// counts: it waits for a person's re-clone (`RecloneRequired`).
    pub const RESTORED_IN_PLACE: &str = "RestoredInPlace";
    /// Bootstrap found the designated site writable and the other replicating from it.
    pub const BOOTSTRAPPED: &str = "Bootstrapped";
    /// Bootstrap is waiting for the topology to look right.
    pub const BOOTSTRAP_PENDING: &str = "BootstrapPending";
    /// A site's address answers with another `server_id` than the one the
    /// site is known by (`status.health[].identity`): another server.
    pub const UNEXPECTED_SERVER: &str = "UnexpectedServer";
    /// A site did not answer within the probe timeout.
    pub const SITE_UNREACHABLE: &str = "SiteUnreachable";
    /// The site refused the operator's credentials.
    pub const AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
    /// The operator's account lacks a privilege the probe needs.
    pub const INSUFFICIENT_PRIVILEGES: &str = "InsufficientPrivileges";
    /// The probe failed for another reason (see the message).
    pub const PROBE_FAILED: &str = "ProbeFailed";
    /// The site's server is older than the operator supports (MySQL before
    /// 8.0.23, MariaDB before 10.5): it is observed as answering, and never
    /// fenced, promoted or failed over.
    pub const UNSUPPORTED_SERVER_VERSION: &str = "UnsupportedServerVersion";
    /// The credentials Secret is missing, unreadable, or lacks a key.
    pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";
    /// The spec names a site that is not in `spec.sites`, or repeats one.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The stored object does not decode into the operator's types (a field
    /// out of range or of the wrong type, left by a CRD downgrade); the
    /// message names the field's JSON path. The operator skips the object.
    pub const INVALID_OBJECT: &str = "InvalidObject";
    /// The MysqlDatabase's failover group exists but does not decode.
    pub const GROUP_INVALID: &str = "GroupInvalid";
    /// Two or more sites are writable.
    pub const MULTIPLE_WRITABLE_SITES: &str = "MultipleWritableSites";
    /// No site is writable.
    pub const NO_WRITABLE_SITE: &str = "NoWritableSite";
    /// The writable site is not the one the group's status (or bootstrap) designates.
    pub const UNEXPECTED_PRIMARY: &str = "UnexpectedPrimary";
    /// The replica has no replication configured.
    pub const REPLICATION_NOT_CONFIGURED: &str = "ReplicationNotConfigured";
    /// The replica's IO or SQL thread is stopped.
    pub const REPLICATION_STOPPED: &str = "ReplicationStopped";
    /// Both replica threads report running, but the replica is behind the
    /// active site by GTID and has neither received nor applied anything
    /// for the stall bound (a cut link, a silently dropped connection).
    pub const REPLICATION_STALLED: &str = "ReplicationStalled";
    /// The replica replicates from a server that is not the primary.
    pub const REPLICATING_FROM_ELSEWHERE: &str = "ReplicatingFromElsewhere";
    /// Two sites report the same `server_id`.
    pub const DUPLICATE_SERVER_ID: &str = "DuplicateServerId";
    /// The status was edited or lost and was restored from the decision record.
    pub const STATUS_RESTORED: &str = "StatusRestored";
    /// A planned-failover request reuses the id of one taken up before.
    pub const REQUEST_ID_REUSED: &str = "RequestIdReused";
    /// Status disagrees with the operator's decision record, or names a site not in the spec.
    pub const INVALID_STATUS: &str = "InvalidStatus";
    /// The MysqlDatabase's failover group does not exist.
    pub const GROUP_NOT_FOUND: &str = "GroupNotFound";
    /// The MysqlDatabase refers to an existing group.
    pub const GROUP_FOUND: &str = "GroupFound";
    /// The MysqlDatabase's namespace is not allowed by its group's `spec.allowedDatabases`.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// Another namespace's MysqlDatabase of the same name has claimed the name on the group.
    pub const NAME_CONFLICT: &str = "NameConflict";
    /// The group holds as many instance claims as its
    /// `spec.allowedDatabases.maxInstances`, or the MysqlDatabase's
    /// namespace as many as `maxInstancesPerNamespace`.
    pub const CLAIM_LIMIT_REACHED: &str = "ClaimLimitReached";
    /// The MysqlDatabase is the one to claim its name; the operator writes
    /// the claim with the group's next reconcile.
    pub const CLAIM_PENDING: &str = "ClaimPending";
    /// A deploy lease was revoked or lapsed after its operation reported
    /// `ddlState: started`: a person must verify the schema.
    pub const SCHEMA_VERIFICATION_REQUIRED: &str = "SchemaVerificationRequired";
    /// A person marked the schema verified (`schema-verified` annotation).
    pub const SCHEMA_VERIFIED: &str = "SchemaVerified";
    /// The `schema-verified` annotation named nothing that awaited a
    /// person's verification (an operationId mistyped, already cleared, or
    /// not yet announced): it was removed without effect (Warning Event).
    pub const SCHEMA_VERIFIED_UNMATCHED: &str = "SchemaVerifiedUnmatched";
    /// No lease was lost mid-DDL, or every such loss was verified.
    pub const NO_VERIFICATION_PENDING: &str = "NoVerificationPending";
    /// The deploy leases' records could not be read this round (a
    /// condition that depends on them is `Unknown`).
    pub const DEPLOY_LEASES_UNREADABLE: &str = "DeployLeasesUnreadable";
    /// A planned failover (or the steps after a decision) is running.
    pub const OPERATION_IN_PROGRESS: &str = "OperationInProgress";
    /// A live failover-hold defers a planned failover.
    pub const DEPLOYMENT_HOLD: &str = "DeploymentHold";
    /// The active site failed `failureThreshold` probes in a row and the
    /// standby was promoted.
    pub const EMERGENCY_FAILOVER: &str = "EmergencyFailover";
    /// An emergency failover is due but the standby may not be promoted
    /// (unreachable, or has not applied everything it received).
    pub const STANDBY_NOT_PROMOTABLE: &str = "StandbyNotPromotable";
    /// An emergency promotion would abandon more transactions the primary
    /// was last seen with than `spec.failover.maxAbandonedTransactions`.
    pub const STANDBY_BEHIND: &str = "StandbyBehind";
    /// A restore-in-place failed after its Job ran on a site: the site
    /// holds whatever the Job left and is never promoted nor rejoined until
    /// a person marks it re-cloned (`RecloneRequired`).
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// The operator cannot reach the active site, but the standby's
    /// replication receiver is connected to it and still hears from it
    /// (heartbeats or transactions): the primary is alive and only the
    /// operator's path to it failed, so nothing is promoted.
    pub const PRIMARY_REACHABLE_FROM_STANDBY: &str = "PrimaryReachableFromStandby";
    /// The active site's host or port changed in spec and it has not
    /// answered at the new endpoint: automatic failover waits.
    pub const ACTIVE_SITE_ENDPOINT_CHANGED: &str = "ActiveSiteEndpointChanged";
    /// Automatic failover is off (`spec.failover.automatic: false`).
    pub const AUTOMATIC_FAILOVER_DISABLED: &str = "AutomaticFailoverDisabled";
    /// A site that is not the active one has transactions the active site
    /// lacks: a write on a replica, or a returning former primary's.
    pub const ERRANT_TRANSACTIONS: &str = "ErrantTransactions";
    /// A returning former primary was fenced and repointed as a replica.
    pub const SITE_REJOINED: &str = "SiteRejoined";
    /// The decision record does not verify or cannot be explained by any decision.
    pub const DECISION_RECORD_MISMATCH: &str = "DecisionRecordMismatch";
    /// The group does not ask for semi-synchronous replication.
    pub const SEMI_SYNC_NOT_REQUESTED: &str = "SemiSyncNotRequested";
    /// Every reachable site can do semi-synchronous replication.
    pub const SEMI_SYNC_AVAILABLE: &str = "SemiSyncAvailable";
    /// A MySQL site has not loaded the semi-sync plugins
    /// (`rpl_semi_sync_source`, `rpl_semi_sync_replica`).
    pub const SEMI_SYNC_PLUGINS_MISSING: &str = "SemiSyncPluginsMissing";
    /// The operator fell back to asynchronous replication on the primary:
    /// no standby acknowledged its commits within
    /// `semiSyncFallbackSeconds`, or none has connected since it became
    /// the primary.
    pub const STANDBY_NOT_ACKNOWLEDGING: &str = "StandbyNotAcknowledging";
    /// An account other than the operator's holds `READ_ONLY ADMIN` or `SUPER`.
    pub const READ_ONLY_ADMIN_ACCOUNTS: &str = "ReadOnlyAdminAccounts";
    /// The MysqlDatabase's `<name>-primary` Service points at the group's
    /// decided active site.
    pub const POINTS_AT_ACTIVE_SITE: &str = "PointsAtActiveSite";
    /// The active site's host or port in spec differs from where it was last
    /// observed writable, at the same topology generation: the
    /// `<name>-primary` Service keeps its endpoint until the site answers
    /// writable at the new one (swapped or mistyped addresses must not send
    /// applications to a read-only or foreign server).
    pub const ACTIVE_SITE_ENDPOINT_UNCONFIRMED: &str = "ActiveSiteEndpointUnconfirmed";
    /// The `<name>-primary` Service has no target: the database has no
    /// authority on its group, or the group is gone or has no decided active
    /// site. The operator keeps no EndpointSlice for it.
    pub const NO_ACTIVE_SITE: &str = "NoActiveSite";
    /// The `-primary` Service keeps its endpoint: the decided active site
    /// answered read-only at the last probe (it is being promoted).
    pub const ACTIVE_SITE_NOT_WRITABLE: &str = "ActiveSiteNotWritable";
    /// A Service or EndpointSlice named `<name>-primary` exists that this
    /// MysqlDatabase does not own; the operator leaves it alone.
    pub const PRIMARY_SERVICE_CONFLICT: &str = "PrimaryServiceConflict";
    /// Someone else wrote a field into the `<name>-primary` Service that
    /// could route its traffic elsewhere (a selector, external IPs, an extra
    /// port, …); the operator removed it (the reason of a Warning Event).
    pub const PRIMARY_SERVICE_TAMPERED: &str = "PrimaryServiceTampered";
    /// `<name>-primary` is not a valid Service name (a DNS-1035 label of at
    /// most 63 characters), so the operator keeps no Service.
    pub const PRIMARY_SERVICE_NAME_INVALID: &str = "PrimaryServiceNameInvalid";
    /// The active site's host cannot be a Service target: an IP address that
    /// is loopback, link-local, multicast or unspecified (the API server
    /// refuses it in an EndpointSlice, and a Pod could not reach it), or a
    /// name that is not a DNS-1123 subdomain.
    pub const UNROUTABLE_SITE_HOST: &str = "UnroutableSiteHost";
}
