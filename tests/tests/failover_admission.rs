//! Planned failover admission and decision integrity on the real pair:
//! a live failover-hold defers a planned failover, every renewal moves
//! its retry time, and it runs by itself after release and after lapse; a
//! migration lease alone defers nothing; a hand-edited decision record
//! stops failover until a person resolves it.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::{scenario, token_of};
use bloodraven_e2e::fixtures::{Scenario, condition, is_ready_at, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

async fn request(cluster: &bloodraven_e2e::Cluster, group: &str, target: &str, id: &str) {
    let patch = json!({"spec": {"plannedFailover": {"targetSite": target, "requestId": id}}});
    cluster.groups().patch(group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn at_phase(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    match &s.planned_failover {
        Some(p) if p.request_id == id && p.phase == phase => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

fn retry_time(s: &MysqlFailoverGroupStatus) -> Option<String> {
    let a = s.planned_failover.as_ref()?.admission.as_ref()?;
    a.retry_time.as_ref().map(|t| t.0.to_string())
}

#[tokio::test]
async fn a_failover_hold_defers_the_planned_failover_until_release_and_until_lapse() {
    let ds = scenario("defer").await;
    let (p, cluster) = (&ds.pipeline, &ds.sc.cluster);
    let group = p.group.clone();

    // Mutex, then hold (ttl 10).
    let m = p.post_until(201, "migration", "op1", "counter-app", 60).await;
    let h = p.post("failover-hold", "op1", "counter-app", 10).await;
    assert_eq!(h.status, 201, "{h:?}");
    request(cluster, &group, "pdx", "d1").await;
    // Deferred, it holds nothing: automatic failover is not held for it.
    let s = wait_status(cluster, &group, "d1 deferred, automatic failover not held, the group unstable", T, |s| {
        at_phase(s, "d1", "Deferred")?;
        // The observer marks the group right after the phase is written.
        if (s.stable, s.unstable_reason.as_deref()) != (Some(false), Some("OperationInProgress")) {
            return Err(format!("stable {:?}, unstableReason {:?}", s.stable, s.unstable_reason));
        }
        match condition(s, "AutomaticFailoverHeld") {
            Some(c) if c.status == "False" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let admission = s.planned_failover.as_ref().unwrap().admission.clone().unwrap();
    assert_eq!(admission.defer_reason.as_deref(), Some("DeploymentHold"));
    assert!(admission.message.as_deref().unwrap_or("").contains("op1"), "{admission:?}");
    assert!(admission.message.as_deref().unwrap_or("").contains("counter-app"), "{admission:?}");
    assert_eq!((s.stable, s.unstable_reason.as_deref()), (Some(false), Some("OperationInProgress")));
    let first = retry_time(&s).unwrap();

    // New grants wait; the hold's renewal goes on and moves retryTime.
    let other = p.post("migration", "op2", "counter-app", 30).await;
    assert_eq!((other.status, other.body["error"].as_str()), (423, Some("unstable")), "{other:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let renewed = p.put("failover-hold", "op1", &token_of(&h)).await;
    assert_eq!(renewed.status, 200, "{renewed:?}");
    wait_status(cluster, &group, "retryTime to move with the renewal", T, |s| {
        at_phase(s, "d1", "Deferred")?;
        let now = retry_time(s).unwrap_or_default();
        if now > first { Ok(()) } else { Err(format!("retryTime {now} (was {first})")) }
    })
    .await;

    // Released (the mutex takes the hold with it): it runs by itself.
    let released = p.delete("migration", "op1", &token_of(&m)).await;
    assert_eq!(released.status, 204, "{released:?}");
    let s = wait_status(cluster, &group, "d1 completed at pdx", T, |s| {
        at_phase(s, "d1", "Completed")?;
        is_ready_at(s, "pdx", 2)
    })
    .await;
    let phases: Vec<&str> = s.planned_failover.as_ref().unwrap().history.iter().map(|h| h.phase.as_str()).collect();
    assert_eq!(phases[..4], ["Pending", "Admitting", "Deferred", "Admitting"], "{phases:?}");
    // Each admission is an Event of its own (a trial saw the second folded
    // into the first's series).
    bloodraven_e2e::fixtures::wait_events(
        cluster,
        &group,
        "PlannedFailoverAdmitting",
        // The more specific first: the first admission's note is a prefix of the second's.
        &[&["planned failover d1 to pdx: Admitting (again: time 2)"], &["planned failover d1 to pdx: Admitting"]],
    )
    .await;

    // A migration lease alone defers nothing, and the decision revokes it.
    let m3 = p.post_until(201, "migration", "op3", "counter-app", 60).await;
    request(cluster, &group, "iad", "d2").await;
    let s = wait_status(cluster, &group, "d2 completed at iad", T, |s| {
        at_phase(s, "d2", "Completed")?;
        is_ready_at(s, "iad", 3)
    })
    .await;
    // d2 was never deferred: nothing of d1's deferral shows beside it.
    let d2 = s.planned_failover.as_ref().unwrap();
    assert!(d2.admission.is_none(), "d1's admission carried over to d2: {:?}", d2.admission);
    assert!(d2.history.iter().all(|h| h.phase != "Deferred"), "{:?}", d2.history);
    let revoked = p.put("migration", "op3", &token_of(&m3)).await;
    assert_eq!((revoked.status, revoked.body["reason"].as_str()), (409, Some("TopologyChanged")), "{revoked:?}");
    let note = wait_event(cluster, &group, "DeploymentLeaseRevoked").await;
    assert!(note.contains("TopologyChanged"), "{note}");

    // A hold left to lapse (ttl 5): the planned failover runs after it.
    let m4 = p.post_until(201, "migration", "op4", "counter-app", 120).await;
    let h4 = p.post("failover-hold", "op4", "counter-app", 5).await;
    assert_eq!(h4.status, 201, "{h4:?}");
    request(cluster, &group, "pdx", "d3").await;
    wait_status(cluster, &group, "d3 deferred", T, |s| at_phase(s, "d3", "Deferred")).await;
    wait_status(cluster, &group, "d3 completed at pdx after the hold lapsed", T, |s| {
        at_phase(s, "d3", "Completed")?;
        is_ready_at(s, "pdx", 4)
    })
    .await;
    drop(m4);
    cluster.delete_group(&group).await;
}

#[tokio::test]
async fn a_hand_edited_decision_record_stops_failover_until_a_person_resolves_it() {
    let sc = Scenario::start("recedit", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    let records: Api<ConfigMap> = Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    let record = bloodraven_e2e::fixtures::decision_record(&sc.cluster, &sc.ns.name, &name).await.unwrap();
    let record_name = record.name_any();

    // The edit a person would make with kubectl edit.
    let edit = json!({"data": {"activeSite": "pdx", "topologyGeneration": "0"}});
    let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() };
    records.patch(&record_name, &by_hand, &Patch::Merge(&edit)).await.unwrap();
    let s = wait_status(&sc.cluster, &name, "DecisionConflict", T, |s| match condition(s, "DecisionConflict") {
        Some(c) if c.status == "True" => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    let c = condition(&s, "DecisionConflict").unwrap();
    assert_eq!(c.reason, "DecisionRecordMismatch");
    assert!(c.message.contains("kubectl-edit") && c.message.contains(&record_name), "{}", c.message);
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "nothing restored from it");
    assert_eq!(s.stable, Some(false));
    wait_event(&sc.cluster, &name, "DecisionRecordMismatch").await;

    // A later hand edit of status does not stand as a decision either; a
    // planned failover is refused while the conflict stands.
    let status_edit = json!({"status": {"topologyGeneration": 7}});
    sc.cluster.groups().patch_status(&name, &by_hand, &Patch::Merge(&status_edit)).await.unwrap();
    request(&sc.cluster, &name, "pdx", "r1").await;
    let want = sc.cluster.groups().get(&name).await.unwrap().metadata.generation;
    wait_status(&sc.cluster, &name, "the request to be seen", T, |s| {
        if s.observed_generation == want { Ok(()) } else { Err(format!("{:?}", s.observed_generation)) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    assert!(s.planned_failover.is_none(), "no request taken up: {:?}", s.planned_failover);
    assert_eq!(condition(&s, "DecisionConflict").map(|c| c.status.as_str()), Some("True"));
    assert_eq!(sc.pair.sql("iad", "SELECT @@read_only").trim(), "0", "nothing was done to the sites");

    // The person resolves it (docs/runbook.md): status to the last decided
    // values, then the record deleted; the operator records status again.
    let fix = json!({"status": {"activeSite": "iad", "topologyGeneration": 1}});
    sc.cluster.groups().patch_status(&name, &by_hand, &Patch::Merge(&fix)).await.unwrap();
    records.delete(&record_name, &DeleteParams::default()).await.unwrap();
    wait_status(&sc.cluster, &name, "the conflict cleared and r1 completed at pdx, generation 2", T, |s| {
        match condition(s, "DecisionConflict") {
            Some(c) if c.status == "False" => {}
            other => return Err(format!("{other:?}")),
        }
        at_phase(s, "r1", "Completed")?;
        is_ready_at(s, "pdx", 2)
    })
    .await;
    sc.cluster.delete_group(&name).await;
}
