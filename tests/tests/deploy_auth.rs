//! Who may ask: the TokenReview audience matrix and deploymentClients
//! authorization with real projected tokens; only the leader answers; TLS
//! 1.2+ only, with a certificate reloaded without a restart.

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_e2e::deploy::{self, call};
use bloodraven_e2e::fixtures::Scenario;
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use reqwest::Method;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_audience_matrix() {
    let sc = Scenario::start("aud", 0, LeaderTimings::default()).await;
    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    let (_op, base) = deploy::start_operator(&sc.cluster, &sc.ns, "op", &tls, LeaderTimings::default()).await;
    let group = sc.bootstrapped_group("g").await;
    let other_group = sc.bootstrapped_group("h").await;
    let ns = sc.ns.name.clone();
    let other_ns = sc.cluster.namespace("aud-other").await;
    for (n, sa) in [(&ns, "deployer"), (&ns, "stranger"), (&other_ns.name, "deployer")] {
        deploy::service_account(&sc.cluster, n, sa).await;
    }
    // counter-app lists ns/deployer; elsewhere-app lists only other-ns/deployer;
    // other-group-app lists ns/deployer but belongs to the other group.
    deploy::database(&sc.cluster, &ns, "counter-app", &group, &[(&ns, "deployer")]).await;
    deploy::database(&sc.cluster, &ns, "elsewhere-app", &group, &[(&other_ns.name, "deployer")]).await;
    deploy::database(&sc.cluster, &ns, "other-group-app", &other_group, &[(&ns, "deployer")]).await;
    let http = deploy::client(&tls.ca);
    let post = |token: String, instance: &'static str, op: &'static str| {
        let url = format!("{base}/groups/{group}/leases");
        let http = http.clone();
        async move {
            let body = json!({"kind": "migration", "operationId": op, "instance": instance, "ttlSeconds": 10});
            call(&http, Method::POST, &url, &token, Some(body)).await
        }
    };
    let right = deploy::token(&sc.cluster, &ns, "deployer", &["bloodraven-deploy"]).await;
    let r = wait_for("the right token to be granted", T, || async {
        let r = post(right.clone(), "counter-app", "aud-1").await;
        if r.status == 201 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(r.status, 201);

    let default_audience = deploy::token(&sc.cluster, &ns, "deployer", &[]).await;
    let other_audience = deploy::token(&sc.cluster, &ns, "deployer", &["some-other-service"]).await;
    let both_audiences =
        deploy::token(&sc.cluster, &ns, "deployer", &["some-other-service", "bloodraven-deploy"]).await;
    let sas: Api<ServiceAccount> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let uid = sas.get("deployer").await.unwrap().metadata.uid.unwrap();
    let expired = deploy::expired_token(&ns, "deployer", &uid);
    for (what, token) in [
        ("the API server's default audience", default_audience),
        ("another audience", other_audience),
        ("an expired token", expired),
    ] {
        // The first answer and a repeat (a remembered refusal) say the same.
        let first = post(token.clone(), "counter-app", "aud-2").await;
        let again = post(token, "counter-app", "aud-2").await;
        for r in [&first, &again] {
            assert_eq!((r.status, r.body["error"].as_str()), (401, Some("unauthenticated")), "{what}: {r:?}");
        }
        assert_eq!(first.body["message"], again.body["message"], "{what}");
        if what == "another audience" {
            assert!(first.body["message"].as_str().unwrap().contains("another audience"), "{first:?}");
        }
    }
    // A token for several audiences, bloodraven-deploy among them, is accepted (409: the mutex is held).
    assert_eq!(post(both_audiences, "counter-app", "aud-3").await.status, 409);

    let stranger = deploy::token(&sc.cluster, &ns, "stranger", &["bloodraven-deploy"]).await;
    let r = post(stranger, "counter-app", "aud-4").await;
    assert_eq!((r.status, r.body["error"].as_str()), (403, Some("forbidden")), "a ServiceAccount not listed: {r:?}");
    let r = post(right.clone(), "elsewhere-app", "aud-5").await;
    assert_eq!(r.status, 403, "listed only in another namespace: {r:?}");
    // A mistyped instance: not called a MysqlDatabase that excludes the
    // caller; the caller's own instances are named, nobody else's.
    let r = post(right.clone(), "counter-ap", "aud-5b").await;
    let m = r.body["message"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r.status, 403, "{r:?}");
    assert!(m.contains("no instance counter-ap is attached") && m.contains("counter-app"), "{m}");
    assert!(!m.contains("elsewhere-app") && !m.contains("other-group-app"), "{m}");
    // Renewing an operation that never held a lease: not "expired".
    let lease_url = format!("{base}/groups/{group}/leases/migration/never-held");
    let r = call(&http, Method::PUT, &lease_url, &right, Some(json!({"token": "a".repeat(64)}))).await;
    assert_eq!((r.status, r.body["error"].as_str()), (404, Some("expired")), "{r:?}");
    assert!(r.body["message"].as_str().unwrap().contains("holds no migration lease"), "{r:?}");
    let other_ns_token = deploy::token(&sc.cluster, &other_ns.name, "deployer", &["bloodraven-deploy"]).await;
    let r = post(other_ns_token, "counter-app", "aud-6").await;
    assert_eq!(r.status, 403, "same name, another namespace: {r:?}");
    let r = post(right.clone(), "other-group-app", "aud-7").await;
    assert_eq!(r.status, 403, "a MysqlDatabase of another group: {r:?}");
    let r = call(&http, Method::GET, &format!("{base}/groups/no-such-group"), &right, None).await;
    assert_eq!(r.status, 403, "not a client of an unknown group: {r:?}");
    deploy::database(&sc.cluster, &ns, "ghost-app", "no-such-group", &[(&ns, "deployer")]).await;
    let r = wait_for("group_not_found", T, || async {
        let r = call(&http, Method::GET, &format!("{base}/groups/no-such-group"), &right, None).await;
        if r.status == 404 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(r.body["error"], "group_not_found");
}

#[tokio::test]
async fn only_the_leader_answers_and_tls_is_1_2_or_later_with_reload() {
    let sc = Scenario::start("follower", 0, LeaderTimings::default()).await;
    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    let (a, base_a) = deploy::start_operator(&sc.cluster, &sc.ns, "a", &tls, LeaderTimings::default()).await;
    let group = sc.bootstrapped_group("g").await;
    let (_b, base_b) = deploy::start_operator(&sc.cluster, &sc.ns, "b", &tls, LeaderTimings::default()).await;
    let _keep = &a;
    deploy::service_account(&sc.cluster, &sc.ns.name, "deployer").await;
    deploy::database(&sc.cluster, &sc.ns.name, "counter-app", &group, &[(&sc.ns.name, "deployer")]).await;
    let token = deploy::token(&sc.cluster, &sc.ns.name, "deployer", &["bloodraven-deploy"]).await;
    let http = deploy::client(&tls.ca);
    // Whoever holds the leader Lease answers; the other says not_leader.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    let holder = wait_for("a leader", T, || async {
        let l = leases.get("bloodraven-leader").await.map_err(|e| e.to_string())?;
        l.spec.and_then(|s| s.holder_identity).ok_or_else(|| "no holder".to_owned())
    })
    .await;
    let (leader_base, follower_base) = if holder == a.identity { (&base_a, &base_b) } else { (&base_b, &base_a) };
    let r = call(&http, Method::GET, &format!("{follower_base}/groups/{group}"), &token, None).await;
    assert_eq!((r.status, r.body["error"].as_str()), (503, Some("not_leader")), "{r:?}");
    let r = wait_for("the leader to answer", T, || async {
        let r = call(&http, Method::GET, &format!("{leader_base}/groups/{group}"), &token, None).await;
        if r.status == 200 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(r.body["activeSite"], "iad");

    // TLS 1.1 is refused; 1.2 and 1.3 are served.
    let port = leader_base.trim_start_matches("https://127.0.0.1:").split('/').next().unwrap().to_owned();
    let s_client = |flag: &str| {
        std::process::Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), flag])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(!s_client("-tls1_1"), "TLS 1.1 must be refused");
    assert!(s_client("-tls1_2") && s_client("-tls1_3"));

    // A new certificate from another CA replaces the files: served without a restart.
    let renewed = deploy::tls_files(&sc.pair.dir().join("tls-renewed"));
    std::fs::copy(&renewed.key, &tls.key).unwrap();
    std::fs::copy(&renewed.cert, &tls.cert).unwrap();
    let new_client = deploy::client(&renewed.ca);
    wait_for("the renewed certificate to be served", T, || async {
        match new_client.get(format!("{leader_base}/groups/{group}")).bearer_auth(&token).send().await {
            Ok(r) => Ok(r.status().as_u16()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

/// Idle connections cannot hold the operator: connections are limited, and a
/// connection that never finishes its TLS handshake is closed within 5 s.
#[tokio::test]
async fn idle_connections_are_limited_and_timed_out() {
    let sc = Scenario::start("slowloris", 0, LeaderTimings::default()).await;
    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    let port = bloodraven_e2e::free_port();
    let extra: Vec<String> = [
        "--deploy-api-enabled",
        "--deploy-api-addr",
        &format!("127.0.0.1:{port}"),
        "--deploy-api-max-connections",
        "4",
        "--tls-cert-file",
        tls.cert.to_str().unwrap(),
        "--tls-key-file",
        tls.key.to_str().unwrap(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let op =
        bloodraven_e2e::Operator::start_with(&sc.cluster, &sc.ns, &sc.ns.name, "op", LeaderTimings::default(), &extra)
            .await;
    let url = format!("https://127.0.0.1:{port}/deploy/v1/groups/x");
    let http = deploy::client(&tls.ca);
    wait_for("the listener", T, || async { http.get(&url).send().await.map(drop).map_err(|e| e.to_string()) }).await;

    // Idle TCP connections that never start TLS, from another address than
    // the real client's (the per-peer cap, 4 here, would refuse a fifth of
    // one address before anything else): at most four are ever open.
    drop(http);
    let mut idle = Vec::new();
    for _ in 0..8 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        idle.push(socket.connect(([127, 0, 0, 1], port).into()).await.unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut open = 0;
    for s in &mut idle {
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(300), tokio::io::AsyncReadExt::read(s, &mut buf)).await;
        if read.is_err() {
            open += 1;
        }
    }
    assert!(open <= 4, "{open} idle connections held open with a limit of four");
    // A real client is answered at once, the limit notwithstanding.
    let fresh = deploy::client(&tls.ca);
    let answered = std::time::Instant::now();
    let status = fresh.get(&url).send().await.map(|r| r.status().as_u16());
    assert!(status.is_ok(), "a real client is answered while idle connections fill the listener: {status:?}");
    assert_eq!(op.plain_status("/healthz").await, Ok(200), "health stays up");
    println!(
        "figure: a real client answered in {:.3}s with the listener full of idle connections",
        answered.elapsed().as_secs_f64()
    );
    drop(idle);
}
