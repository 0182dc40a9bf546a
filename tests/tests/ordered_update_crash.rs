//! The ordered update is crash-safe: the leader is killed in every phase
//! of an update (a failpoint aborts the real binary there, as SIGKILL
//! would), and the next leader finishes it from the decision record,
//! status, the Jobs and the sites: each site's Job runs once, and the
//! generation moves by exactly one per update (two with a switch-back,
//! killed in each of its phases too). The Jobs ask a host agent,
//! which answers at once (the update itself is `ordered_update.rs`'s).

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

/// A point in every phase of an update (and between a Job's creation and
/// its record, and a switchover's steps), and whether that update switches
/// back at its end.
const POINTS: [(&str, bool); 15] = [
    ("ordered-update-entered-Admitting", false),
    ("ordered-update-entered-UpdatingStandby", false),
    ("ordered-update-after-job", false),
    ("ordered-update-entered-VerifyingStandby", false),
    ("ordered-update-entered-SwitchoverDraining", false),
    ("ordered-update-after-fence", false),
    ("decide-after-record", false),
    ("ordered-update-after-decide", false),
    ("ordered-update-entered-SwitchoverPromoting", false),
    ("ordered-update-entered-SwitchoverRepointing", false),
    ("ordered-update-entered-UpdatingFormerPrimary", false),
    ("ordered-update-entered-VerifyingFormerPrimary", false),
    ("ordered-update-entered-SwitchBackDraining", true),
    ("ordered-update-entered-SwitchBackPromoting", true),
    ("ordered-update-entered-SwitchBackRepointing", true),
];

fn completed(s: &MysqlFailoverGroupStatus, id: &str, site: &str, generation: i64) -> Result<(), String> {
    match &s.ordered_update {
        Some(p) if p.request_id == id && p.phase == "Completed" => is_ready_at(s, site, generation),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_in_every_phase_of_an_update_is_finished_by_the_next_one() {
    let sc = Scenario::start("updcrash", 0, QUICK).await;
    let mut op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, "first", QUICK).await;
    let name = sc.bootstrapped_group("g").await;
    let jobs = jobs_namespace(&sc.cluster, "updcrash-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;
    let template = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "update", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", job_script(&agent.address, "update")],
    }]}}}});
    // Every Job's request, by (request, site): each must come once.
    let asked: Arc<Mutex<BTreeMap<(String, String), u32>>> = Arc::default();
    let server = {
        let asked = asked.clone();
        tokio::spawn(async move {
            while let Some(req) = agent.requests.recv().await {
                *asked.lock().unwrap().entry((req.request.clone(), req.site.clone())).or_default() += 1;
                let _ = req.reply.send(Ok(()));
            }
        })
    };

    let mut generation = 1;
    let mut primary = "iad";
    for (i, (point, switch_back)) in POINTS.iter().enumerate() {
        let id = format!("k{i}");
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
        let patch = json!({"spec": {"orderedUpdate": {"requestId": id, "switchBack": switch_back, "activeDeadlineSeconds": 120, "namespace": jobs.name, "jobTemplate": template}}});
        sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let status = op
            .wait_exit(T)
            .await
            .unwrap_or_else(|| panic!("{point}: the leader did not reach its failpoint:\n{}", op.log_tail()));
        assert!(!status.success(), "{point}: {status:?}");
        op = Operator::start(&sc.cluster, &sc.ns, &sc.ns.name, &format!("next{i}"), QUICK).await;
        if *switch_back {
            generation += 2;
        } else {
            generation += 1;
            primary = if primary == "iad" { "pdx" } else { "iad" };
        }
        wait_status(
            &sc.cluster,
            &name,
            &format!("{id} ({point}) completed at {primary}, generation {generation}"),
            T,
            |s| completed(s, &id, primary, generation),
        )
        .await;
        let asked = asked.lock().unwrap().clone();
        for site in ["iad", "pdx"] {
            assert_eq!(
                asked.get(&(id.clone(), site.to_owned())),
                Some(&1),
                "{point}: the Job of {site} ran once: {asked:?}"
            );
        }
        eprintln!("{point}: finished by the next leader at generation {generation}");
    }
    server.abort();
    sc.cluster.delete_group(&name).await;
}
