//! Mutual exclusion under contention: 50 concurrent clients race for the
//! migration mutex through the real API while the leader operator is killed
//! midway. From the history of grants: never two holders at once, and no
//! grant returned already expired.

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_e2e::deploy::{self, call};
use bloodraven_e2e::fixtures::Scenario;
use bloodraven_e2e::operator::LeaderTimings;
use k8s_openapi::jiff::Timestamp;
use reqwest::Method;
use serde_json::json;

const CLIENTS: usize = 50;
const RUN: Duration = Duration::from_secs(25);

/// One grant as the client saw it.
#[derive(Clone, Debug)]
struct Grant {
    op: String,
    /// Server time of the grant (expiresAt − ttl).
    start: Timestamp,
    /// When the holder sent its release, or the expiry if it never released.
    end: Timestamp,
    expires: Timestamp,
    received: Timestamp,
}

#[tokio::test]
async fn fifty_clients_and_a_leader_kill_never_see_two_holders() {
    let sc = Scenario::start("race", 0, LeaderTimings::default()).await;
    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    let timings = LeaderTimings::default();
    let (mut a, base_a) = deploy::start_operator(&sc.cluster, &sc.ns, "a", &tls, timings).await;
    let group = sc.bootstrapped_group("g").await;
    let (_b, base_b) = deploy::start_operator(&sc.cluster, &sc.ns, "b", &tls, timings).await;
    deploy::service_account(&sc.cluster, &sc.ns.name, "deployer").await;
    deploy::database(&sc.cluster, &sc.ns.name, "counter-app", &group, &[(&sc.ns.name, "deployer")]).await;
    let token = deploy::token(&sc.cluster, &sc.ns.name, "deployer", &["bloodraven-deploy"]).await;
    let http = deploy::client(&tls.ca);
    // Wait until the database is visible to the leader's authorization.
    bloodraven_e2e::wait::wait_for("authorization", Duration::from_secs(60), || async {
        let r = call(&http, Method::GET, &format!("{base_a}/groups/{group}"), &token, None).await;
        if r.status == 200 { Ok(()) } else { Err(format!("{r:?}")) }
    })
    .await;

    let grants = Arc::new(Mutex::new(Vec::<Grant>::new()));
    let counts = Arc::new(Mutex::new(std::collections::BTreeMap::<u16, usize>::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (http, token, grants, counts) = (http.clone(), token.clone(), grants.clone(), counts.clone());
        let bases = [base_a.clone(), base_b.clone()];
        let group = group.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            let mut which = c % 2;
            while started.elapsed() < RUN {
                n += 1;
                let op = format!("c{c}-{n}");
                let base = &bases[which];
                let body = json!({"kind": "migration", "operationId": op, "instance": "counter-app", "ttlSeconds": 5});
                let sent =
                    http.post(format!("{base}/groups/{group}/leases")).bearer_auth(&token).json(&body).send().await;
                let Ok(resp) = sent else {
                    which = 1 - which; // that operator is gone: ask the other
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let status = resp.status().as_u16();
                *counts.lock().unwrap().entry(status).or_default() += 1;
                let reply: serde_json::Value = resp.json().await.unwrap_or_default();
                if status == 503 {
                    which = 1 - which;
                }
                if status != 201 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                let received = Timestamp::now();
                let expires: Timestamp = reply["expiresAt"].as_str().unwrap().parse().unwrap();
                let ttl = reply["ttlSeconds"].as_i64().unwrap();
                let start = expires.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(ttl)).unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                let release_sent = Timestamp::now();
                let url = format!("{base}/groups/{group}/leases/migration/{op}");
                // A release that does not reach a leader leaves the lease to expire.
                let released =
                    http.delete(&url).bearer_auth(&token).json(&json!({"token": reply["token"]})).send().await;
                let end = match released {
                    Ok(r) if r.status().as_u16() == 204 => release_sent.min(expires),
                    _ => expires,
                };
                grants.lock().unwrap().push(Grant { op, start, end, expires, received });
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    a.kill().await;
    let killed_after = started.elapsed();
    for t in tasks {
        t.await.unwrap();
    }

    let mut grants = grants.lock().unwrap().clone();
    grants.sort_by_key(|g| g.start);
    let counts = counts.lock().unwrap().clone();
    println!(
        "figure: {} grants by {CLIENTS} clients in {RUN:?}, leader killed after {killed_after:?}; answers by status: {counts:?}",
        grants.len()
    );
    assert!(grants.len() >= 10, "the race must actually grant the mutex many times: {counts:?}");
    assert!(
        grants.iter().any(|g| g.start > Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(12)),
        "grants continue after the leader kill"
    );
    for g in &grants {
        assert!(g.expires > g.received, "grant {} was returned already expired", g.op);
    }
    for pair in grants.windows(2) {
        assert!(
            pair[1].start >= pair[0].end,
            "two holders at once: {} held [{}, {}] and {} was granted at {}",
            pair[0].op,
            pair[0].start,
            pair[0].end,
            pair[1].op,
            pair[1].start
        );
    }
}
