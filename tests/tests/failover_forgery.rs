//! Found by the third hostile attack (kept as its input): the planned failover engine trusts `status.plannedFailover` as it
//! finds it. A hand edit of status (`kubectl edit mfg NAME
//! --subresource=status`) that sets a request's phase past admission, or
//! past the decision, is driven as if the operator had got there itself:
//!
//! - `Repointing`: the writable primary (the decided active site) is made
//!   read-only and a replica of the standby — no decision, no generation
//!   change, no writable site left.
//! - `Promoting`: the standby is promoted (replication reset, writable)
//!   while the decision still names the other site.
//! - `Draining`: admission is skipped, so a live failover-hold defers
//!   nothing and the primary moves under a deploy that holds it.
//!
//! docs/failover.md: "status ... written by the operator only"; "A hand edit
//! of status alone is undone from the record"; a hold "defers planned
//! disruption"; "never two writable sites". In each test the forged
//! request is refused or ends Failed, and the sites are untouched.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_e2e::deploy::scenario;
use bloodraven_e2e::fixtures::{Scenario, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// Long enough for three probe rounds (5 s each) after the edit.
const WATCH: Duration = Duration::from_secs(25);

async fn forge(cluster: &bloodraven_e2e::Cluster, group: &str, id: &str, phase: &str, source: &str, target: &str) {
    let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() };
    let edit = json!({"status": {"plannedFailover": {
        "requestId": id, "targetSite": target, "phase": phase,
        "sourceSite": source, "sourceGeneration": 1,
    }}});
    cluster.groups().patch_status(group, &by_hand, &Patch::Merge(&edit)).await.unwrap();
}

/// Samples the sites for `WATCH`, returning the first moment (if any) the
/// primary `iad` stopped being writable or `pdx` stopped replicating.
async fn watch_sites(sc: &Scenario) -> Vec<String> {
    let mut seen = Vec::new();
    let end = std::time::Instant::now() + WATCH;
    while std::time::Instant::now() < end {
        let iad_ro = sc.pair.sql("iad", "SELECT @@read_only").trim().to_owned();
        let pdx_ro = sc.pair.sql("pdx", "SELECT @@read_only").trim().to_owned();
        let iad_repl = sc.pair.replicates("iad");
        let pdx_repl = sc.pair.replicates("pdx");
        let line =
            format!("iad read_only={iad_ro} replicating={iad_repl}; pdx read_only={pdx_ro} replicating={pdx_repl}");
        if seen.last() != Some(&line) {
            eprintln!("attack3: {line}");
            seen.push(line);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    seen
}

const HEALTHY: &str = "iad read_only=0 replicating=false; pdx read_only=1 replicating=true";

/// Forges `status.plannedFailover` of a fresh group at `phase` (request
/// `id`, iad → pdx) and checks that nothing is decided and no site is touched.
async fn forged_phase_is_not_acted_on(prefix: &str, id: &str, phase: &str) {
    let sc = Scenario::start(prefix, 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    forge(&sc.cluster, &name, id, phase, "iad", "pdx").await;
    let seen = watch_sites(&sc).await;
    let s = sc.cluster.groups().get(&name).await.unwrap().status.unwrap();
    eprintln!(
        "attack3: status after: active={:?} gen={:?} planned={:?}",
        s.active_site, s.topology_generation, s.planned_failover
    );
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "no decision was taken");
    assert_eq!(seen, [HEALTHY], "a hand edit of status alone must not touch the sites (decided active: iad)");
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_hand_set_repointing_phase_is_not_acted_on() {
    forged_phase_is_not_acted_on("a3rep", "forged-repoint", "Repointing").await;
}

#[tokio::test]
async fn a_hand_set_promoting_phase_is_not_acted_on() {
    forged_phase_is_not_acted_on("a3pro", "forged-promote", "Promoting").await;
}

#[tokio::test]
async fn a_hand_set_draining_phase_does_not_move_the_primary_past_a_hold() {
    let ds = scenario("a3drn").await;
    let (p, cluster) = (&ds.pipeline, &ds.sc.cluster);
    let group = p.group.clone();
    let _m = p.post_until(201, "migration", "op1", "counter-app", 120).await;
    let h = p.post("failover-hold", "op1", "counter-app", 120).await;
    assert_eq!(h.status, 201, "{h:?}");
    forge(cluster, &group, "forged-drain", "Draining", "iad", "pdx").await;
    tokio::time::sleep(WATCH).await;
    let s = cluster.groups().get(&group).await.unwrap().status.unwrap();
    eprintln!(
        "attack3: status after: active={:?} gen={:?} planned={:?}",
        s.active_site, s.topology_generation, s.planned_failover
    );
    let hold = p.get().await;
    eprintln!("attack3: group as the pipeline sees it: {hold:?}");
    assert_eq!(
        (s.active_site.as_deref(), s.topology_generation),
        (Some("iad"), Some(1)),
        "a live failover-hold (ttl 120 s) defers planned disruption; a status edit must not bypass admission"
    );
    // The request must not be driven at all (it was never admitted).
    wait_status(cluster, &group, "the forged request not to complete", Duration::from_secs(1), |s| {
        match &s.planned_failover {
            Some(pf) if pf.phase == "Completed" => Err(format!("{pf:?}")),
            _ => Ok(()),
        }
    })
    .await;
    cluster.delete_group(&group).await;
}

/// A planned failover that completed, written back by hand into a running
/// phase (the spec still asks for it), is not run again: the decision
/// record holds a request in flight only until it ends, and a status that
/// names one the record does not hold ends `Failed`, the sites untouched.
/// Left in the record, a request admitted once would match again whenever
/// its source was the primary again (after an emergency failover back).
#[tokio::test]
async fn a_finished_planned_failover_written_back_into_a_running_phase_is_not_run_again() {
    let sc = Scenario::start("a3replay", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    sc.request_failover(&name, "pdx", "p1").await;
    wait_status(&sc.cluster, &name, "p1 completed", Duration::from_secs(120), |s| {
        bloodraven_e2e::fixtures::completed(s, "p1", "pdx", 2)
    })
    .await;
    bloodraven_e2e::wait::wait_for("the record to hold no request in flight", WATCH, || async {
        let record = sc.record_of(&name).await.data.unwrap_or_default();
        let ended = !record.contains_key("inFlight") && record.get("admitted").is_none_or(String::is_empty);
        if ended { Ok(()) } else { Err(format!("{record:?}")) }
    })
    .await;
    for phase in ["Draining", "Pending"] {
        forge(&sc.cluster, &name, "p1", phase, "iad", "pdx").await;
        let s = wait_status(&sc.cluster, &name, "the replay refused", Duration::from_secs(60), |s| {
            match s.planned_failover.as_ref().map(|p| (p.phase.as_str(), p.message.clone().unwrap_or_default())) {
                Some(("Failed", m)) if m.contains("has ended") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("pdx"), Some(2)), "{phase}");
    }
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "0", "the primary serves on");
    assert!(sc.pair.replicates("iad"), "{}", sc.pair.replica_status("iad"));
    sc.cluster.delete_group(&name).await;
}
