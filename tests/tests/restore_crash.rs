//! Restore-in-place is crash-safe: the leader is killed in every phase of a
//! restore (a failpoint aborts the real binary there, as SIGKILL would),
//! and the next leader finishes it from the decision record, status, the
//! Job and the sites: the Job runs once, the generation moves by exactly
//! one per restore, and the old primary waits for its re-clone. The Jobs
//! ask a host agent, which makes the site stand alone as a restore tool
//! would (the restore of real data is `restore_in_place.rs`'s).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::Operator;
use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_status};
use bloodraven_e2e::hostagent::{HostAgent, job_script, jobs_namespace};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::pods::{image, node_address};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);
/// Quick takeovers: a killed leader's Lease lapses in 3 s.
const QUICK: LeaderTimings = LeaderTimings { lease_duration: 3, renew_deadline: 2, retry_period: 1 };

/// A point in every phase of a restore (and between the Job's creation
/// and its record, and the switchover's steps).
const POINTS: [&str; 12] = [
    "restore-in-place-entered-Admitting",
    "restore-in-place-entered-Restoring",
    "restore-in-place-after-job",
    "restore-in-place-entered-Verifying",
    "restore-in-place-entered-Fencing",
    "restore-in-place-after-fence",
    "decide-after-record",
    "restore-in-place-after-decide",
    "restore-in-place-entered-Promoting",
    "restore-in-place-after-promote",
    "restore-in-place-entered-Repointing",
    "restore-in-place-entered-AwaitingReclone",
];

fn at(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    match &s.restore_in_place {
        Some(r) if r.request_id == id && r.phase == phase => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_in_every_phase_of_a_restore_is_finished_by_the_next_one() {
    let sc = Scenario::start("rstcrash", 0, QUICK).await;
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK).await;
    let name = sc.bootstrapped_group("g").await;
    let jobs = jobs_namespace(&sc.cluster, "rstcrash-jobs").await;
    let agent = HostAgent::start(&node_address()).await;
    // Data to re-clone from one restore to the next.
    sc.pair.sql(
        "iad",
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY); INSERT INTO shop.orders VALUES (1)",
    );
    let template = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "restore", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", job_script(&agent.address, "restore")],
    }]}}}});
    // Every Job's request, by (request, site): each must come once.
    let asked: Arc<Mutex<BTreeMap<(String, String), u32>>> = Arc::default();
    let server = {
        let asked = asked.clone();
        agent.serve_stand_alone(&sc.pair, move |req| {
            *asked.lock().unwrap().entry((req.request.clone(), req.site.clone())).or_default() += 1;
        })
    };

    let mut generation = 1;
    let (mut primary, mut standby) = ("iad", "pdx");
    for (i, point) in POINTS.iter().enumerate() {
        let id = format!("r{i}");
        op.stop().await;
        op = Operator::start_with(
            &sc.cluster,
            &sc.ns,
            &sc.ns.name,
            &format!("crash{i}"),
            QUICK,
            &["--failpoint".into(), (*point).into()],
        )
        .await;
        let patch = json!({"spec": {"restoreInPlace": {"requestId": id, "activeDeadlineSeconds": 120, "namespace": jobs.name, "jobTemplate": template}}});
        sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let status = op
            .wait_exit(T)
            .await
            .unwrap_or_else(|| panic!("{point}: the leader did not reach its failpoint:\n{}", op.log_tail()));
        assert!(!status.success(), "{point}: {status:?}");
        op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, &format!("next{i}"), QUICK).await;
        generation += 1;
        let s =
            wait_status(&sc.cluster, &name, &format!("{id} ({point}) awaiting the re-clone of {primary}"), T, |s| {
                at(s, &id, "AwaitingReclone")?;
                if s.active_site.as_deref() == Some(standby) && s.topology_generation == Some(generation) {
                    Ok(())
                } else {
                    Err(format!("activeSite {:?} generation {:?}", s.active_site, s.topology_generation))
                }
            })
            .await;
        assert_eq!(s.restore_in_place.as_ref().unwrap().reclone_site.as_deref(), Some(primary), "{point}");
        assert_eq!(sc.pair.sql(primary, "SELECT @@read_only").trim(), "1", "{point}: the old primary stays fenced");
        assert!(!sc.pair.replicates(primary), "{point}: the old primary was put back into replication");

        tokio::task::block_in_place(|| sc.pair.reclone(primary, standby, &["shop"]));
        let mark = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/reclone-done": format!("{primary}@{generation}")}}});
        sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&mark)).await.unwrap();
        (primary, standby) = (standby, primary);
        wait_status(&sc.cluster, &name, &format!("{id} completed, {primary} ready at {generation}"), T, |s| {
            at(s, &id, "Completed")?;
            is_ready_at(s, primary, generation)
        })
        .await;
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.get(&(id.clone(), primary.to_owned())), Some(&1), "{point}: the Job ran once: {asked:?}");
        assert_eq!(asked.len(), i + 1, "{point}: one Job per restore: {asked:?}");
        eprintln!("{point}: finished by the next leader at generation {generation}");
    }
    server.abort();
    sc.cluster.delete_group(&name).await;
}
