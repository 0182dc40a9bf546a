//! Reconcilers, one directory per kind, and what they share.

pub(crate) mod conditions;
pub(crate) mod database;
pub(crate) mod failover_group;

use std::sync::Arc;

use crate::events::Recorder;
use kube::Client;

use crate::leader::Leadership;
use crate::metrics::Metrics;

/// What every reconcile gets: the handles both controllers share, and
/// the failover-group controller's own state ([`failover_group::State`]).
#[derive(Clone)]
pub(crate) struct Context {
    /// API client, authenticated as the operator's ServiceAccount.
    pub client: Client,
    /// The one Event recorder of the process.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Metrics,
    /// Whether this process may act (status writes, Events).
    pub leadership: Leadership,
    /// The operator's namespace (decision records).
    pub namespace: String,
    /// The only namespace site credentials are read from.
    pub credentials_namespace: String,
    /// Whether the deploy API is served: without it no pipeline holds a
    /// lease, and a round neither admits against a hold nor maintains them.
    pub deploy_api: bool,
    /// Watch caches for MysqlDatabase standing (namespaces, name conflicts).
    pub authority: crate::authority::Authority,
    /// The deploy-lease service, the one way to the deploy leases for the
    /// deploy API and the reconcilers alike (cleanup and verification
    /// records run whether or not the deploy API is enabled).
    pub leases: crate::lease::service::Service,
    /// The tolerant reader of Bloodraven's custom resources (watches and gets).
    pub tolerant: crate::tolerant::Tolerant,
    /// The crash point armed for tests (`--failpoint`; none by default).
    pub failpoint: crate::failpoint::Failpoint,
    /// What the failover-group controller keeps between rounds.
    pub groups: failover_group::State,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("leadership", &self.leadership).finish_non_exhaustive()
    }
}

/// Errors a reconcile returns (probe failures are observations, not errors).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A Kubernetes API call failed.
    #[error("failed to {action}: {source}")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The object has no name (never for objects read from the API server).
    #[error("object has no name")]
    NoName,
    /// A deploy-lease call (admission, revocation, verification records) failed.
    #[error("failed to {action}: {source}")]
    Leases {
        /// What was being done.
        action: &'static str,
        /// Why.
        #[source]
        source: LeaseError,
    },
    /// A JSON patch could not be built from an object's current value.
    #[error("failed to build the patch to {action}: {source}")]
    Patch {
        /// What the patch was for.
        action: &'static str,
        /// The encoding error.
        #[source]
        source: serde_json::Error,
    },
    /// This process lost leadership mid-reconcile: it stops acting.
    #[error("not the leader any more")]
    NotLeader,
    /// A site could not be acted on (fence, promote, repoint) and the step
    /// must be retried.
    #[error("failed to {action} site {site}: {message}")]
    Site {
        /// What was being done.
        action: &'static str,
        /// The site.
        site: String,
        /// Why (escaped, bounded; never a password).
        message: String,
    },
}

impl Error {
    /// Stable reason for metric labels.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Error::Kube { source: kube::Error::Api(s), .. } if s.code == 409 => "Conflict",
            Error::Kube { source: kube::Error::Api(s), .. } if s.code == 403 => "Forbidden",
            Error::Kube { .. } => "KubeError",
            Error::NoName => "NoName",
            Error::Leases { .. } => "DeployLeaseError",
            Error::Patch { .. } => "PatchError",
            Error::NotLeader => "NotLeader",
            Error::Site { .. } => "SiteActionFailed",
        }
    }

    /// Wraps a deploy-lease service error.
    /// Wraps a deploy-lease error with what was being done.
    pub(crate) fn leases(action: &'static str) -> impl FnOnce(LeaseError) -> Self {
        move |source| Error::Leases { action, source }
    }
}

/// Why a deploy-lease call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseError {
    /// The lease service refused or failed.
    #[error(transparent)]
    Service(#[from] crate::lease::service::ServiceError),
    /// The lease store failed.
    #[error(transparent)]
    Store(#[from] crate::lease::store::StoreError),
    /// The store did not answer within the group's probe timeout.
    #[error("the deploy-lease store did not answer within {seconds}s (probeTimeoutSeconds)")]
    Timeout {
        /// The bound.
        seconds: u64,
    },
}

/// Shorthand for wrapping a kube error with what was being done.
pub(crate) fn kube_err(action: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { action, source }
}

pub(crate) type Ctx = Arc<Context>;
