//! Push revocation: a client watching its lease hears that the
//! lease was revoked — by the revoke annotation, or by a planned failover's
//! decision — as soon as the operator writes the revocation, at any TTL;
//! and a watch is authenticated, authorized and bounded like a renewal.
//!
//! Latency is measured against the revocation write as the API server
//! reports it: a Kubernetes watch on the operator's namespace sees the
//! tombstone Lease appear, and the deploy-API watch must answer within a
//! second of that (it is told in-process when the write returns, so it is
//! usually first). The figures are printed; sub-second percentiles over
//! many revocations belong to the sidecar's benchmark.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test: a failed step fails the test

use std::time::{Duration, Instant};

use bloodraven_api::names::deploy_lease::{ROLE_LABEL, ROLE_TOMBSTONE};
use bloodraven_e2e::deploy::{self, DeployScenario, Pipeline, Reply, token_of};
use bloodraven_e2e::wait::wait_for;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

/// The longest wait a test watch asks for: under the test client's 20 s
/// request timeout. A watch whose wait runs out is asked again, as a client does.
const WAIT: u32 = 15;

/// Watches the lease until the answer is not `200` (the wait ran out);
/// returns that answer and when it arrived.
async fn watch_until_lost(p: &Pipeline, kind: &str, op: &str, lease_token: &str) -> (Reply, Instant) {
    loop {
        let r = p.watch(kind, op, lease_token, WAIT).await;
        if r.status != 200 {
            return (r, Instant::now());
        }
    }
}

/// Resolves with the moment the first tombstone Lease appears in the
/// operator's namespace (`ns`), as a Kubernetes watch sees it; returns once
/// that watch has listed, so nothing written after it is missed.
async fn first_tombstone(s: &DeployScenario) -> tokio::task::JoinHandle<Instant> {
    let leases: Api<Lease> = Api::namespaced(s.sc.cluster.client.clone(), &s.sc.ns.name);
    let config = watcher::Config::default().labels(&format!("{ROLE_LABEL}={ROLE_TOMBSTONE}"));
    let mut events = watcher(leases, config).boxed();
    loop {
        match events.next().await.expect("the Lease watch ended").expect("the Lease watch failed") {
            watcher::Event::InitDone => break,
            watcher::Event::InitApply(l) => panic!("a tombstone before the revocation: {:?}", l.metadata.name),
            _ => {}
        }
    }
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(_)) = event {
                return Instant::now();
            }
        }
        panic!("the Lease watch ended before a tombstone appeared");
    })
}

/// Waits until the operator has `n` watches open.
async fn watches_open(s: &DeployScenario, n: u32) {
    wait_for(&format!("{n} open watches"), T, || async {
        let metrics = s.op.metrics().await?;
        let line = metrics.lines().find(|l| l.starts_with("bloodraven_deploy_watches_open ")).unwrap_or_default();
        if line == format!("bloodraven_deploy_watches_open {n}") { Ok(()) } else { Err(line.to_owned()) }
    })
    .await;
}

/// Prints the figures and checks the watch answered by push, not by polling.
///
/// The leases here have a TTL of 120 s, so a client that only renews would learn
/// of the revocation at its next renewal, up to 40 s later. The bound sits well
/// under that and well above the scheduling noise of a loaded machine; how fast
/// the push is belongs to the figures printed, not to the assertion.
fn report(what: &str, answered: Instant, written: Instant, asked: Instant) {
    let after_write = answered.saturating_duration_since(written);
    let before_write = written.saturating_duration_since(answered);
    println!(
        "{what}: the watch answered {} ms after the tombstone write was seen ({} ms before it), {} ms after the revocation was asked for",
        after_write.as_millis(),
        before_write.as_millis(),
        answered.duration_since(asked).as_millis()
    );
    assert!(
        after_write < Duration::from_secs(10),
        "{what}: the watch answered {after_write:?} after the revocation, as late as a renewal would have"
    );
}

#[tokio::test]
async fn the_revoke_annotation_reaches_a_watching_client_at_once() {
    let s = deploy::scenario("watch-revoke").await;
    let p = &s.pipeline;
    // TTL 120: without push, a client would learn at its next renewal, up to 40 s later.
    let m = p.post_until(201, "migration", "op-w", "counter-app", 120).await;
    let h = p.post("failover-hold", "op-w", "counter-app", 120).await;
    assert_eq!(h.status, 201, "{h:?}");
    let tombstone = first_tombstone(&s).await;
    let watching = {
        let p = p.clone();
        let token = token_of(&h);
        tokio::spawn(async move { watch_until_lost(&p, "failover-hold", "op-w", &token).await })
    };
    watches_open(&s, 1).await;

    let asked = Instant::now();
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/revoke-deployment-leases": "now"}}});
    s.sc.cluster.groups().patch(&p.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();

    let (reply, answered) = watching.await.unwrap();
    assert_eq!((reply.status, reply.body["error"].as_str()), (409, Some("revoked")), "{reply:?}");
    assert_eq!(reply.body["reason"], "OperatorRevoked");
    assert_eq!(reply.body["topologyGeneration"], 1);
    report("revoke annotation", answered, tombstone.await.unwrap(), asked);
    // The renewal, the source of truth, says the same.
    let renewal = p.put("migration", "op-w", &token_of(&m)).await;
    assert_eq!((renewal.status, renewal.body["reason"].as_str()), (409, Some("OperatorRevoked")), "{renewal:?}");
}

#[tokio::test]
async fn a_planned_failover_revokes_a_watched_lease_at_once() {
    let s = deploy::scenario("watch-failover").await;
    let p = &s.pipeline;
    // The migration mutex alone: a failover-hold would defer the planned failover.
    let m = p.post_until(201, "migration", "op-f", "counter-app", 120).await;
    let tombstone = first_tombstone(&s).await;
    let watching = {
        let p = p.clone();
        let token = token_of(&m);
        tokio::spawn(async move { watch_until_lost(&p, "migration", "op-f", &token).await })
    };
    watches_open(&s, 1).await;

    let asked = Instant::now();
    s.sc.request_failover(&p.group, "pdx", "to-pdx").await;

    let (reply, answered) = watching.await.unwrap();
    assert_eq!((reply.status, reply.body["error"].as_str()), (409, Some("revoked")), "{reply:?}");
    assert_eq!(reply.body["reason"], "TopologyChanged");
    assert_eq!(reply.body["topologyGeneration"], 2);
    report("planned failover", answered, tombstone.await.unwrap(), asked);
}

#[tokio::test]
async fn a_watch_is_authenticated_authorized_and_bounded_like_a_renewal() {
    let s = deploy::scenario("watch-auth").await;
    let p = &s.pipeline;
    let (cluster, ns) = (&s.sc.cluster, &s.sc.ns.name);
    let m = p.post_until(201, "migration", "op-a", "counter-app", 30).await;
    let lease_token = token_of(&m);

    // Who may watch: the grant's caller, with its lease token.
    let no_token = p.as_caller(String::new()).watch("migration", "op-a", &lease_token, 1).await;
    assert_eq!((no_token.status, no_token.body["error"].as_str()), (401, Some("unauthenticated")), "{no_token:?}");
    let default_audience = deploy::token(cluster, ns, "deployer", &[]).await;
    let answer = p.as_caller(default_audience).watch("migration", "op-a", &lease_token, 1).await;
    assert_eq!(answer.status, 401, "a token for the API server's audience: {answer:?}");
    deploy::service_account(cluster, ns, "stranger").await;
    let stranger = deploy::token(cluster, ns, "stranger", &["bloodraven-deploy"]).await;
    let answer = p.as_caller(stranger).watch("migration", "op-a", &lease_token, 1).await;
    assert_eq!((answer.status, answer.body["error"].as_str()), (403, Some("forbidden")), "{answer:?}");
    let answer = p.watch("migration", "op-a", "not-the-lease-token", WAIT).await;
    assert_eq!((answer.status, answer.body["error"].as_str()), (403, Some("token_mismatch")), "{answer:?}");
    let answer = p.watch("migration", "op-a", &lease_token, 61).await;
    assert_eq!((answer.status, answer.body["error"].as_str()), (400, Some("invalid_request")), "{answer:?}");
    assert!(answer.body["message"].as_str().unwrap().contains("waitSeconds"), "{answer:?}");

    // A wait that runs out: the lease as last renewed; not a renewal.
    let answer = p.watch("migration", "op-a", &lease_token, 1).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!((&answer.body["expiresAt"], &answer.body["topologyGeneration"]), (&m.body["expiresAt"], &json!(1)));

    // Releasing the lease ends a watch on it.
    let watching = {
        let p = p.clone();
        let token = lease_token.clone();
        tokio::spawn(async move { watch_until_lost(&p, "migration", "op-a", &token).await })
    };
    watches_open(&s, 1).await;
    assert_eq!(p.delete("migration", "op-a", &lease_token).await.status, 204);
    let (reply, _) = watching.await.unwrap();
    assert_eq!((reply.status, reply.body["error"].as_str()), (404, Some("expired")), "{reply:?}");

    // At most 4 watches of one lease: a fifth answers 429 at once.
    let b = p.post("migration", "op-b", "counter-app", 30).await;
    assert_eq!(b.status, 201, "{b:?}");
    let b_token = token_of(&b);
    let four: Vec<_> = (0..4)
        .map(|_| {
            let (p, token) = (p.clone(), b_token.clone());
            tokio::spawn(async move { watch_until_lost(&p, "migration", "op-b", &token).await })
        })
        .collect();
    watches_open(&s, 4).await;
    let fifth = p.watch("migration", "op-b", &b_token, 0).await;
    assert_eq!((fifth.status, fifth.body["error"].as_str()), (429, Some("too_many_watches")), "{fifth:?}");
    assert_eq!(fifth.body["retryAfterSeconds"], 1);
    assert_eq!(p.delete("migration", "op-b", &b_token).await.status, 204);
    for w in four {
        assert_eq!(w.await.unwrap().0.status, 404);
    }
    watches_open(&s, 0).await;

    // Neither token reached the operator's log.
    let log = std::fs::read_to_string(&s.op.log).unwrap();
    assert!(log.contains("watch_lease"), "the watches were logged");
    for secret in [&lease_token, &b_token, &p.token] {
        assert!(!log.contains(secret.as_str()), "a token is in the operator's log");
    }
}
