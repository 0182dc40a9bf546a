//! The ordered update and restore-in-place as a hostile but ordinary user
//! drives them, each input kept as a test of what docs/failover.md
//! promises:
//!
//! 1. An ordered update asked of a group that is already unstable (the
//!    standby down: `Degraded`) is refused at admission, nothing touched:
//!    the request's own `OperationInProgress` mark never hides why the
//!    group is unstable.
//! 2. A site's Job deleted while it runs is not created and run again.
//! 3. A planned failover asked while an ordered update runs is refused.
//!
//! (A re-clone mark written before the restore's decision is
//! `restore_in_place.rs`'s.)

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::scenario;
use bloodraven_e2e::fixtures::wait_status;
use bloodraven_e2e::hostagent::{HostAgent, job_script, jobs_namespace};
use bloodraven_e2e::pods::{image, node_address};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);

fn update_at(s: &MysqlFailoverGroupStatus, id: &str, phases: &[&str]) -> Result<(), String> {
    match &s.ordered_update {
        Some(u) if u.request_id == id && phases.contains(&u.phase.as_str()) => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_update_of_a_degraded_group_is_refused_at_admission() {
    let ds = scenario("atk26-degraded").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    let jobs = jobs_namespace(cluster, "atk26-degraded-jobs").await;
    // The standby goes away: the group is unstable before anyone asks.
    tokio::task::block_in_place(|| ds.sc.pair.stop("pdx"));
    wait_status(cluster, &group, "the group unstable with pdx down", T, |s| match (s.stable, &s.unstable_reason) {
        (Some(false), Some(r)) if r != "OperationInProgress" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let template = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "update", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", "sleep 600"],
    }]}}}});
    let patch = json!({"spec": {"orderedUpdate": {
        "requestId": "d1", "namespace": jobs.name, "jobTemplate": template, "activeDeadlineSeconds": 300,
    }}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let s = wait_status(cluster, &group, "d1 refused or admitted", T, |s| {
        update_at(s, "d1", &["Failed", "UpdatingStandby", "VerifyingStandby"])
    })
    .await;
    let u = s.ordered_update.clone().unwrap();
    assert_eq!(
        u.phase, "Failed",
        "docs: an update of an unstable group is refused at admission, nothing touched; it was admitted: {u:?}"
    );
    assert!(u.jobs.is_empty(), "no Job ran: {:?}", u.jobs);
}

/// A site's Job deleted while it runs is not created again: the site may
/// be half updated, and a Job runs once (`backoffLimit: 0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_job_deleted_mid_run_is_not_run_again() {
    let ds = scenario("atk26-rerun").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    let jobs = jobs_namespace(cluster, "atk26-rerun-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;
    let template = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "update", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", job_script(&agent.address, "update")],
    }]}}}});
    let patch = json!({"spec": {"orderedUpdate": {
        "requestId": "x1", "namespace": jobs.name, "jobTemplate": template, "activeDeadlineSeconds": 300,
    }}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // The standby's Job is half way: it asked the agent, and waits.
    let first = agent.next(T).await;
    assert_eq!(first.site, "pdx");
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    let name = s.ordered_update.as_ref().unwrap().jobs[0].job_name.clone();
    let job_api: kube::Api<k8s_openapi::api::batch::v1::Job> =
        kube::Api::namespaced(cluster.client.clone(), &jobs.name);
    job_api.delete(&name, &kube::api::DeleteParams::background()).await.unwrap();
    // Whatever the operator does next, the standby's update must not start over.
    let again = tokio::time::timeout(Duration::from_secs(60), agent.requests.recv()).await;
    if let Ok(Some(second)) = again {
        panic!("the Job of {} ran a second time after it was deleted mid-run (role {})", second.site, second.action);
    }
    drop(first);
}

/// One operation at a time: a planned failover asked while an ordered
/// update runs is refused, whatever order the engines run in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_is_refused_while_an_ordered_update_runs() {
    let ds = scenario("atk26-both").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    let jobs = jobs_namespace(cluster, "atk26-both-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;
    let template = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "update", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", job_script(&agent.address, "update")],
    }]}}}});
    let patch = json!({"spec": {"orderedUpdate": {
        "requestId": "b1", "namespace": jobs.name, "jobTemplate": template, "activeDeadlineSeconds": 300,
    }}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // The standby's Job runs (it waits on the agent; pdx is still up and replicating).
    let first = agent.next(T).await;
    assert_eq!(first.site, "pdx");
    let planned = json!({"spec": {"plannedFailover": {"targetSite": "pdx", "requestId": "p1"}}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(planned)).await.unwrap();
    let s = wait_status(cluster, &group, "p1 refused or past admission", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "p1" && p.phase != "Pending" && p.phase != "Admitting" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let p = s.planned_failover.clone().unwrap();
    assert_eq!(
        p.phase, "Failed",
        "a planned failover was admitted while ordered update b1 ran: {p:?} / {:?}",
        s.ordered_update
    );
    assert!(p.message.as_deref().unwrap_or("").contains("in flight"), "{p:?}");
    drop(first);
}
