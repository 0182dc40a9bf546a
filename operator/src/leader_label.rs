//! The leader's Pod label, `bloodraven.shipstream.io/leader: "true"`, so the
//! `bloodraven` Service (deploy API) selects the leader only.
//!
//! Only the leader serves the deploy API; a follower answers every call
//! `503 not_leader`. With the Service selecting every replica, a share of
//! the calls (half, with the chart's two replicas) bounced and cost the
//! caller a retry. The pattern is the one database operators use for the
//! primary's Pod (Patroni's `role` label, CloudNativePG's `role: primary`).
//!
//! Rule: on becoming leader, first remove the label from every other Pod
//! of the namespace that carries it (a deposed leader that has not noticed
//! yet), then label its own Pod; on losing leadership, remove its own.
//! Re-checked every [`RECHECK`] while nothing changes, so a hand edit or a
//! failed patch heals. Between a leader's loss and the next leader's label
//! the Service has no endpoint (connections are refused, and callers retry,
//! as they do for `not_leader`). A crashed leader's Pod keeps the label but
//! is not Ready, so the Service does not send to it.
//!
//! Runs only in a Pod: the Pod name comes from `POD_NAME` (the chart sets it
//! from the downward API); without it (a process on a host) nothing is
//! labelled. RBAC: `get`, `list`, `patch` of `pods` in the operator's
//! namespace (charts/bloodraven/files/operator-rbac.yaml).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::leader::Leadership;

/// The label (value `"true"` on the leader's Pod only).
pub(crate) const LABEL: &str = "bloodraven.shipstream.io/leader";

/// How often the label is re-applied while leadership does not change.
pub(crate) const RECHECK: Duration = Duration::from_secs(30);

/// Sets or removes [`LABEL`] on Pod `pod` (and, when `leader`, removes it
/// from every other Pod of the namespace first). Errors: the API server's.
pub(crate) async fn apply(pods: &Api<Pod>, pod: &str, leader: bool) -> Result<(), kube::Error> {
    let remove = Patch::Merge(json!({"metadata": {"labels": {LABEL: null}}}));
    if leader {
        let labelled = pods.list_metadata(&ListParams::default().labels(&format!("{LABEL}=true"))).await?;
        for other in labelled.items.iter().filter_map(|p| p.metadata.name.as_deref()).filter(|n| *n != pod) {
            match pods.patch(other, &PatchParams::default(), &remove).await {
                Ok(_) => tracing::info!(pod = other, "removed the leader label from a deposed leader's Pod"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        pods.patch(pod, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {LABEL: "true"}}})))
            .await?;
    } else {
        pods.patch(pod, &PatchParams::default(), &remove).await?;
    }
    Ok(())
}

/// Keeps the label in step with `leadership`, polling it every `period`.
pub(crate) async fn keep(pods: Api<Pod>, pod: String, leadership: Leadership, period: Duration) {
    let mut written: Option<(bool, Instant)> = None;
    loop {
        let leader = leadership.is_leader();
        let due = match written {
            None => true,
            Some((was, at)) => was != leader || at.elapsed() >= RECHECK,
        };
        if due {
            match apply(&pods, &pod, leader).await {
                Ok(()) => {
                    if written.map(|(was, _)| was) != Some(leader) {
                        tracing::info!(pod = %pod, leader, "leader label of this Pod updated");
                    }
                    written = Some((leader, Instant::now()));
                }
                Err(e) => tracing::warn!(pod = %pod, leader, error = %e, "failed to update the leader label; retrying"),
            }
        }
        tokio::time::sleep(period).await;
    }
}
