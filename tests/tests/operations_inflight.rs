//! The decision record's `inFlight` (a request runs only on the terms the
//! record took it up on, and only until it ends), under the attacks that
//! found its faults: terms written into a `Pending` status before the
//! operator took the request up, a running request's id pushed out of the
//! record's last 64 `requests`, and a leader killed between a restore's
//! `Completed` and the release of its re-clone hold.

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::Operator;
use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_status};
use bloodraven_e2e::hostagent::{HostAgent, job_script, jobs_namespace};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::pods::{image, node_address};
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);
/// Quick takeovers: a killed leader's Lease lapses in 3 s.
const QUICK: LeaderTimings = LeaderTimings { lease_duration: 3, renew_deadline: 2, retry_period: 1 };

fn template(agent: &str, action: &str) -> serde_json::Value {
    json!({"spec": {"template": {"spec": {"containers": [{
        "name": action, "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", job_script(agent, action)],
    }]}}}})
}

fn update_of(s: &MysqlFailoverGroupStatus) -> (String, String, String) {
    s.ordered_update
        .as_ref()
        .map(|u| (u.request_id.clone(), u.phase.clone(), u.message.clone().unwrap_or_default()))
        .unwrap_or_default()
}

/// A status writer (not the spec's author) writes `status.orderedUpdate`
/// as `Pending` for the id the spec asks, before the operator takes it up
/// (here: while the operator restarts), with `switchBack: true` and another
/// allowed namespace. The spec asked for no switch-back, in namespace
/// `jobs`. Taken up on the status's terms, it ran a switch-back nobody
/// asked for, its Jobs in the other namespace. The terms a request is
/// taken up on are the spec's at the decided topology: the forged status
/// is refused, no second switchover, no Job outside the spec's namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_status_written_before_take_up_does_not_set_the_terms_of_an_ordered_update() {
    let sc = Scenario::start("aifpend", 0, QUICK).await;
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK).await;
    let name = sc.bootstrapped_group("g").await;
    let jobs = jobs_namespace(&sc.cluster, "aifpend-jobs").await;
    let other = jobs_namespace(&sc.cluster, "aifpend-other").await;
    let mut agent = HostAgent::start(&node_address()).await;
    let address = agent.address.clone();
    let asked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let server = {
        let asked = asked.clone();
        tokio::spawn(async move {
            while let Some(req) = agent.requests.recv().await {
                asked.lock().unwrap().push((req.request.clone(), req.site.clone()));
                let _ = req.reply.send(Ok(()));
            }
        })
    };

    op.stop().await;
    let spec = json!({"spec": {"orderedUpdate": {
        "requestId": "u1", "namespace": jobs.name, "jobTemplate": template(&address, "update"),
        "switchBack": false, "activeDeadlineSeconds": 300,
    }}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&spec)).await.unwrap();
    let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() };
    let forged = json!({"status": {"orderedUpdate": {
        "requestId": "u1", "phase": "Pending", "sourceSite": "iad", "standbySite": "pdx",
        "sourceGeneration": 1, "namespace": other.name, "activeDeadlineSeconds": 300, "switchBack": true,
    }}});
    sc.cluster.groups().patch_status(&name, &by_hand, &Patch::Merge(&forged)).await.unwrap();
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "next", QUICK).await;

    let s = wait_status(&sc.cluster, &name, "u1 ended", Duration::from_secs(300), |s| match update_of(s) {
        (id, phase, _) if id == "u1" && (phase == "Completed" || phase == "Failed") => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let u = s.ordered_update.as_deref().unwrap();
    let history: Vec<&str> = u.history.iter().map(|h| h.phase.as_str()).collect();
    eprintln!(
        "aifpend: u1 {} ({:?}); status terms ns={:?} switchBack={}; active {:?} gen {:?}; history {history:?}; asked {:?}",
        u.phase,
        u.message,
        u.namespace,
        u.switch_back,
        s.active_site,
        s.topology_generation,
        asked.lock().unwrap()
    );
    let in_other: kube::Api<Job> = kube::Api::namespaced(sc.cluster.client.clone(), &other.name);
    let made_there: Vec<String> = in_other
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|j| j.metadata.name.clone().unwrap_or_default())
        .collect();
    assert!(
        !history.contains(&"SwitchBackDraining"),
        "a switch-back the spec never asked for (spec.orderedUpdate.switchBack: false) ran: generation {:?}, history {history:?}",
        s.topology_generation
    );
    assert!(s.topology_generation <= Some(2), "more than one switchover: {:?}", s.topology_generation);
    assert!(
        made_there.is_empty(),
        "Jobs were made in {} (the status's namespace), not {} (the spec's): {made_there:?}",
        other.name,
        jobs.name
    );
    server.abort();
    op.stop().await;
    sc.cluster.delete_group(&name).await;
}

/// While an ordered update's standby Job runs (in `UpdatingStandby`, its
/// id and terms in the record), someone who may edit spec asks for 64
/// planned failovers, each refused at admission (one operation at a
/// time) but each recorded as taken up: the record keeps the last 64
/// `requests`, and the running update's id fell out of it: on its next
/// round the update, exactly as `inFlight` holds it, was marked `Failed`
/// ("never took it up") while its Job still ran. A request the record
/// holds in flight is never dropped from what it remembers while it runs,
/// and it goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_refused_planned_failovers_do_not_fail_a_running_ordered_update() {
    let sc = Scenario::start("aif64", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let jobs = jobs_namespace(&sc.cluster, "aif64-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;
    let spec = json!({"spec": {"orderedUpdate": {
        "requestId": "u1", "namespace": jobs.name, "jobTemplate": template(&agent.address, "update"),
        "switchBack": false, "activeDeadlineSeconds": 900,
    }}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&spec)).await.unwrap();
    // The standby's Job runs, and is held open.
    let job = agent.next(T).await;
    assert_eq!(job.site, "pdx");
    wait_status(&sc.cluster, &name, "u1 updating the standby", T, |s| match update_of(s) {
        (id, phase, _) if id == "u1" && phase == "UpdatingStandby" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;

    for i in 1..=64 {
        let id = format!("p{i}");
        sc.request_failover(&name, "pdx", &id).await;
        wait_status(&sc.cluster, &name, &format!("{id} refused"), T, |s| {
            match s.planned_failover.as_ref().map(|p| (p.request_id.as_str(), p.phase.as_str())) {
                Some((rid, "Failed")) if rid == id => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let (uid, phase, message) =
            update_of(&sc.cluster.groups().get(&name).await.unwrap().status.unwrap_or_default());
        assert!(
            uid == "u1" && phase == "UpdatingStandby",
            "after {id}: the running update was dropped: {phase}: {message}"
        );
    }
    let record = sc.record_of(&name).await.data.unwrap_or_default();
    eprintln!("aif64: record after 64 planned failovers: {record:?}");
    // A few of the update's rounds (it looks again every 2 s).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap_or_default();
    let (_, phase, message) = update_of(&s);
    assert_eq!(
        phase, "UpdatingStandby",
        "the running ordered update (its Job still running) was marked {phase}: {message}"
    );
    job.reply.send(Ok(())).unwrap();
    sc.cluster.delete_group(&name).await;
}

/// A restore-in-place awaiting its re-clone; the re-clone is done and
/// marked; the leader writes `Completed` and is killed before it clears the
/// record's `reclone` hold (failpoint `restore-in-place-entered-Completed`,
/// as SIGKILL would). The next leader found the hold and a status that
/// showed the request ended, and put status "back" (`restore_from_record`):
/// `Promoting`, then `AwaitingReclone` again, the re-clone mark removed, so
/// a person had to re-clone and mark again. The hold is now released before
/// `Completed` is written: the completed request stays `Completed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_completed_by_a_leader_killed_before_it_released_the_old_primary_stays_completed() {
    let sc = Scenario::start("aifrst", 0, QUICK).await;
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK).await;
    let name = sc.bootstrapped_group("g").await;
    let jobs = jobs_namespace(&sc.cluster, "aifrst-jobs").await;
    let agent = HostAgent::start(&node_address()).await;
    sc.pair.sql(
        "iad",
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY); INSERT INTO shop.orders VALUES (1)",
    );
    let address = agent.address.clone();
    let server = agent.serve_stand_alone(&sc.pair, |_| {});
    let patch = json!({"spec": {"restoreInPlace": {"requestId": "r1", "activeDeadlineSeconds": 120, "namespace": jobs.name, "jobTemplate": template(&address, "restore")}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_status(&sc.cluster, &name, "r1 awaiting the re-clone of iad", T, |s| {
        match s.restore_in_place.as_ref().map(|r| (r.request_id.as_str(), r.phase.as_str())) {
            Some(("r1", "AwaitingReclone")) if s.active_site.as_deref() == Some("pdx") => Ok(()),
            other => Err(format!("{other:?} active {:?}", s.active_site)),
        }
    })
    .await;

    op.stop().await;
    let mut op = Operator::start_with(
        &sc.cluster,
        &sc.ns,
        &sc.ns.name,
        "crash",
        QUICK,
        &["--failpoint".into(), "restore-in-place-entered-Completed".into()],
    )
    .await;
    tokio::task::block_in_place(|| sc.pair.reclone("iad", "pdx", &["shop"]));
    let mark = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/reclone-done": "iad@2"}}});
    sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&mark)).await.unwrap();
    let exit =
        op.wait_exit(T).await.unwrap_or_else(|| panic!("the leader did not reach its failpoint:\n{}", op.log_tail()));
    assert!(!exit.success(), "{exit:?}");
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap_or_default();
    assert_eq!(
        s.restore_in_place.as_ref().map(|r| r.phase.as_str()),
        Some("Completed"),
        "the killed leader wrote Completed"
    );
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "next", QUICK).await;

    wait_for("the completed restore to stay Completed and the record to hold nothing", T, || async {
        let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap_or_default();
        let phase = s.restore_in_place.as_ref().map(|r| (r.phase.clone(), r.message.clone())).unwrap_or_default();
        assert!(phase.0 == "Completed", "the completed restore r1 was put back into {}: {:?}", phase.0, phase.1);
        let record = sc.record_of(&name).await.data.unwrap_or_default();
        if record.contains_key("siteHold") || record.contains_key("inFlight") {
            return Err(format!("{record:?}"));
        }
        is_ready_at(&s, "pdx", 2)
    })
    .await;
    // And it stays so.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap_or_default();
    let r = s.restore_in_place.as_ref().unwrap();
    assert_eq!(r.phase, "Completed", "{:?}", r.message);
    server.abort();
    op.stop().await;
    sc.cluster.delete_group(&name).await;
}
