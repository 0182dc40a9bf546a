//! Tolerant reading: objects that the CRD schema accepted
//! once but the operator's types cannot decode — what a CRD downgrade leaves
//! behind — are reported on themselves and skipped; every other object keeps
//! working, and no log line holds an object or a list.
//!
//! The test loosens the installed CRDs for a moment (drops the `maximum` of
//! `spec.sites[].port`, and the `required` of a MysqlDatabase's spec),
//! creates a group with port 70000 and a MysqlDatabase without `schema`,
//! and restores the CRDs at once; only then does it start the operator.
//! The restore runs whatever happens; the bad objects are deleted at the
//! end, pass or fail, so other tests' operators (which watch every
//! MysqlDatabase) do not go on seeing them.
//!
//! Runs alone: loosening does more than widen what is accepted. Under a
//! schema-less spec, `deploymentClients` is no longer a list keyed by
//! `namespace`, so a server-side apply by another test in that window
//! conflicts with the creator's ownership of the whole list.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlDatabase;
use bloodraven_e2e::deploy::{self, call};
use bloodraven_e2e::fixtures::{SITE_SECRET, Scenario, group_events, is_ready_at, wait_status};
use bloodraven_e2e::operator::{E2E_LABEL, LeaderTimings};
use bloodraven_e2e::{Cluster, wait_for};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use reqwest::Method;
use serde_json::json;

const T: Duration = Duration::from_secs(60);
/// The longest operator log line accepted: the bad objects' errors must
/// reach the log bounded, never as an object or list body (~11 KB before).
const MAX_LOG_LINE: usize = 2048;

fn group_resource() -> ApiResource {
    ApiResource::erase::<bloodraven_api::v1alpha1::MysqlFailoverGroup>(&())
}

fn database_resource() -> ApiResource {
    ApiResource::erase::<bloodraven_api::v1alpha1::MysqlDatabase>(&())
}

/// JSON patches that loosen the installed CRDs: `(crd, patch)`.
fn loosenings() -> [(&'static str, serde_json::Value); 2] {
    [
        (
            "mysqlfailovergroups.bloodraven.shipstream.io",
            json!([{"op": "remove", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/sites/items/properties/port/maximum"}]),
        ),
        (
            "mysqldatabases.bloodraven.shipstream.io",
            // Any spec at all: what a downgrade to a schema-less version leaves.
            json!([{"op": "replace", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec", "value": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}]),
        ),
    ]
}

/// Runs `attempt` while the CRDs are loosened, and restores them after,
/// whatever it gave. Holds the run's CRD lock
/// ([`bloodraven_e2e::cluster::crd_lock`]) throughout, so no other test's
/// `Cluster::connect` restores them in between; and tries `attempt` again
/// until it succeeds or 60 s pass, because the API server takes a loosened
/// schema in a moment after it is stored (a CI run under load saw every
/// immediate create refused by the old schema, 20 times in a row).
/// Returns the last error when it never succeeded.
async fn while_loosened<F, Fut>(cluster: &Cluster, mut attempt: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let _held = bloodraven_e2e::cluster::crd_lock(true);
    for (name, patch) in loosenings() {
        // Fails when already loose (the path is gone): that is fine.
        let _ =
            crds.patch(name, &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(patch).unwrap())).await;
    }
    let started = std::time::Instant::now();
    let outcome = loop {
        match attempt().await {
            Ok(()) => break Ok(()),
            Err(e) if started.elapsed() > Duration::from_secs(60) => break Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    cluster.install_crds().await;
    outcome
}

/// Creates `objects` (each with its API) while the CRDs are loosened
/// ([`while_loosened`]). Each attempt creates them all: one created by an
/// earlier attempt answers `409 AlreadyExists`, which counts as created.
async fn create_while_loosened(cluster: &Cluster, objects: &[(Api<DynamicObject>, DynamicObject)]) {
    let outcome = while_loosened(cluster, || async {
        let mut last = Ok(());
        for (api, obj) in objects {
            match api.create(&PostParams::default(), obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => last = Err(e.to_string()),
            }
        }
        last
    })
    .await;
    if let Err(last) = outcome {
        panic!("could not create the objects under the loosened CRDs; last error: {last}");
    }
}

/// An object's status alone: serde skips the rest of the body without
/// parsing it, however deeply it nests.
#[derive(serde::Deserialize)]
struct StatusOnly {
    #[serde(default)]
    status: serde_json::Value,
}

/// Merge-patches `name` while the CRDs are loosened ([`while_loosened`]).
async fn patch_while_loosened(cluster: &Cluster, api: &Api<DynamicObject>, name: &str, patch: serde_json::Value) {
    let outcome = while_loosened(cluster, || async {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop).map_err(|e| e.to_string())
    })
    .await;
    if let Err(last) = outcome {
        panic!("could not patch {name} under the loosened CRDs; last error: {last}");
    }
}

/// The `Ready` condition of a stored object read as JSON (a typed read of a
/// bad object fails, which is the point).
async fn ready_condition(api: &Api<DynamicObject>, name: &str) -> Result<serde_json::Value, String> {
    let obj = api.get(name).await.map_err(|e| e.to_string())?;
    obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .ok_or_else(|| format!("no Ready condition; status: {}", obj.data["status"]))
}

/// Waits for `Ready=False`, reason `InvalidObject`, whose message contains `field`.
async fn wait_invalid(api: &Api<DynamicObject>, name: &str, field: &str) -> serde_json::Value {
    wait_for(&format!("condition InvalidObject on {name}"), T, || async {
        let c = ready_condition(api, name).await?;
        let message = c["message"].as_str().unwrap_or_default();
        if c["status"] == "False" && c["reason"] == "InvalidObject" && message.contains(field) {
            Ok(c)
        } else {
            Err(format!("Ready: {c}"))
        }
    })
    .await
}

fn invalid_object_events(events: &[Event]) -> Vec<&Event> {
    events.iter().filter(|e| e.reason.as_deref() == Some("InvalidObject")).collect()
}

async fn namespaced_events(cluster: &Cluster, namespace: &str, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(cluster.client.clone(), namespace);
    let lp = ListParams::default().fields(&format!("regarding.name={name}"));
    api.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

#[tokio::test]
async fn objects_that_do_not_decode_are_reported_and_the_others_keep_working() {
    let sc = Scenario::start("tolerant", 0, LeaderTimings::default()).await;
    let cluster = sc.cluster.clone();
    let ns = sc.ns.name.clone();
    let bad_group = format!("{ns}-bad");
    // Run the body as a task so that the cleanup below runs even when it
    // fails (a `Drop` cannot wait for the API server).
    let outcome = tokio::spawn(scenario(sc, bad_group.clone())).await;
    let groups: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &group_resource());
    let _ = groups.delete(&bad_group, &DeleteParams::default()).await;
    let databases: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), &ns, &database_resource());
    let _ = databases.delete("broken", &DeleteParams::default()).await;
    let _ = databases.delete("deep", &DeleteParams::default()).await;
    if let Err(err) = outcome {
        std::panic::resume_unwind(err.into_panic());
    }
}

#[allow(clippy::too_many_lines)] // one scenario, read top to bottom
async fn scenario(sc: Scenario, bad_group: String) {
    let cluster = &sc.cluster;
    let ns = sc.ns.name.clone();
    let groups: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &group_resource());
    let databases: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), &ns, &database_resource());

    // What the operator finds at its (re)start: a good group with a database,
    // and, left behind by a looser schema, a group with port 70000 and a
    // database without `schema` that names a would-be intruder.
    let good = sc.group("good", "iad").await;
    deploy::service_account(cluster, &ns, "deployer").await;
    deploy::service_account(cluster, &ns, "intruder").await;
    deploy::database(cluster, &ns, "counter-app", &good, &[(&ns, "deployer")]).await;
    deploy::database(cluster, &ns, "bad-group-app", &bad_group, &[(&ns, "deployer")]).await;
    let mut sites = serde_json::to_value(sc.pair.sites(&ns, SITE_SECRET)).unwrap();
    let fixed_sites = sites.clone();
    sites[0]["port"] = json!(70000);
    let bad_group_obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1",
        "kind": "MysqlFailoverGroup",
        "metadata": {"name": bad_group, "labels": {E2E_LABEL: ns}},
        "spec": {
            "sites": sites, "initialActiveSite": "iad", "failover": {"probeIntervalSeconds": 1},
            "allowedDatabases": bloodraven_e2e::fixtures::allow_namespaces(&[&ns]),
        },
    }))
    .unwrap();
    let bad_db_obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1",
        "kind": "MysqlDatabase",
        "metadata": {"name": "broken", "namespace": ns},
        "spec": {"failoverGroupRef": {"name": good}, "deploymentClients": [{"namespace": ns, "serviceAccount": "intruder"}]},
    }))
    .unwrap();
    // Second attack's input: a value nested deeper than serde_json's limit
    // (128), which used to fail the list of every MysqlDatabase.
    let deep = (0..200).fold(json!(1), |inner, _| json!([inner]));
    let deep_db_obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1",
        "kind": "MysqlDatabase",
        "metadata": {"name": "deep", "namespace": ns},
        // In a field the strict schema knows (an unknown one would be pruned
        // on every read once the CRD is restored), with a type it refuses: so
        // it is stored only once the loosened schema is in force.
        "spec": {"failoverGroupRef": {"name": good}, "schema": deep},
    }))
    .unwrap();
    create_while_loosened(
        cluster,
        &[(groups.clone(), bad_group_obj.clone()), (databases.clone(), bad_db_obj), (databases.clone(), deep_db_obj)],
    )
    .await;
    // The schema is strict again: what is stored is now out of schema.
    let mut probe = bad_group_obj.clone();
    probe.metadata.name = Some(format!("{bad_group}-probe"));
    wait_for("the restored CRD to refuse port 70000", T, || async {
        match groups.create(&PostParams { dry_run: true, ..PostParams::default() }, &probe).await {
            Err(kube::Error::Api(s)) if s.code == 422 => Ok(()),
            other => Err(format!("{:?}", other.map(|o| o.metadata.name))),
        }
    })
    .await;

    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    // start_operator returns once the deploy API accepts connections.
    let (op, base) = deploy::start_operator(cluster, &sc.ns, "op", &tls, LeaderTimings::default()).await;
    wait_for("/readyz to answer 200", T, || async {
        match op.plain_status("/readyz").await? {
            200 => Ok(()),
            s => Err(format!("{s}")),
        }
    })
    .await;

    // The good group bootstraps and keeps being probed.
    wait_status(cluster, &good, "the good group to bootstrap to generation 1", T, |s| is_ready_at(s, "iad", 1)).await;
    // (Read from the operator's probe gauge: an unchanged status is not rewritten.)
    let first = op.wait_probed_after(&good, 0.0, T).await;
    op.wait_probed_after(&good, first + 1.5, T).await;

    // The deploy API serves the good group to its client.
    let http = deploy::client(&tls.ca);
    let token = deploy::token(cluster, &ns, "deployer", &["bloodraven-deploy"]).await;
    let url = |group: &str| format!("{base}/groups/{group}");
    let g = wait_for("GET of the good group", T, || async {
        let r = call(&http, Method::GET, &url(&good), &token, None).await;
        if r.status == 200 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!((g.body["activeSite"].as_str(), g.body["topologyGeneration"].as_i64()), (Some("iad"), Some(1)), "{g:?}");

    // The bad group: a condition and one Event naming the field.
    let field = "spec.sites[0].port";
    let c = wait_invalid(&groups, &bad_group, field).await;
    let message = c["message"].as_str().unwrap();
    assert!(message.contains("70000") && message.len() < 1024, "{message}");
    let bad_status = groups.get(&bad_group).await.unwrap().data["status"].clone();
    assert_eq!(
        (bad_status["stable"].as_bool(), bad_status["unstableReason"].as_str()),
        (Some(false), Some("InvalidObject"))
    );
    let note = wait_for("an InvalidObject Event on the bad group", T, || async {
        let events = group_events(cluster, &bad_group).await;
        invalid_object_events(&events)
            .first()
            .and_then(|e| e.note.clone())
            .ok_or_else(|| format!("{} events", events.len()))
    })
    .await;
    assert!(note.contains(field), "{note}");

    // ... and the deploy API answers it as a group it cannot serve.
    let r = call(&http, Method::GET, &url(&bad_group), &token, None).await;
    assert_eq!((r.status, r.body["error"].as_str()), (404, Some("group_not_found")), "{r:?}");
    let body = json!({"kind": "migration", "operationId": "op-1", "instance": "bad-group-app", "ttlSeconds": 30});
    let r = call(&http, Method::POST, &format!("{}/leases", url(&bad_group)), &token, Some(body)).await;
    assert_eq!(r.status, 404, "{r:?}");

    // A database of the bad group says the group cannot be read.
    let typed: Api<MysqlDatabase> = Api::namespaced(cluster.client.clone(), &ns);
    let app_ready = |reason: &'static str| {
        let typed = typed.clone();
        async move {
            wait_for(&format!("bad-group-app Ready reason {reason}"), T, || async {
                let db = typed.get("bad-group-app").await.map_err(|e| e.to_string())?;
                let conditions = db.status.unwrap_or_default().conditions;
                match conditions.iter().find(|c| c.type_ == "Ready") {
                    Some(c) if c.reason == reason => Ok(c.clone()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await
        }
    };
    let c = app_ready("GroupInvalid").await;
    assert!(c.status == "False" && c.message.contains(field), "{c:?}");

    // The deeply nested database: reported on itself, condition and Event,
    // and nothing else stopped (the good group was served above). This
    // test's own client cannot read it as an object either: its status is
    // read with the rest of the body skipped.
    wait_for("an InvalidObject Event on the deep database", T, || async {
        let events = namespaced_events(cluster, &ns, "deep").await;
        let notes: Vec<String> = invalid_object_events(&events).iter().filter_map(|e| e.note.clone()).collect();
        if notes.iter().any(|n| n.contains("does not parse") && n.len() < 1024) {
            Ok(())
        } else {
            Err(format!("{notes:?}"))
        }
    })
    .await;
    wait_for("condition InvalidObject on the deep database", T, || async {
        let req = kube::core::Request::new(<DynamicObject as kube::Resource>::url_path(
            &database_resource(),
            Some(ns.as_str()),
        ))
        .get("deep", &kube::api::GetParams::default())
        .map_err(|e| e.to_string())?;
        let text = cluster.client.request_text(req).await.map_err(|e| e.to_string())?;
        let status = serde_json::from_str::<StatusOnly>(&text).map_err(|e| e.to_string())?.status;
        let ready = status["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == "Ready")).cloned();
        match ready {
            Some(c)
                if c["reason"] == "InvalidObject"
                    && c["message"].as_str().unwrap_or_default().contains("does not parse") =>
            {
                Ok(())
            }
            other => Err(format!("Ready: {other:?}")),
        }
    })
    .await;

    // The bad database: a condition naming the field, and no authority for
    // the client it lists.
    let c = wait_invalid(&databases, "broken", "spec: missing field `schema`").await;
    assert!(c["message"].as_str().unwrap().len() < 1024, "{c}");
    wait_for("an InvalidObject Event on the bad database", T, || async {
        let events = namespaced_events(cluster, &ns, "broken").await;
        let notes: Vec<String> = invalid_object_events(&events).iter().filter_map(|e| e.note.clone()).collect();
        if notes.iter().any(|n| n.contains("missing field `schema`")) { Ok(()) } else { Err(format!("{notes:?}")) }
    })
    .await;
    let intruder = deploy::token(cluster, &ns, "intruder", &["bloodraven-deploy"]).await;
    assert_eq!(call(&http, Method::GET, &url(&good), &intruder, None).await.status, 403);
    let body = json!({"kind": "migration", "operationId": "op-2", "instance": "broken", "ttlSeconds": 30});
    let r = call(&http, Method::POST, &format!("{}/leases", url(&good)), &intruder, Some(body)).await;
    assert_eq!(r.status, 403, "{r:?}");

    // Metrics count them; log lines stay short.
    let metrics = op.metrics().await.unwrap();
    assert!(metrics.contains("bloodraven_undecodable_objects{kind=\"MysqlFailoverGroup\"} 1"), "{metrics}");
    assert!(!metrics.contains("bloodraven_decode_errors_total{kind=\"MysqlDatabase\"} 0"), "{metrics}");

    // One Event for the bad group, not one per watch event or per second.
    let events = group_events(cluster, &bad_group).await;
    let invalid = invalid_object_events(&events);
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert!(invalid[0].series.is_none(), "the Event was published again: {:?}", invalid[0].series);

    // Fixed, the group is served like any other: bootstrapped, and the
    // fields written for the decode error are gone.
    let patch = json!({"spec": {"sites": fixed_sites}});
    groups.patch(&bad_group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let s = wait_status(cluster, &bad_group, "the fixed group to bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
    assert_eq!(s.unstable_reason, None);
    assert_eq!(app_ready("GroupFound").await.status, "True");

    // A group that decoded (so it holds the operator's finalizer) and then
    // stopped decoding is deleted: the operator still finishes the deletion
    // (second attack: it used to stay Terminating).
    let g = groups.get(&bad_group).await.unwrap();
    assert!(g.metadata.finalizers.unwrap_or_default().iter().any(|f| f == "bloodraven.shipstream.io/cleanup"));
    let mut broken_sites = fixed_sites.clone();
    broken_sites[0]["port"] = json!(70000);
    patch_while_loosened(cluster, &groups, &bad_group, json!({"spec": {"sites": broken_sites}})).await;
    wait_invalid(&groups, &bad_group, "port").await;
    groups.delete(&bad_group, &DeleteParams::default()).await.unwrap();
    wait_for("the unreadable group's deletion to finish", Duration::from_secs(90), || async {
        match groups.get_opt(&bad_group).await {
            Ok(None) => Ok(()),
            other => Err(format!("still there: {:?}", other.map(|o| o.map(|o| o.metadata.deletion_timestamp)))),
        }
    })
    .await;

    let log = std::fs::read_to_string(&op.log).unwrap();
    assert!(log.contains("stored object does not decode"), "{}", op.log_tail());
    let longest = log.lines().map(str::len).max().unwrap_or_default();
    assert!(
        longest <= MAX_LOG_LINE,
        "a log line of {longest} bytes: {}",
        log.lines().find(|l| l.len() == longest).unwrap_or_default().chars().take(300).collect::<String>()
    );
}
