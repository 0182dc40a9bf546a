//! Who or what a waiting migration Job waits for, where `kubectl describe
//! job` shows it. A sidecar refused with `409 held` or `423 unstable` keeps
//! asking until the lease is free or its acquire timeout ends; Helm and
//! Argo CD show nothing of that wait. When the refused caller's token is
//! bound to a Pod (the kubelet's projected tokens are; TokenReview names
//! the Pod), the operator records an Event on the Pod and on its Job naming
//! the holder, or why the group is not stable, as the refusal told the
//! caller (`kubectl describe pod` and `kubectl describe job` both show it).
//!
//! - Only the caller's own namespace: the Pod is looked up there, by the
//!   name the TokenReview gave, and must carry the reviewed UID.
//! - One Event per Pod and holder, repeated at most once a minute (the
//!   recorder folds the repeats into its series): a sidecar retrying every
//!   few seconds costs the API server one write a minute, not one a retry.
//! - Best effort, off the request path: the answer never waits for it, and
//!   a failure is logged, never answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Api;
use kube::runtime::events::{Event, EventType};

use super::auth::PodIdentity;

/// How often the same Pod's wait for the same holder is said again.
const REPEAT: Duration = Duration::from_secs(60);

/// The most waiting Pods remembered; past it the oldest is forgotten.
const MAX_PODS: usize = 4096;

/// Per `(namespace, pod)`: the holder last said, and when.
type Said = HashMap<(String, String), (String, Instant)>;

/// The Event's reason.
pub(crate) const REASON: &str = "WaitingForLease";

/// Records waits as Events on the waiting Pods and their Jobs.
#[derive(Clone)]
pub(crate) struct Waiting {
    client: kube::Client,
    recorder: crate::events::Recorder,
    said: Arc<Mutex<Said>>,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting").finish_non_exhaustive()
    }
}

impl Waiting {
    /// Waits recorded with `client` through `recorder`.
    pub(crate) fn new(client: kube::Client, recorder: crate::events::Recorder) -> Self {
        Self { client, recorder, said: Arc::default() }
    }

    /// Notes that `pod` (in `namespace`) was refused for `cause` (the
    /// holder's operation id, or the group's unstable reason); `message` is
    /// the refusal's text.
    /// Returns at once; the Event, when due, is written by a task.
    pub(crate) fn note(&self, namespace: &str, pod: &PodIdentity, cause: &str, message: &str) {
        if !self.due(namespace, &pod.name, cause, Instant::now()) {
            return;
        }
        let this = self.clone();
        let (namespace, pod, message) = (namespace.to_owned(), pod.clone(), message.to_owned());
        tokio::spawn(async move {
            if let Err(e) = this.record(&namespace, &pod, &message).await {
                tracing::info!(namespace = %namespace, pod = %pod.name, error = %e, "the wait was not recorded on the Job");
            }
        });
    }

    fn due(&self, namespace: &str, pod: &str, holder: &str, now: Instant) -> bool {
        let mut said = self.said.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        said.retain(|_, (_, at)| now.saturating_duration_since(*at) < REPEAT);
        let key = (namespace.to_owned(), pod.to_owned());
        if said.get(&key).is_some_and(|(h, _)| h == holder) {
            return false;
        }
        if said.len() >= MAX_PODS
            && let Some(oldest) = said.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
        {
            said.remove(&oldest);
        }
        said.insert(key, (holder.to_owned(), now));
        true
    }

    async fn record(&self, namespace: &str, pod: &PodIdentity, message: &str) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let found = pods.get_opt(&pod.name).await.map_err(|e| format!("reading the Pod: {e}"))?;
        let Some(found) = found.filter(|p| pod.uid.is_none() || p.metadata.uid == pod.uid) else {
            return Ok(()); // gone, or another Pod of the name: nobody to tell
        };
        let Some(job) = job_of(&found, namespace) else { return Ok(()) };
        let event = Event {
            type_: EventType::Normal,
            reason: REASON.into(),
            note: Some(format!("Pod {} is waiting: {message}", pod.name)),
            action: "Wait".into(),
            secondary: None,
        };
        let on_pod = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.name.clone()),
            namespace: Some(namespace.to_owned()),
            uid: found.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        for regarding in [&on_pod, &job] {
            self.recorder.publish(&event, regarding).await.map_err(|e| format!("writing the Event: {e}"))?;
        }
        Ok(())
    }
}

/// The Job that controls `pod`, as an Event's regarding object.
fn job_of(pod: &Pod, namespace: &str) -> Option<ObjectReference> {
    let owner =
        pod.metadata.owner_references.as_ref()?.iter().find(|o| {
            o.controller == Some(true) && o.kind == "Job" && o.api_version.split('/').next() == Some("batch")
        })?;
    Some(ObjectReference {
        api_version: Some(owner.api_version.clone()),
        kind: Some(owner.kind.clone()),
        name: Some(owner.name.clone()),
        namespace: Some(namespace.to_owned()),
        uid: Some(owner.uid.clone()),
        ..ObjectReference::default()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn waiting() -> Waiting {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let reporter = kube::runtime::events::Reporter { controller: "test".into(), instance: None };
        Waiting::new(client.clone(), crate::events::Recorder::new(client, reporter))
    }

    #[tokio::test]
    async fn a_pod_waiting_on_one_holder_is_said_once_a_minute_and_a_new_holder_at_once() {
        let w = waiting();
        let t0 = Instant::now();
        assert!(w.due("team", "job-a-x", "op-1", t0));
        assert!(!w.due("team", "job-a-x", "op-1", t0 + Duration::from_secs(5)), "a retry");
        assert!(w.due("team", "job-b-y", "op-1", t0 + Duration::from_secs(5)), "another Pod");
        assert!(w.due("other", "job-a-x", "op-1", t0 + Duration::from_secs(5)), "another namespace");
        assert!(w.due("team", "job-a-x", "op-2", t0 + Duration::from_secs(6)), "the holder changed");
        assert!(w.due("team", "job-a-x", "op-2", t0 + Duration::from_secs(67)), "a minute later");
    }

    #[test]
    fn only_the_controlling_job_is_told() {
        let owner = |kind: &str, api: &str, controller: bool| OwnerReference {
            api_version: api.into(),
            kind: kind.into(),
            name: "migrate-1".into(),
            uid: "u1".into(),
            controller: Some(controller),
            ..OwnerReference::default()
        };
        let pod = |owners: Vec<OwnerReference>| Pod {
            metadata: ObjectMeta { owner_references: Some(owners), ..ObjectMeta::default() },
            ..Pod::default()
        };
        let job = job_of(&pod(vec![owner("Job", "batch/v1", true)]), "team").unwrap();
        assert_eq!(
            (job.kind.as_deref(), job.name.as_deref(), job.uid.as_deref(), job.namespace.as_deref()),
            (Some("Job"), Some("migrate-1"), Some("u1"), Some("team"))
        );
        assert!(job_of(&pod(vec![owner("Job", "batch/v1", false)]), "team").is_none(), "not its controller");
        assert!(job_of(&pod(vec![owner("ReplicaSet", "apps/v1", true)]), "team").is_none());
        assert!(job_of(&pod(vec![owner("Job", "example.com/v1", true)]), "team").is_none(), "another group's Job");
        assert!(job_of(&Pod::default(), "team").is_none(), "a bare Pod");
    }
}
