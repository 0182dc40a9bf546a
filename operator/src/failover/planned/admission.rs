//! Admission of a request: the failover-hold that defers it (each lease
//! call bounded by the probe timeout), the accounts that bypass read-only,
//! and whether the target is ready (reachable, replicating, caught up, no
//! errant GTIDs).

use super::Step;
use crate::controller::Context;
use crate::controller::Error;
use crate::controller::LeaseError;
use crate::controller::failover_group::assess::SiteProbe;
use crate::controller::failover_group::publish;
use crate::mysql::ProbeTarget;
use crate::mysql::SiteObservation;
use crate::mysql::actions;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_api::v1alpha1::PlannedFailoverStatus;
use bloodraven_api::v1alpha1::reason;
use bloodraven_core::failover::planned::target_readiness;
use bloodraven_core::lease::machine::Grant;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use std::time::Duration;

/// The admission check: the live failover-hold that defers the request;
/// `None` admits (and fences the hold slot).
pub(super) async fn admit(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &PlannedFailoverStatus,
) -> Result<Option<Grant>, Error> {
    if !ctx.deploy_api {
        return Ok(None);
    }
    let service = &ctx.leases;
    let marker = format!("{}@{}", state.request_id, Timestamp::now());
    bounded(group, "admit the planned failover", service.admit(&group.name_any(), &marker)).await
}

/// A deploy-lease call of the drive, bounded by the group's probe timeout:
/// the drive runs before the safety paths in a reconcile, and a slow lease
/// store must not delay an emergency failover (an error here ends the
/// drive, and the reconcile goes on to the safety paths).
pub(super) async fn bounded<T>(
    group: &MysqlFailoverGroup,
    action: &'static str,
    call: impl std::future::Future<Output = Result<T, crate::lease::service::ServiceError>>,
) -> Result<T, Error> {
    let bound = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    let answer = match tokio::time::timeout(bound, call).await {
        Ok(answer) => answer.map_err(LeaseError::from),
        Err(_) => Err(LeaseError::Timeout { seconds: bound.as_secs() }),
    };
    answer.map_err(Error::leases(action))
}

/// Reports accounts that can write through `read_only` on `site` (MariaDB
/// `READ_ONLY ADMIN`, or `SUPER` before 10.11; themselves, through roles or
/// `PUBLIC`) other than the exact one the operator is connected as, right
/// before the fence: a Warning Event, and a fresh check for the
/// `ReadOnlyBypassAccounts` condition. The fence ends their sessions anyway.
pub(super) async fn report_bypass(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    site: &str,
    target: &ProbeTarget,
    creds: &crate::mysql::Credentials,
    step: &Step,
) {
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    match actions::read_only_bypass(target, creds, step.flavor, &step.version, timeout).await {
        Ok(found) => {
            ctx.groups.bypass.store(&group.uid().unwrap_or_default(), site, found.clone());
            if found.accounts.is_empty() {
                return;
            }
            let shown: Vec<String> =
                found.accounts.iter().take(10).map(|a| bloodraven_serving::log::escape(a, 80)).collect();
            publish(
                ctx,
                group,
                EventType::Warning,
                reason::READ_ONLY_ADMIN_ACCOUNTS,
                format!(
                    "on site {site}, {} can write through read_only (READ_ONLY ADMIN, or SUPER before MariaDB 10.11); the fence ends their sessions, but application and migration accounts should not hold these privileges",
                    shown.join(", ")
                ),
                "Fence",
                None,
            )
            .await;
        }
        Err(err) => {
            tracing::debug!(site, error = %crate::mysql::classify(&err).1, "could not list read_only bypass accounts");
        }
    }
}

/// Whether `target` may be promoted by a planned failover: what the replica
/// check found of it (errant transactions, a stall) refuses it before
/// anything this probe shows, since both come from rounds a single probe
/// cannot replace; then [`target_readiness`].
pub(super) fn admissible(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    source: &str,
    source_obs: Option<&SiteObservation>,
    target: &str,
    probes: &[SiteProbe],
) -> Result<(), String> {
    if let Some(problem) = crate::controller::failover_group::replicas::known_problem(ctx, group, target) {
        return Err(problem);
    }
    target_readiness(group.spec.failover.max_lag_seconds, source, source_obs, target, probes)
}
