//! How an ordered update and a restore-in-place fail, as the runbook tells
//! on-call (docs/runbook.md):
//!
//! 1. An update whose Job fails on the former primary, after the
//!    switchover, ends `Failed` with the new topology decided and stable,
//!    and names the site that needs a person. With its status lost, the
//!    request is not run again, and status says so
//!    (`status.ignoredOrderedUpdate`, `RequestIdReused`).
//! 2. The new primary lost while the former primary's Job runs, after the
//!    switchover: no failover to a server being updated while its Job
//!    runs, then an emergency failover back to it once the Job ends, which
//!    supersedes the update (one decision: the emergency's).
//! 3. A restore whose Job leaves another server at the site's address is
//!    refused as that server at once (never "did not answer" after the
//!    bound): nothing is fenced and the generation does not move. The site
//!    holds whatever the Job left: the decision record holds it
//!    (`RecloneRequired`, `RestoreFailed`), so it is neither rejoined as a
//!    replica nor promoted, even once it answers as itself again, until a
//!    person marks it re-cloned (`reclone-done`, Event `RecloneDone`).
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::scenario;
use bloodraven_e2e::fixtures::{condition, decision_record, is_ready_at, wait_events, wait_status};
use bloodraven_e2e::hostagent::{HostAgent, job_script, jobs_namespace};
use bloodraven_e2e::pods::{image, node_address};
use bloodraven_e2e::wait_for;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);

fn template(agent: &HostAgent, action: &str) -> serde_json::Value {
    json!({"spec": {"template": {"spec": {"containers": [{
        "name": action, "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", job_script(&agent.address, action)],
    }]}}}})
}

fn update_at(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    match &s.ordered_update {
        Some(u) if u.request_id == id && u.phase == phase => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_failing_after_the_switchover_leaves_the_new_topology_stable_and_names_the_site() {
    let ds = scenario("opfail-after").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    let jobs = jobs_namespace(cluster, "opfail-after-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;
    let patch = json!({"spec": {"orderedUpdate": {
        "requestId": "f1", "namespace": jobs.name, "jobTemplate": template(&agent, "update"), "activeDeadlineSeconds": 300,
    }}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let standby = agent.next(T).await;
    assert_eq!(standby.site, "pdx");
    standby.reply.send(Ok(())).unwrap();
    // The switchover happens; then the former primary's update breaks.
    let former = agent.next(T).await;
    assert_eq!(former.site, "iad");
    former.reply.send(Err("the package did not install".into())).unwrap();

    let s = wait_status(cluster, &group, "f1 failed", T, |s| update_at(s, "f1", "Failed")).await;
    let u = s.ordered_update.clone().unwrap();
    assert_eq!(u.attention_site.as_deref(), Some("iad"), "the status names the site that needs a person: {u:?}");
    let message = u.message.clone().unwrap_or_default();
    assert!(message.contains("iad"), "{message}");
    let failed_job = u.jobs.iter().find(|j| j.site == "iad").map(|j| j.result.as_str());
    assert_eq!(failed_job, Some("Failed"), "{:?}", u.jobs);
    // The new topology stands: pdx decided at generation 2, the group
    // stable with iad a fenced replica of it.
    wait_status(cluster, &group, "pdx ready at generation 2", T, |s| is_ready_at(s, "pdx", 2)).await;
    let pair = &ds.sc.pair;
    assert_eq!(pair.sql("iad", "SELECT @@read_only").trim(), "1");
    assert!(pair.replicates("iad"), "iad replicates from pdx: {}", pair.replica_status("iad"));
    wait_events(cluster, &group, "OrderedUpdateFailed", &[&["ordered update f1", "iad"]]).await;

    // Status lost (edited by hand, or a restore of the object without
    // it): the request the spec still asks for does not run again, and
    // status says why instead of staying silent.
    let wipe = json!({"status": {"orderedUpdate": null}});
    cluster.groups().patch_status(&group, &PatchParams::default(), &Patch::Merge(&wipe)).await.unwrap();
    let s = wait_status(cluster, &group, "f1 reported as ignored", T, |s| match &s.ignored_ordered_update {
        Some(i) if i.request_id == "f1" && i.reason == "RequestIdReused" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    assert!(s.ignored_ordered_update.as_ref().unwrap().message.contains("write a new requestId"), "{s:?}");
    assert!(s.ordered_update.is_none(), "nothing was taken up: {:?}", s.ordered_update);
    wait_events(cluster, &group, "RequestIdReused", &[&["spec.orderedUpdate.requestId f1"]]).await;
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("pdx"), Some(2)));
    let again = tokio::time::timeout(Duration::from_secs(5), agent.requests.recv()).await;
    assert!(again.is_err(), "a Job asked the agent again: {:?}", again.ok().flatten().map(|r| r.site));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_leaves_another_server_at_the_site_is_refused_at_once_and_moves_nothing() {
    let ds = scenario("opfail-other").await;
    let (cluster, group, pair) = (&ds.sc.cluster, ds.pipeline.group.clone(), &ds.sc.pair);
    let jobs = jobs_namespace(cluster, "opfail-other-jobs").await;
    // Past a switchover and back (generation 3): the record knows a
    // promotion position, so a read-only site standing alone that holds
    // nothing the primary lacks is rejoined as a replica (`SiteRejoined`),
    // which is what the failed restore's site must not be.
    for (target, id, generation) in [("pdx", "there", 2), ("iad", "back", 3)] {
        ds.sc.request_failover(&group, target, id).await;
        wait_status(cluster, &group, id, T, |s| is_ready_at(s, target, generation)).await;
    }
    let mut agent = HostAgent::start(&node_address()).await;
    let patch = json!({"spec": {"restoreInPlace": {
        "requestId": "w1", "namespace": jobs.name, "jobTemplate": template(&agent, "restore"),
    }}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let req = agent.next(T).await;
    assert_eq!(req.site, "pdx");
    // The Job's tool stands the server alone, as a restore does, but
    // brings it back as another server (server_id 9: another host's
    // configuration).
    tokio::task::block_in_place(|| {
        pair.sql("pdx", pair.flavor.stand_alone());
        pair.stop("pdx");
        pair.restart_with("pdx", true, "--server-id=9");
    });
    let asked = std::time::Instant::now();
    req.reply.send(Ok(())).unwrap();

    let s = wait_status(cluster, &group, "w1 failed", T, |s| match &s.restore_in_place {
        Some(r) if r.request_id == "w1" && r.phase == "Failed" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    // Well within the 300 s a restored site has to answer.
    eprintln!("refused {:?} after the Job's work", asked.elapsed());
    assert!(asked.elapsed() < T, "refused only after {:?}", asked.elapsed());
    let r = s.restore_in_place.clone().unwrap();
    let message = r.message.clone().unwrap_or_default();
    assert!(message.contains("another server") && message.contains("server_id 9"), "{message}");
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(3)), "nothing decided");
    assert_eq!(pair.sql("iad", "SELECT @@read_only").trim(), "0", "the primary was never fenced");
    let phases: Vec<&str> = r.history.iter().map(|h| h.phase.as_str()).collect();
    assert!(!phases.contains(&"Fencing"), "{phases:?}");
    wait_events(cluster, &group, "RestoreInPlaceFailed", &[&["restore-in-place w1", "another server"]]).await;

    // The person's fix is not yet done: the server is itself again, alone
    // and read-only, with nothing the primary lacks, which the rejoin of a
    // returning site would take for a clean replica.
    tokio::task::block_in_place(|| {
        pair.stop("pdx");
        pair.restart("pdx", true);
    });
    let held = |s: &MysqlFailoverGroupStatus| match condition(s, "RecloneRequired") {
        Some(c) if c.status == "True" && c.reason == "RestoreFailed" => Ok(c.message.clone()),
        other => Err(format!("{other:?}")),
    };
    let s = wait_status(cluster, &group, "RecloneRequired RestoreFailed", T, |s| held(s).map(|_| ())).await;
    let message = held(&s).unwrap();
    assert!(message.contains("pdx") && message.contains("reclone-done=pdx@3"), "{message}");
    let record = decision_record(cluster, &ds.sc.ns.name, &group).await.and_then(|r| r.data).unwrap_or_default();
    assert_eq!(record.get("siteHold").map(String::as_str), Some("unrestored pdx 3 restore-in-place/w1"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!pair.replicates("pdx"), "a site the failed restore left was rejoined: {}", pair.replica_status("pdx"));
    let s = cluster.groups().get_status(&group).await.unwrap().status.unwrap_or_default();
    assert!(held(&s).is_ok(), "{:?}", s.conditions);
    assert_eq!(condition(&s, "AutomaticFailoverHeld").map(|c| c.status.as_str()), Some("True"));

    // A mark for another generation releases nothing; the right one does.
    for (value, releases) in [("pdx@2", false), ("pdx@3", true)] {
        let mark = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/reclone-done": value}}});
        cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&mark)).await.unwrap();
        if !releases {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let s = cluster.groups().get_status(&group).await.unwrap().status.unwrap_or_default();
            assert!(held(&s).is_ok(), "{value} released the hold: {:?}", s.conditions);
        }
    }
    wait_status(cluster, &group, "RecloneRequired False", T, |s| match condition(s, "RecloneRequired") {
        Some(c) if c.status == "False" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    wait_events(cluster, &group, "RecloneDone", &[&["pdx", "reclone-done=pdx@3"]]).await;
    let record = decision_record(cluster, &ds.sc.ns.name, &group).await.and_then(|r| r.data).unwrap_or_default();
    assert!(!record.contains_key("siteHold"), "{record:?}");
    let g = cluster.groups().get(&group).await.unwrap();
    assert!(!g.metadata.annotations.unwrap_or_default().contains_key("bloodraven.shipstream.io/reclone-done"));
    // Judged as any other site from then on: clean, so rejoined.
    wait_for("pdx rejoined", T, || async {
        if pair.replicates("pdx") { Ok(()) } else { Err(pair.replica_status("pdx")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_primary_lost_while_the_former_primary_updates_is_failed_over_once_its_job_ends() {
    let ds = scenario("opfail-lost").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    // A short detection budget: 1 s × 3.
    let patch =
        json!({"spec": {"failover": {"probeIntervalSeconds": 1, "failureThreshold": 3, "probeTimeoutSeconds": 1}}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let jobs = jobs_namespace(cluster, "opfail-lost-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;
    let patch = json!({"spec": {"orderedUpdate": {
        "requestId": "n1", "namespace": jobs.name, "jobTemplate": template(&agent, "update"), "activeDeadlineSeconds": 300,
    }}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let standby = agent.next(T).await;
    assert_eq!(standby.site, "pdx");
    standby.reply.send(Ok(())).unwrap();
    // After the switchover, the former primary's Job runs (it waits on the
    // agent) when the new primary dies.
    let former = agent.next(T).await;
    assert_eq!(former.site, "iad");
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("pdx"), Some(2)), "switched over");
    tokio::task::block_in_place(|| ds.sc.pair.kill9("pdx"));
    wait_status(cluster, &group, "automatic failover held by iad's Job", T, |s| {
        match bloodraven_e2e::fixtures::condition(s, "AutomaticFailoverHeld") {
            Some(c) if c.status == "True" && c.message.contains("ordered update n1") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    assert_eq!(s.topology_generation, Some(2), "no promotion of iad while its Job runs");
    // The Job ends: the hold ends with it, and the lost primary is failed over.
    former.reply.send(Ok(())).unwrap();
    wait_status(cluster, &group, "an emergency failover to iad, generation 3", T, |s| {
        match (s.active_site.as_deref(), s.topology_generation) {
            (Some("iad"), Some(3)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let s = wait_status(cluster, &group, "n1 superseded", T, |s| update_at(s, "n1", "Failed")).await;
    let message = s.ordered_update.as_ref().unwrap().message.clone().unwrap_or_default();
    assert!(message.contains("superseded") && message.contains("an emergency failover"), "{message}");
    assert_eq!(s.topology_generation, Some(3), "one more decision: the emergency failover's");
    assert_eq!(ds.sc.pair.sql("iad", "SELECT @@read_only").trim(), "0", "iad is the writable primary");
}
