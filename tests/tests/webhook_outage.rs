//! The webhook under failure: scaled away (killed), annotated Jobs
//! and hand edits of the fence are refused while plain Jobs, Pods and the
//! operator's leader election go on; a certificate rotated under a live API
//! server fails no admission; a slow authorization is answered within the
//! API server's webhook timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlDatabase;
use bloodraven_e2e::deploy::leaf;
use bloodraven_e2e::operator::{LeaderTimings, grant_operator_rbac};
use bloodraven_e2e::webhook::{Options, Webhook, refusal};
use bloodraven_e2e::{Cluster, Operator, TestNamespace, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;

async fn setup(prefix: &str, options: Options) -> (Cluster, TestNamespace, TestNamespace, Webhook) {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    let op_ns = cluster.namespace(&format!("{prefix}-op")).await;
    grant_operator_rbac(&cluster, &op_ns.name).await;
    let webhook = Webhook::start(&cluster, &op_ns, options).await;
    webhook.register(&cluster, &webhook.params(&op_ns.name, &[&ns.name], &ns.name)).await;
    (cluster, ns, op_ns, webhook)
}

fn job(name: &str, annotated: bool) -> Job {
    let annotations = if annotated {
        json!({"bloodraven.shipstream.io/inject": "true", "bloodraven.shipstream.io/group": "g", "bloodraven.shipstream.io/instance": "i"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "annotations": annotations},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox", "command": ["true"]}]}}},
    }))
    .unwrap()
}

fn dry() -> PostParams {
    PostParams { dry_run: true, ..PostParams::default() }
}

#[tokio::test]
async fn with_the_webhook_down_annotated_jobs_and_fence_edits_fail_closed_and_nothing_else_waits() {
    let (cluster, ns, op_ns, mut webhook) = setup("whdown", Options::default()).await;
    let jobs = Api::<Job>::namespaced(cluster.client.clone(), &ns.name);
    // Up: an annotated Job for a group that does not exist is refused by the webhook itself.
    let m = refusal(jobs.create(&dry(), &job("a", true)).await);
    assert!(m.contains("no MysqlDatabase named"), "{m}");
    webhook.kill().await;

    let m = refusal(jobs.create(&dry(), &job("a", true)).await);
    assert!(m.contains("failed calling webhook") && m.contains("inject.bloodraven.shipstream.io"), "fails closed: {m}");
    let leases = Api::<Lease>::namespaced(cluster.client.clone(), &op_ns.name);
    let slot = Lease {
        metadata: ObjectMeta { name: Some("bloodraven-deploy-x-migration".into()), ..ObjectMeta::default() },
        spec: None,
    };
    let m = refusal(leases.create(&PostParams::default(), &slot).await);
    assert!(m.contains("operator-state.bloodraven.shipstream.io"), "a hand-made deploy Lease fails closed: {m}");
    // Everything else goes on.
    jobs.create(&dry(), &job("plain", false)).await.expect("an un-annotated Job never reaches the webhook");
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(cluster.client.clone(), &ns.name)
        .create(&dry(), &pod)
        .await
        .expect("a Pod never reaches it");
    let dbs = Api::<MysqlDatabase>::namespaced(cluster.client.clone(), &ns.name);
    let db: MysqlDatabase =
        serde_json::from_value(json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase",
        "metadata": {"name": "db"}, "spec": {"failoverGroupRef": {"name": "g"}, "schema": "s"}}))
        .unwrap();
    dbs.create(&PostParams::default(), &db).await.expect("a MysqlDatabase without clients never reaches it");
    // The operator's leader election: it becomes leader and keeps renewing.
    let op = Operator::start(&cluster, &op_ns, &ns.name, "op", LeaderTimings::default()).await;
    let renewed = |want: Option<String>| {
        let leases = leases.clone();
        let identity = op.identity.clone();
        async move {
            let l = leases.get("bloodraven-leader").await.map_err(|e| e.to_string())?;
            let spec = l.spec.unwrap_or_default();
            let renew = spec.renew_time.map(|t| format!("{t:?}"));
            if spec.holder_identity.as_deref() == Some(identity.as_str()) && renew.is_some() && renew != want {
                Ok(renew)
            } else {
                Err(format!("holder {:?} renew {renew:?}", spec.holder_identity))
            }
        }
    };
    let first = wait_for("the operator to lead with the webhook down", Duration::from_secs(60), || renewed(None)).await;
    wait_for("a renewal of the leader Lease", Duration::from_secs(30), || renewed(first.clone())).await;

    // Back up: admissions pass again.
    webhook.restart().await;
    let m = refusal(jobs.create(&dry(), &job("a", true)).await);
    assert!(m.contains("no MysqlDatabase named"), "answered by the webhook again: {m}");
}

#[tokio::test]
async fn a_certificate_rotated_under_a_live_api_server_fails_no_admission() {
    let (cluster, ns, _op_ns, webhook) = setup("whrotate", Options::default()).await;
    // Each create of a database with a client is reviewed (and authorized by a SubjectAccessReview).
    let dbs = Api::<MysqlDatabase>::namespaced(cluster.client.clone(), &ns.name);
    let db = |i: usize| -> MysqlDatabase {
        serde_json::from_value(json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase",
            "metadata": {"name": format!("db-{i}")},
            "spec": {"failoverGroupRef": {"name": "g"}, "schema": "s", "deploymentClients": [{"namespace": ns.name, "serviceAccount": "ci"}]}}))
        .unwrap()
    };
    let dir = webhook.tls.ca.parent().unwrap().to_path_buf();
    let before = webhook.reviews("deployment-clients", "allowed").await;
    let (mut failures, mut sent, mut rotated_at) = (Vec::new(), 0usize, None);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(12) {
        if rotated_at.is_none() && started.elapsed() > Duration::from_secs(3) {
            // A new key and certificate from the same CA, moved into place (as
            // the kubelet updates a mounted Secret: a rename).
            let next = leaf(&dir, "IP:127.0.0.1", "next");
            std::fs::rename(&next.key, &webhook.tls.key).unwrap();
            std::fs::rename(&next.cert, &webhook.tls.cert).unwrap();
            rotated_at = Some(sent);
        }
        if let Err(e) = dbs.create(&dry(), &db(sent)).await {
            failures.push(e.to_string());
        }
        sent += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {sent} admissions failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    wait_for("the webhook to log the reload", Duration::from_secs(10), || async {
        if webhook.log_text().contains("reloaded the TLS certificate") { Ok(()) } else { Err("not yet".to_owned()) }
    })
    .await;
    let answered = webhook.reviews("deployment-clients", "allowed").await - before;
    assert!(answered >= sent as u64, "every create was reviewed: {answered} of {sent}");
    println!("rotation: {sent} admissions, rotated after {}, 0 failed", rotated_at.unwrap());
}

#[tokio::test]
async fn a_slow_authorization_is_answered_within_the_api_servers_timeout() {
    let options = Options { extra: vec!["--test-authorization-delay-ms=8000".into()], ..Options::default() };
    let (cluster, ns, _op_ns, webhook) = setup("whslow", options).await;
    let dbs = Api::<MysqlDatabase>::namespaced(cluster.client.clone(), &ns.name);
    let db: MysqlDatabase = serde_json::from_value(json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase",
        "metadata": {"name": "slow"},
        "spec": {"failoverGroupRef": {"name": "g"}, "schema": "s", "deploymentClients": [{"namespace": ns.name, "serviceAccount": "ci"}]}}))
    .unwrap();
    let started = Instant::now();
    let m = refusal(dbs.create(&PostParams::default(), &db).await);
    let took = started.elapsed();
    // The registration's timeoutSeconds is 5: the webhook answers before it, with its own reason.
    assert!(m.contains("within the API server's timeout"), "{m}");
    assert!(took < Duration::from_secs(5), "answered in {took:?}");
    assert!(dbs.get_opt("slow").await.unwrap().is_none(), "nothing was stored");
    println!("slow authorization refused after {took:?}: {m}");
    drop(webhook);
}
