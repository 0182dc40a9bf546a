//! Restore-in-place on the real node and pair: a Job built from the
//! request's template runs as a Pod and asks a host agent to restore the
//! standby from a dump taken earlier with `mariadb-dump` / `mysqldump`
//! (replication reset, the dump replayed), as a user's backup tool would.
//! Then the operator checks the restored site, fences the old primary,
//! decides + 1 (the deploy lease held is revoked with `TopologyChanged`),
//! promotes the restored site and moves `<db>-primary`: a client reads the
//! restored data through it. The old primary stays fenced, out of
//! replication and never promoted (`RecloneRequired`) until a person
//! re-clones it and marks it done.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::{scenario, token_of};
use bloodraven_e2e::fixtures::{condition, is_active_at, wait_events, wait_status};
use bloodraven_e2e::hostagent::{HostAgent, job_script, jobs_namespace};
use bloodraven_e2e::pods::{image, node_address};
use bloodraven_e2e::wait::wait_for;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);

fn at_phase(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    match &s.restore_in_place {
        Some(r) if r.request_id == id && r.phase == phase => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// The host agent restores pdx from the dump, as a backup tool would:
/// replication reset, the dump replayed.
/// The restore leaves the server writable, as a restore whose server comes
/// up without `read_only` in its configuration does, and the Job is not
/// over yet: a restoring site is never fenced (its sessions are the
/// restore's), so it stays writable through two probe rounds.
async fn serve_restore(agent: &mut HostAgent, pair: &bloodraven_e2e::SitePair, dump: &std::path::Path) {
    let req = agent.next(T).await;
    assert_eq!((req.action.as_str(), req.site.as_str()), ("restore", "pdx"));
    tokio::task::block_in_place(|| {
        pair.sql("pdx", &format!("{}; DROP DATABASE shop", pair.flavor.stand_alone()));
        pair.load("pdx", dump);
        pair.sql("pdx", "SET GLOBAL read_only = 0");
    });
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(pair.sql("pdx", "SELECT @@read_only").trim(), "0", "the restoring site was fenced");
    req.reply.send(Ok(())).unwrap();
}

/// The port `<db>-primary` sends clients to, once it points at `site`.
async fn primary_port(cluster: &bloodraven_e2e::Cluster, namespace: &str, database: &str, site: &str) -> u16 {
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(cluster.client.clone(), namespace);
    let name = format!("{database}-primary");
    let svc = wait_for("the -primary Service to point at the site", T, || async {
        let svc = services.get(&name).await.map_err(|e| e.to_string())?;
        let at =
            svc.metadata.annotations.clone().unwrap_or_default().get("bloodraven.shipstream.io/active-site").cloned();
        if at.as_deref() == Some(site) { Ok(svc) } else { Err(format!("{at:?}")) }
    })
    .await;
    let port = svc.spec.unwrap().ports.unwrap()[0].target_port.clone();
    port.and_then(|p| match p {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => u16::try_from(p).ok(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => None,
    })
    .unwrap()
}

/// A client reads the restored rows through counter-app-primary, which
/// points at the restored, writable pdx.
async fn clients_read_the_backup(cluster: &bloodraven_e2e::Cluster, namespace: &str, pair: &bloodraven_e2e::SitePair) {
    let target = primary_port(cluster, namespace, "counter-app", "pdx").await;
    assert_eq!(target, pair.port("pdx"), "the Service sends clients to the restored site");
    let mut client = mysql_async::Conn::new(bloodraven_e2e::writer::app_account(target)).await.unwrap();
    let rows: Vec<(i32, String)> =
        mysql_async::prelude::Queryable::query(&mut client, "SELECT id, note FROM shop.orders ORDER BY id")
            .await
            .unwrap();
    assert_eq!(rows, [(1, "in the backup".to_owned()), (2, "in the backup".to_owned())], "a client reads the backup");
    client.disconnect().await.unwrap();
    assert_eq!(pair.sql("pdx", "SELECT GROUP_CONCAT(id ORDER BY id) FROM shop.orders").trim(), "1,2");
    assert_eq!(pair.sql("pdx", "SELECT @@read_only").trim(), "0");
}

/// Another tenant's copy of a `-primary` Service of `group`, in a namespace
/// of its own, which never follows the decision: a restore does not wait
/// for it.
async fn forge_primary_service(cluster: &bloodraven_e2e::Cluster, group: &str) -> bloodraven_e2e::TestNamespace {
    let tenant = cluster.namespace("restore-tenant").await;
    let forged: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "counter-app-primary", "labels": {"bloodraven.shipstream.io/primary-of": "counter-app"},
            "annotations": {"bloodraven.shipstream.io/group": group, "bloodraven.shipstream.io/active-site": "iad"}},
        "spec": {"ports": [{"port": 3306}]},
    }))
    .unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(cluster.client.clone(), &tenant.name);
    api.create(&kube::api::PostParams::default(), &forged).await.unwrap();
    tenant
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_in_place_promotes_the_restored_standby_and_keeps_the_old_primary_for_a_reclone() {
    let ds = scenario("restore").await;
    let (cluster, group, pipeline, pair) = (&ds.sc.cluster, ds.pipeline.group.clone(), &ds.pipeline, &ds.sc.pair);
    let jobs = jobs_namespace(cluster, "restore-jobs").await;
    let mut agent = HostAgent::start(&node_address()).await;

    // The backup: taken earlier, with the user's own tool. The application
    // account reads it (writer::prepare makes the account).
    bloodraven_e2e::writer::prepare(pair, "iad");
    pair.sql(
        "iad",
        &format!(
            "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(40)); \
             INSERT INTO shop.orders VALUES (1, 'in the backup'), (2, 'in the backup'); \
             GRANT SELECT ON shop.* TO '{}'@'127.0.0.1'",
            bloodraven_e2e::writer::APP_USER
        ),
    );
    let dump = pair.dir().join("shop.sql");
    pair.dump("iad", &dump, &["shop"]);
    // Written after the backup: the restore goes back to before it.
    pair.sql("iad", "INSERT INTO shop.orders VALUES (3, 'after the backup')");
    wait_for("pdx to replicate the rows", T, || async {
        let n = pair.try_sql("pdx", "SELECT COUNT(*) FROM shop.orders")?;
        if n.trim() == "3" { Ok(()) } else { Err(n) }
    })
    .await;
    let lease = pipeline.post_until(201, "migration", "op1", "counter-app", 300).await;

    let template = json!({"spec": {"template": {"spec": {"containers": [{
        "name": "restore", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", job_script(&agent.address, "restore")],
    }]}}}});
    // A mark guessed before the request (the generation it will decide)
    // is dropped when the request gets there: it releases nothing.
    let early = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/reclone-done": "iad@2"}}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&early)).await.unwrap();
    let _tenant = forge_primary_service(cluster, &group).await;
    let patch =
        json!({"spec": {"restoreInPlace": {"requestId": "r1", "namespace": jobs.name, "jobTemplate": template}}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let s = wait_status(cluster, &group, "r1 restoring pdx", T, |s| at_phase(s, "r1", "Restoring")).await;
    assert_eq!(s.restore_in_place.as_ref().unwrap().site.as_deref(), Some("pdx"), "default: the standby");
    // Nothing is fenced while the Job restores: the primary serves on.
    assert_eq!(pair.sql("iad", "SELECT @@read_only").trim(), "0");
    let view = pipeline.get().await;
    let ops = view.body["operations"].as_array().cloned().unwrap_or_default();
    assert!(ops.iter().any(|o| o["type"] == "RestoreInPlace" && o["phase"] == "Restoring"), "{ops:?}");

    serve_restore(&mut agent, pair, &dump).await;

    let s = wait_status(cluster, &group, "r1 awaiting the re-clone, pdx active at generation 2", T, |s| {
        at_phase(s, "r1", "AwaitingReclone")?;
        is_active_at(s, "pdx", 2)
    })
    .await;
    let restore = s.restore_in_place.clone().unwrap();
    assert_eq!(restore.reclone_site.as_deref(), Some("iad"));
    let g = cluster.groups().get(&group).await.unwrap();
    assert!(
        !g.metadata.annotations.unwrap_or_default().contains_key("bloodraven.shipstream.io/reclone-done"),
        "the early mark was dropped"
    );
    let phases: Vec<&str> = restore.history.iter().map(|h| h.phase.as_str()).collect();
    assert_eq!(
        phases,
        ["Pending", "Admitting", "Restoring", "Verifying", "Fencing", "Promoting", "Repointing", "AwaitingReclone"]
    );
    assert_eq!(restore.job.as_ref().map(|j| j.result.as_str()), Some("Complete"));
    // The conditions are the observer's, written after the phase.
    wait_status(cluster, &group, "RecloneRequired naming iad", T, |s| match condition(s, "RecloneRequired") {
        Some(c) if c.status == "True" && c.message.contains("iad") => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    // Waiting for the re-clone, the group has no standby: it says why.
    wait_status(cluster, &group, "unstable for the re-clone while it waits", T, |s| {
        match (s.stable, s.unstable_reason.as_deref()) {
            (Some(false), Some("RecloneRequired")) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // The lease held across the decision is revoked with TopologyChanged.
    let revoked = pipeline.put("migration", "op1", &token_of(&lease)).await;
    assert_eq!((revoked.status, revoked.body["reason"].as_str()), (409, Some("TopologyChanged")), "{revoked:?}");

    clients_read_the_backup(&ds.sc.cluster, &ds.sc.ns.name, pair).await;

    // The old primary: fenced, out of replication, and not repointed,
    // whatever is written into status.
    status_written_by_hand_is_put_back(cluster, &group, pair).await;

    // A mark for another generation releases nothing, nor does the right
    // one before the old primary shows the re-clone.
    let mark = |value: &str| json!({"metadata": {"annotations": {"bloodraven.shipstream.io/reclone-done": value}}});
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(mark("iad@7"))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    at_phase(&cluster.groups().get(&group).await.unwrap().status.unwrap(), "r1", "AwaitingReclone").unwrap();
    cluster.groups().patch(&group, &PatchParams::default(), &Patch::Merge(mark("iad@2"))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    at_phase(&cluster.groups().get(&group).await.unwrap().status.unwrap(), "r1", "AwaitingReclone").unwrap();
    // The re-clone, as docs/failover.md tells a person: the new primary's
    // data, the old primary's own GTID history dropped, replication from
    // the new primary.
    tokio::task::block_in_place(|| pair.reclone("iad", "pdx", &["shop", "bench"]));
    // The request's end is written first, the conditions by the round's observation after it.
    let s = wait_status(cluster, &group, "r1 completed, RecloneRequired False", T, |s| {
        at_phase(s, "r1", "Completed")?;
        match condition(s, "RecloneRequired") {
            Some(c) if c.status == "False" => Ok(()),
            other => Err(format!("RecloneRequired: {other:?}")),
        }
    })
    .await;
    assert!(s.restore_in_place.as_ref().unwrap().reclone_done_time.is_some());
    let g = cluster.groups().get(&group).await.unwrap();
    assert!(
        !g.metadata.annotations.unwrap_or_default().contains_key("bloodraven.shipstream.io/reclone-done"),
        "the mark is removed once taken"
    );
    wait_events(cluster, &group, "RestoreInPlaceCompleted", &[&["restore-in-place r1"]]).await;
    // The record holds nothing more once the re-clone is taken.
    assert_record_holds_nothing(cluster, &ds.sc.ns.name, &group).await;
}

/// The old primary awaiting its re-clone stays fenced and out of
/// replication; status written by hand (no webhook guards it here, as on a cluster
/// installed without one, or restored from a backup): a final phase, then
/// no request at all. The decision record still awaits the re-clone:
/// status is put back, and the old primary stays out of replication.
async fn status_written_by_hand_is_put_back(
    cluster: &bloodraven_e2e::Cluster,
    group: &str,
    pair: &bloodraven_e2e::SitePair,
) {
    assert_eq!(pair.sql("iad", "SELECT @@read_only").trim(), "1");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!pair.replicates("iad"), "the old primary was put back into replication: {}", pair.replica_status("iad"));
    let s = cluster.groups().get(group).await.unwrap().status.unwrap();
    at_phase(&s, "r1", "AwaitingReclone").unwrap();
    for (forged, shown) in [
        (json!({"status": {"restoreInPlace": {"phase": "Completed"}}}), "phase Completed"),
        (json!({"status": {"restoreInPlace": null}}), "no restore-in-place"),
    ] {
        cluster.groups().patch_status(group, &PatchParams::default(), &Patch::Merge(&forged)).await.unwrap();
        let s = wait_status(cluster, group, "r1 awaiting the re-clone again", T, |s| {
            at_phase(s, "r1", "AwaitingReclone")?;
            match condition(s, "RecloneRequired") {
                Some(c) if c.status == "True" => Ok(()),
                other => Err(format!("RecloneRequired: {other:?}")),
            }
        })
        .await;
        let restored = s.restore_in_place.unwrap();
        assert_eq!(
            (restored.site.as_deref(), restored.source_site.as_deref(), restored.reclone_site.as_deref()),
            (Some("pdx"), Some("iad"), Some("iad"))
        );
        wait_events(cluster, group, "StatusRestored", &[&[shown, "re-clone of iad"]]).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!pair.replicates("iad"), "repointed after {shown}: {}", pair.replica_status("iad"));
        assert_eq!(pair.sql("iad", "SELECT @@read_only").trim(), "1");
    }
}

/// The decision record of `group` (in the operator's namespace) is at
/// generation 2 and holds no site and no request in flight.
async fn assert_record_holds_nothing(cluster: &bloodraven_e2e::Cluster, namespace: &str, group: &str) {
    bloodraven_e2e::wait::wait_for("the record to hold nothing", T, || async {
        let record = bloodraven_e2e::fixtures::decision_record(cluster, namespace, group).await;
        let data = record.and_then(|r| r.data).unwrap_or_default();
        let nothing = data.get("topologyGeneration").map(String::as_str) == Some("2")
            && !data.contains_key("siteHold")
            && !data.contains_key("inFlight")
            && data.get("admitted").is_none_or(String::is_empty);
        if nothing { Ok(()) } else { Err(format!("{data:?}")) }
    })
    .await;
}
