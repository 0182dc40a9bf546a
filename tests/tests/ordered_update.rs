//! The ordered update on the real node and pair: Jobs built from the
//! request's template run as Pods (the tools image), each asking a host
//! agent to restart its site with a new server setting, as a real upgrade
//! restarts the server; the standby first, then a switchover by the planned
//! failover's steps, then the former primary, and with `switchBack` a
//! second switchover. A writer through `<db>-primary` runs throughout.
//! Also: a live failover-hold defers the update until it is released, and
//! a Job that fails before the switchover leaves the generation as it was.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::{DeployScenario, scenario, token_of};
use bloodraven_e2e::fixtures::{is_ready_at, wait_events, wait_status};
use bloodraven_e2e::hostagent::{HostAgent, job_script, jobs_namespace};
use bloodraven_e2e::plugin::Plugin;
use bloodraven_e2e::pods::{image, node_address};
use bloodraven_e2e::wait::wait_for;
use bloodraven_e2e::writer::{self, Writer};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);
/// The server setting the "update" changes: a client sees it.
const UPDATED: &str = "137";

async fn request(ds: &DeployScenario, jobs_ns: &str, agent: &str, id: &str, switch_back: bool) {
    let template = json!({
        "metadata": {"labels": {"team": "databases"}},
        "spec": {"template": {"spec": {"containers": [{
            "name": "update", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", job_script(agent, "update")],
        }]}}},
    });
    let patch = json!({"spec": {"orderedUpdate": {
        "requestId": id, "namespace": jobs_ns, "jobTemplate": template, "switchBack": switch_back,
        "activeDeadlineSeconds": 300,
    }}});
    ds.sc.cluster.groups().patch(&ds.pipeline.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn update_phase(s: &MysqlFailoverGroupStatus) -> (String, String) {
    s.ordered_update.as_ref().map(|p| (p.request_id.clone(), p.phase.clone())).unwrap_or_default()
}

fn at_phase(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    let (rid, ph) = update_phase(s);
    if rid == id && ph == phase {
        Ok(())
    } else {
        Err(format!("request {rid} in phase {ph:?}: {:?}", s.ordered_update))
    }
}

/// Serves the agent's next request: an `update` of the site the test
/// expects, done by restarting it read-only with [`UPDATED`] connections.
async fn serve_update(ds: &DeployScenario, agent: &mut HostAgent, site: &str) {
    let req = agent.next(T).await;
    assert_eq!((req.action.as_str(), req.site.as_str()), ("update", site), "the Job of the wrong site asked");
    let pair = &ds.sc.pair;
    tokio::task::block_in_place(|| {
        pair.stop(site);
        pair.restart_with(site, true, &format!("--max-connections={UPDATED}"));
    });
    req.reply.send(Ok(())).unwrap();
}

fn history(s: &MysqlFailoverGroupStatus) -> Vec<String> {
    s.ordered_update.as_ref().unwrap().history.iter().map(|h| h.phase.clone()).collect()
}

/// The Jobs are fail-closed and owned by the group, and kept.
async fn jobs_are_fail_closed_owned_and_kept(
    cluster: &bloodraven_e2e::Cluster,
    namespace: &str,
    group: &str,
    jobs_seen: &[bloodraven_api::v1alpha1::SiteJobStatus],
) {
    let job_api: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(cluster.client.clone(), namespace);
    for j in jobs_seen {
        let job = job_api.get(&j.job_name).await.unwrap();
        let spec = job.spec.clone().unwrap();
        assert_eq!(spec.backoff_limit, Some(0), "{}", j.job_name);
        assert_eq!(spec.active_deadline_seconds, Some(300));
        let owner = job.metadata.owner_references.clone().unwrap_or_default();
        assert!(owner.iter().any(|o| o.kind == "MysqlFailoverGroup" && o.name == group), "{owner:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_update_updates_each_site_in_turn_under_a_writer_and_moves_the_generation_once_or_twice() {
    let ds = scenario("update").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    let jobs = jobs_namespace(cluster, "update-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;
    writer::prepare(&ds.sc.pair, "iad");
    let writes = Writer::start(cluster, &ds.sc.ns.name, "counter-app");
    wait_for("the writer to write through counter-app-primary", T, || async {
        let n = ds.sc.pair.try_sql("iad", "SELECT COUNT(*) FROM bench.t")?;
        if n.trim().parse::<u64>().unwrap_or(0) > 10 { Ok(()) } else { Err(n) }
    })
    .await;

    request(&ds, &jobs.name, &agent.address, "u1", false).await;
    // On-call follows it with the plugin, as a switchover is followed.
    let follow = Plugin::admin(&ds.sc.ns.name).spawn(&["wait", &group, "--timeout", "240s"]);
    // The standby's Job runs first; the group is unstable, and the deploy
    // API lists the update with its phase.
    let s = wait_status(cluster, &group, "u1 updating the standby", T, |s| at_phase(s, "u1", "UpdatingStandby")).await;
    assert_eq!(s.ordered_update.as_ref().unwrap().standby_site.as_deref(), Some("pdx"));
    let view = ds.pipeline.get().await;
    assert_eq!(view.status, 200, "{view:?}");
    let ops = view.body["operations"].as_array().cloned().unwrap_or_default();
    assert!(
        ops.iter().any(|o| o["type"] == "OrderedUpdate" && o["requestId"] == "u1"),
        "operations[] lists the update: {ops:?}"
    );
    assert_eq!(view.body["stable"], json!(false), "{:?}", view.body);
    serve_update(&ds, &mut agent, "pdx").await;
    // Then the switchover, then the former primary's Job.
    serve_update(&ds, &mut agent, "iad").await;
    let s = wait_status(cluster, &group, "u1 completed at pdx, generation 2", T, |s| {
        at_phase(s, "u1", "Completed")?;
        is_ready_at(s, "pdx", 2)
    })
    .await;
    assert_eq!(
        history(&s),
        [
            "Pending",
            "Admitting",
            "UpdatingStandby",
            "VerifyingStandby",
            "SwitchoverDraining",
            "SwitchoverPromoting",
            "SwitchoverRepointing",
            "UpdatingFormerPrimary",
            "VerifyingFormerPrimary",
            "Completed"
        ]
    );
    let jobs_seen = &s.ordered_update.as_ref().unwrap().jobs;
    let summary: Vec<(&str, &str, &str)> =
        jobs_seen.iter().map(|j| (j.site.as_str(), j.role.as_str(), j.result.as_str())).collect();
    assert_eq!(summary, [("pdx", "standby", "Complete"), ("iad", "former-primary", "Complete")]);
    for site in ["iad", "pdx"] {
        assert_eq!(ds.sc.pair.sql(site, "SELECT @@max_connections").trim(), UPDATED, "{site} was updated");
    }
    jobs_are_fail_closed_owned_and_kept(cluster, &jobs.name, &group, jobs_seen).await;
    wait_events(cluster, &group, "OrderedUpdateCompleted", &[&["ordered update u1"]]).await;
    let out = follow.finish(T).await;
    out.expect_code(0)
        .stdout_has(&[&format!(
            "ordered-update u1 Completed: pdx is the active site of group {group} at topology generation 2"
        )])
        .stderr_has(&[
            "following ordered-update u1",
            "UpdatingStandby",
            "SwitchoverPromoting",
            "UpdatingFormerPrimary",
        ]);

    // With switchBack: both sites once more, the generation twice.
    request(&ds, &jobs.name, &agent.address, "u2", true).await;
    serve_update(&ds, &mut agent, "iad").await;
    serve_update(&ds, &mut agent, "pdx").await;
    let s = wait_status(cluster, &group, "u2 completed back at pdx, generation 4", T, |s| {
        at_phase(s, "u2", "Completed")?;
        is_ready_at(s, "pdx", 4)
    })
    .await;
    let phases = history(&s);
    assert!(
        phases.ends_with(
            &["SwitchBackDraining", "SwitchBackPromoting", "SwitchBackRepointing", "Completed"].map(String::from)
        ),
        "{phases:?}"
    );

    tokio::time::sleep(Duration::from_secs(1)).await;
    let written = writes.stop().await;
    assert!(written.acknowledged.len() > 50, "{} writes", written.acknowledged.len());
    wait_for("the sites to converge", T, || async {
        let (a, b) = (writer::checksum(&ds.sc.pair, "iad"), writer::checksum(&ds.sc.pair, "pdx"));
        if a == b { Ok(()) } else { Err(format!("iad {a} pdx {b}")) }
    })
    .await;
    for site in ["iad", "pdx"] {
        let lost = writer::missing(&ds.sc.pair, site, &written.acknowledged);
        assert!(lost.is_empty(), "{} acknowledged writes missing on {site}: {lost:?}", lost.len());
    }
    let worst = written.gaps.iter().max().copied().unwrap_or_default();
    eprintln!(
        "ordered update: {} acknowledged writes, 0 lost, {} failed and retried, longest write gap {worst:?}",
        written.acknowledged.len(),
        written.failures
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_defers_the_update_and_a_job_that_fails_before_the_switchover_moves_nothing() {
    let ds = scenario("update-hold").await;
    let (cluster, group, p) = (&ds.sc.cluster, ds.pipeline.group.clone(), &ds.pipeline);
    let jobs = jobs_namespace(cluster, "update-hold-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;

    // Jobs run only where a cluster admin allowed them, never beside the operator.
    let unlabelled = cluster.namespace("update-nolabel").await;
    // Allowed for another group only: a cluster admin allowed it for that
    // group's requests, not for whoever may edit this one.
    let others = bloodraven_e2e::hostagent::jobs_namespace_for(cluster, "update-others", "payments, orders2").await;
    for (id, ns, want) in [
        ("n1", unlabelled.name.as_str(), "site-jobs=allowed"),
        ("n2", ds.sc.ns.name.as_str(), "the operator's own"),
        ("n9", others.name.as_str(), "site-jobs-groups"),
    ] {
        request(&ds, ns, &agent.address, id, false).await;
        let s = wait_status(cluster, &group, "the request refused", T, |s| at_phase(s, id, "Failed")).await;
        let message = s.ordered_update.as_ref().unwrap().message.clone().unwrap_or_default();
        assert!(message.contains(want), "{message}");
        assert_eq!(s.topology_generation, Some(1));
    }

    // A template the API server refuses (a container name that is no DNS
    // label) fails at admission, before any site is touched.
    let bad = json!({"spec": {"orderedUpdate": {"requestId": "n3", "namespace": jobs.name, "jobTemplate": {
        "spec": {"template": {"spec": {"containers": [{"name": "Not_A_Label", "image": "x"}]}}}}}}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&bad)).await.unwrap();
    let s = wait_status(cluster, &group, "n3 refused at admission", T, |s| at_phase(s, "n3", "Failed")).await;
    let n3 = s.ordered_update.clone().unwrap();
    let message = n3.message.clone().unwrap_or_default();
    assert!(message.contains("would not be created") && message.contains("nothing was touched"), "{message}");
    assert!(n3.history.iter().all(|h| h.phase != "UpdatingStandby"), "{:?}", n3.history);
    assert_eq!(s.topology_generation, Some(1));

    // A pipeline's hold: the migration lease first, then the hold.
    let m = p.post_until(201, "migration", "op1", "counter-app", 120).await;
    let h = p.post("failover-hold", "op1", "counter-app", 60).await;
    assert_eq!(h.status, 201, "{h:?}");
    request(&ds, &jobs.name, &agent.address, "h1", false).await;
    let s = wait_status(cluster, &group, "h1 deferred behind the hold", T, |s| at_phase(s, "h1", "Deferred")).await;
    let admission = s.ordered_update.as_ref().unwrap().admission.clone().unwrap();
    assert_eq!(admission.defer_reason.as_deref(), Some("DeploymentHold"));
    assert!(admission.message.as_deref().unwrap_or("").contains("op1"), "{admission:?}");
    assert!(admission.retry_time.is_some());
    // Nothing runs while the hold lives.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(agent.requests.try_recv().is_err(), "a Job ran behind a live hold");
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    at_phase(&s, "h1", "Deferred").unwrap();
    assert_eq!(s.topology_generation, Some(1));

    // A planned failover asked meanwhile waits behind the same hold, and
    // when it ends the update in flight refuses it: one operation at a time.
    let planned = json!({"spec": {"plannedFailover": {"targetSite": "pdx", "requestId": "p1"}}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&planned)).await.unwrap();
    wait_status(cluster, &group, "p1 deferred too", T, |s| match &s.planned_failover {
        Some(p) if p.request_id == "p1" && p.phase == "Deferred" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;

    // Released: it runs; this time the standby's Job fails.
    let released = p.delete("failover-hold", "op1", &token_of(&h)).await;
    assert_eq!(released.status, 204, "{released:?}");
    let released = p.delete("migration", "op1", &token_of(&m)).await;
    assert_eq!(released.status, 204, "{released:?}");
    let req = agent.next(T).await;
    assert_eq!(req.site, "pdx");
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    let p1 = s.planned_failover.clone().unwrap();
    assert_eq!(p1.phase, "Failed", "{p1:?}");
    assert!(p1.message.as_deref().unwrap_or("").contains("ordered update h1"), "{p1:?}");
    req.reply.send(Err("the package would not install".into())).unwrap();
    let s = wait_status(cluster, &group, "h1 failed before the switchover", T, |s| at_phase(s, "h1", "Failed")).await;
    let st = s.ordered_update.clone().unwrap();
    assert_eq!(st.attention_site.as_deref(), Some("pdx"), "{st:?}");
    let message = st.message.clone().unwrap_or_default();
    assert!(message.contains("nothing was switched over"), "{message}");
    assert_eq!(st.jobs.iter().map(|j| j.result.as_str()).collect::<Vec<_>>(), ["Failed"]);
    assert_eq!(
        (s.active_site.as_deref(), s.topology_generation),
        (Some("iad"), Some(1)),
        "the generation did not move"
    );
    assert_eq!(ds.sc.pair.sql("iad", "SELECT @@read_only").trim(), "0", "the primary serves on");
    wait_status(cluster, &group, "stable again at iad, generation 1", T, |s| is_ready_at(s, "iad", 1)).await;
    wait_events(cluster, &group, "OrderedUpdateFailed", &[&["ordered update h1", "pdx"]]).await;

    // Written back by hand into a running phase (the spec still asks for
    // h1), once pointed at the primary: the request ended, so no Job runs.
    for (phase, source, standby) in [("UpdatingStandby", "pdx", "iad"), ("Pending", "iad", "pdx")] {
        let forged =
            json!({"status": {"orderedUpdate": {"phase": phase, "sourceSite": source, "standbySite": standby}}});
        cluster.groups().patch_status(&group, &PatchParams::default(), &Patch::Merge(&forged)).await.unwrap();
        let s = wait_status(cluster, &group, "the replay refused", T, |s| {
            match s.ordered_update.as_ref().map(|u| (u.phase.as_str(), u.message.clone().unwrap_or_default())) {
                Some(("Failed", m)) if m.contains("has ended") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert_eq!(s.topology_generation, Some(1), "{phase}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(agent.requests.try_recv().is_err(), "a Job ran for a request that had ended");
}

/// A short detection budget (1 s × 3), then update `id` requested: returns
/// once the standby's Job asks the agent for its update (it waits on the
/// answer, so the Job runs until the test replies).
async fn standby_job_running(ds: &DeployScenario, id: &str) -> (HostAgent, bloodraven_e2e::hostagent::AgentRequest) {
    let patch =
        json!({"spec": {"failover": {"probeIntervalSeconds": 1, "failureThreshold": 3, "probeTimeoutSeconds": 1}}});
    ds.sc.cluster.groups().patch(&ds.pipeline.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let jobs = jobs_namespace(&ds.sc.cluster, &format!("update-{id}-jobs")).await;
    let mut agent = HostAgent::start(&node_address()).await;
    request(ds, &jobs.name, &agent.address, id, false).await;
    let req = agent.next(T).await;
    assert_eq!(req.site, "pdx");
    (agent, req)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_lost_while_the_standby_updates_is_failed_over_once_the_job_ends() {
    let ds = scenario("update-loss").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    // The standby's Job runs (it waits on the agent) when the primary dies.
    let (_agent, req) = standby_job_running(&ds, "l1").await;
    tokio::task::block_in_place(|| ds.sc.pair.kill9("iad"));
    // The update holds the promotion of the site its Job works on: no
    // failover to a server being upgraded, and it says why.
    let s = wait_status(cluster, &group, "automatic failover held by the standby's Job", T, |s| {
        match bloodraven_e2e::fixtures::condition(s, "AutomaticFailoverHeld") {
            Some(c) if c.status == "True" && c.message.contains("ordered update l1") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        (s.active_site.as_deref(), s.topology_generation),
        (Some("iad"), Some(1)),
        "no failover while the Job runs"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    assert_eq!(s.topology_generation, Some(1), "still held while the Job runs");
    // The Job ends: the hold ends with it, and the lost primary is failed over.
    req.reply.send(Ok(())).unwrap();
    wait_status(cluster, &group, "an emergency failover to pdx, generation 2", T, |s| {
        if (s.active_site.as_deref(), s.topology_generation) == (Some("pdx"), Some(2)) {
            Ok(())
        } else {
            Err(format!("{:?} {:?}", s.active_site, s.topology_generation))
        }
    })
    .await;
    // The update is superseded, never run against the new topology.
    let s = wait_status(cluster, &group, "l1 superseded", T, |s| at_phase(s, "l1", "Failed")).await;
    let message = s.ordered_update.as_ref().unwrap().message.clone().unwrap_or_default();
    assert!(message.contains("superseded by an emergency failover"), "{message}");
    assert_eq!(s.topology_generation, Some(2), "one decision: the emergency failover's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_written_by_hand_while_the_standby_updates_does_not_lift_its_hold() {
    let ds = scenario("update-forged").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    let (_agent, req) = standby_job_running(&ds, "f1").await;
    // Status says the update is over while pdx's Job still runs (no webhook
    // guards status here, as on a cluster installed without one). Then the
    // primary dies: pdx, possibly half-updated, must not be promoted. The
    // record holds the Job, and the request, which the operator did not
    // end, runs on (its phase written back).
    let forged = json!({"status": {"orderedUpdate": {"phase": "Completed"}}});
    cluster.groups().patch_status(&group, &PatchParams::default(), &Patch::Merge(&forged)).await.unwrap();
    tokio::task::block_in_place(|| ds.sc.pair.kill9("iad"));
    let s = wait_status(cluster, &group, "automatic failover held by the Job", T, |s| {
        match bloodraven_e2e::fixtures::condition(s, "AutomaticFailoverHeld") {
            Some(c) if c.status == "True" && c.message.contains("pdx") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    bloodraven_e2e::fixtures::wait_events(
        cluster,
        &group,
        "StatusRestored",
        &[&["ordered update f1 in phase Completed, which the operator did not write", "runs on from UpdatingStandby"]],
    )
    .await;
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    assert_eq!(s.topology_generation, Some(1), "pdx promoted while its Job runs: {:?}", s.conditions);
    // The Job ends: the hold ends with it, whatever status says.
    req.reply.send(Ok(())).unwrap();
    wait_status(cluster, &group, "an emergency failover to pdx, generation 2", T, |s| {
        if (s.active_site.as_deref(), s.topology_generation) == (Some("pdx"), Some(2)) {
            Ok(())
        } else {
            Err(format!("{:?} {:?}", s.active_site, s.topology_generation))
        }
    })
    .await;
}

/// A Job that took our Job's name does not lift the hold: the standby's
/// Job is deleted with its Pod left running (`--cascade=orphan`), and a
/// look-alike of the same name, labels, annotation and owner is made that
/// ends at once. Read by name, it passed for ours and its end ended the
/// hold while the orphaned Pod still updated pdx. The record pins the
/// Job's uid once it is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_alike_job_that_took_the_name_of_ours_does_not_lift_its_hold() {
    use bloodraven_api::names::site_job::{OPERATION_LABEL, REQUEST_ID_ANNOTATION, SITE_LABEL};
    use k8s_openapi::api::batch::v1::Job;
    use kube::ResourceExt as _;
    use kube::api::{DeleteParams, ListParams, PostParams};

    let ds = scenario("update-lookalike").await;
    let (cluster, group) = (&ds.sc.cluster, ds.pipeline.group.clone());
    let (_agent, _req) = standby_job_running(&ds, "a1").await;
    // This group's Job, in its request's namespace: the same test runs on
    // the other flavor at the same time, with a Job of the same labels and
    // request id (a cluster-wide list once found that one, and the test
    // replaced the other run's Job).
    let stored = cluster.groups().get(&group).await.unwrap();
    let uid = stored.metadata.uid.clone().unwrap();
    let jobs_ns = stored.status.and_then(|s| s.ordered_update).and_then(|u| u.namespace).unwrap();
    let in_ns: kube::Api<Job> = kube::Api::namespaced(cluster.client.clone(), &jobs_ns);
    let selector = format!("{SITE_LABEL}=pdx,{OPERATION_LABEL}=ordered-update");
    let ours = in_ns
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|j| {
            j.owner_references().iter().any(|o| o.uid == uid)
                && j.metadata.annotations.as_ref().and_then(|a| a.get(REQUEST_ID_ANNOTATION)).map(String::as_str)
                    == Some("a1")
        })
        .expect("the standby's Job");
    let (name, namespace) = (ours.metadata.name.clone().unwrap(), ours.metadata.namespace.clone().unwrap());
    let jobs: kube::Api<Job> = kube::Api::namespaced(cluster.client.clone(), &namespace);
    jobs.delete(&name, &DeleteParams::orphan()).await.unwrap();
    wait_for("our Job to be gone", T, || async {
        match jobs.get_opt(&name).await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let look_alike: Job = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": ours.metadata.labels,
            "annotations": ours.metadata.annotations,
            "ownerReferences": ours.metadata.owner_references,
        },
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "done", "image": image("BLOODRAVEN_BUSYBOX_IMAGE"), "imagePullPolicy": "IfNotPresent",
            "command": ["true"],
        }]}}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &look_alike).await.unwrap();
    wait_for("the look-alike to complete", T, || async {
        let j = jobs.get(&name).await.map_err(|e| e.to_string())?;
        let done = j.status.and_then(|s| s.succeeded).unwrap_or(0) == 1;
        if done { Ok(()) } else { Err("running".to_owned()) }
    })
    .await;
    // The request ends, and the hold stays: the primary dies, and pdx, whose
    // update may still run, is not promoted. Which failure the request names
    // depends on whether a poll fell between the delete and the create: the
    // Job gone, or a Job that is not this request's. Both leave the hold.
    let s = wait_status(cluster, &group, "the request failed on the look-alike", T, |s| {
        match s.ordered_update.as_ref().map(|u| (u.phase.as_str(), u.message.clone().unwrap_or_default())) {
            Some(("Failed", m))
                if m.contains("not this request's") || m.contains("is gone before it was seen to end") =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(s.topology_generation, Some(1));
    tokio::task::block_in_place(|| ds.sc.pair.kill9("iad"));
    wait_status(cluster, &group, "automatic failover held by the recorded Job", T, |s| {
        match bloodraven_e2e::fixtures::condition(s, "AutomaticFailoverHeld") {
            Some(c) if c.status == "True" && c.message.contains("decision record") && c.message.contains("pdx") => {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    assert_eq!(s.topology_generation, Some(1), "pdx promoted while its orphaned update may run: {:?}", s.conditions);
}

/// Found by an attack on the update: a Job that restarts its server
/// without `read_only` in its configuration, then runs its upgrade as an
/// account that writes through `read_only` (root). Reassertion fenced the
/// writable standby in full: on MariaDB it ended the upgrade's session,
/// on MySQL `super_read_only` stopped its writes, and the update failed
/// halfway. While the Job's hold holds, the site is made read-only only:
/// applications cannot write there, and the upgrade goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_restarted_writable_by_its_update_job_keeps_the_jobs_sessions() {
    let ds = scenario("update-writable").await;
    let (cluster, group, pair) = (&ds.sc.cluster, ds.pipeline.group.clone(), &ds.sc.pair);
    let (_agent, req) = standby_job_running(&ds, "w1").await;
    tokio::task::block_in_place(|| {
        pair.stop("pdx");
        pair.restart("pdx", false);
    });
    // The upgrade, as root, writing a moment after the fence comes.
    let upgrade = pair
        .sql_command("pdx", "SET sql_log_bin = 0; SELECT SLEEP(10); CREATE DATABASE upgraded_here")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    pair.wait_read_only("pdx", true, T).await;
    let note = bloodraven_e2e::fixtures::wait_events(
        cluster,
        &group,
        "PrimaryReasserted",
        &[&["site pdx", "ordered update's Job may be updating it", "its sessions left to the Job"]],
    )
    .await;
    eprintln!("{note:?}");
    let out = tokio::task::block_in_place(|| upgrade.wait_with_output()).unwrap();
    assert!(out.status.success(), "the upgrade's session was cut off: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        pair.sql("pdx", "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'upgraded_here'").trim(),
        "1"
    );
    // Applications cannot write there meanwhile.
    assert_eq!(pair.sql("pdx", "SELECT @@read_only").trim(), "1");
    req.reply.send(Ok(())).unwrap();
    cluster.delete_group(&group).await;
}
