//! Authorization comes before any other API-server read a request causes
//! (any ServiceAccount can mint a bloodraven-deploy token for
//! itself, so such a caller must cost the API server nothing but its
//! TokenReview). The router runs against a stand-in API server that answers
//! TokenReviews and records every other request; the real server is used by
//! the e2e tests, this only counts requests.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};
use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup};
use http_body_util::Full;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use tower::ServiceExt;

use super::router;
use crate::authority::Authority;
use crate::deploy_api::DeployState;
use crate::deploy_api::auth::Authenticator;
use crate::lease::service::Service;
use crate::lease::store::Store;

/// A stand-in API server: TokenReviews authenticate `user`; anything else
/// is recorded and answered 500.
fn api_server(user: &'static str, seen: Arc<Mutex<Vec<String>>>) -> kube::Client {
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let seen = seen.clone();
        async move {
            let path = req.uri().path().to_owned();
            let body = if path.ends_with("/tokenreviews") {
                let review = serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "status": {"authenticated": true, "audiences": ["bloodraven-deploy"], "user": {"username": user}},
                });
                Response::new(Full::new(Bytes::from(review.to_string())))
            } else {
                seen.lock().unwrap().push(format!("{} {path}", req.method()));
                let mut r = Response::new(Full::new(Bytes::from_static(b"{}")));
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                r
            };
            Ok::<_, std::convert::Infallible>(body)
        }
    });
    kube::Client::new(service, "bloodraven")
}

fn store<K>(objects: Vec<K>) -> kube::runtime::reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut writer: Writer<K> = reflector::store::Writer::default();
    let reader = writer.as_reader();
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(o));
    }
    reader
}

/// Group `playground` accepting every namespace, and MysqlDatabase
/// `counter-app/counter-app` listing `counter-app/deployer`.
fn state(user: &'static str, seen: Arc<Mutex<Vec<String>>>) -> DeployState {
    let client = api_server(user, seen);
    let group: MysqlFailoverGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
        "metadata": {"name": "playground", "uid": "g1"},
        "spec": {"sites": [], "initialActiveSite": "iad", "allowedDatabases": {"namespaces": {"from": "All"}}},
        "status": {"instanceClaims": [{"instance": "counter-app", "namespace": "counter-app"}]},
    }))
    .unwrap();
    let db: MysqlDatabase = serde_json::from_value(serde_json::json!({
        "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase",
        "metadata": {"name": "counter-app", "namespace": "counter-app", "uid": "d1"},
        "spec": {"failoverGroupRef": {"name": "playground"}, "schema": "counter",
                 "deploymentClients": [{"namespace": "counter-app", "serviceAccount": "deployer"}]},
    }))
    .unwrap();
    let authority = Authority { databases: store(vec![db]), groups: store(vec![group]), namespaces: store(vec![]) };
    DeployState {
        service: Service::new(
            Store::new(kube::Api::namespaced(client.clone(), "bloodraven")),
            crate::tolerant::Tolerant::start(
                &client,
                &crate::events::Recorder::new(
                    client.clone(),
                    kube::runtime::events::Reporter { controller: "test".into(), instance: None },
                ),
                &crate::leader::Leadership::leading_for_tests(),
                &crate::metrics::Metrics::new().unwrap(),
                std::future::pending(),
            )
            .unwrap(),
        )
        .with_group_cache(authority.groups.clone()),
        auth: Authenticator::new(kube::Api::all(client), std::time::Duration::ZERO),
        authority,
        leadership: crate::leader::Leadership::leading_for_tests(),
        metrics: crate::metrics::Metrics::new().unwrap(),
        watches: crate::deploy_api::watches_for(8),
        shutdown: bloodraven_serving::Shutdown::manual().1,
        waiting: None,
        body_reads: crate::deploy_api::BodyReads::default(),
    }
}

async fn send(state: DeployState, method: &str, path: &str, body: &str) -> StatusCode {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Bearer any-token")
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    router(state).oneshot(req).await.unwrap().status()
}

const LEASE: &str = "/deploy/v1/groups/playground/leases/migration/op-1";
const WATCH: &str = "/deploy/v1/groups/playground/leases/migration/op-1/watch";

#[tokio::test]
async fn a_caller_listed_nowhere_costs_no_read() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let attacker = "system:serviceaccount:tenant-b:attacker";
    let cases = [
        ("GET", "/deploy/v1/groups/playground", ""),
        (
            "POST",
            "/deploy/v1/groups/playground/leases",
            r#"{"kind":"migration","operationId":"op-1","instance":"counter-app","ttlSeconds":30}"#,
        ),
        ("PUT", LEASE, r#"{"token":"t"}"#),
        ("DELETE", LEASE, r#"{"token":"t"}"#),
        ("POST", WATCH, r#"{"token":"t","waitSeconds":5}"#),
    ];
    for (method, path, body) in cases {
        let status = send(state(attacker, seen.clone()), method, path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
    }
    assert_eq!(*seen.lock().unwrap(), Vec::<String>::new(), "no API-server read before authorization");
}

#[tokio::test]
async fn an_authorized_caller_does_reach_the_lease_store() {
    // The control: the same stand-in does see reads once authorization passes.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let status =
        send(state("system:serviceaccount:counter-app:deployer", seen.clone()), "PUT", LEASE, r#"{"token":"t"}"#).await;
    assert_ne!(status, StatusCode::FORBIDDEN);
    assert!(!seen.lock().unwrap().is_empty(), "the stand-in records reads");
}

#[tokio::test]
async fn another_method_answers_405_with_allow_before_authentication() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    for (method, path, allowed) in [
        ("PATCH", "/deploy/v1/groups/playground", "GET,HEAD"),
        ("GET", "/deploy/v1/groups/playground/leases", "POST"),
        ("POST", LEASE, "PUT,DELETE"),
        ("GET", WATCH, "POST"),
    ] {
        let req = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
        let response = router(state("nobody", seen.clone())).oneshot(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        let allow = response.headers().get("allow").map(|v| v.to_str().unwrap().replace(' ', ""));
        assert_eq!(allow.as_deref(), Some(allowed), "{method} {path}");
    }
}

#[tokio::test]
async fn a_watch_asking_for_more_than_a_minute_is_refused_before_any_read() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let deployer = "system:serviceaccount:counter-app:deployer";
    for (body, want) in [
        (r#"{"token":"t","waitSeconds":61}"#, StatusCode::BAD_REQUEST),
        (r#"{"token":"t","waitSeconds":-1}"#, StatusCode::BAD_REQUEST),
        (r#"{"token":"","waitSeconds":5}"#, StatusCode::BAD_REQUEST),
        (r#"{"waitSeconds":5}"#, StatusCode::BAD_REQUEST),
    ] {
        assert_eq!(send(state(deployer, seen.clone()), "POST", WATCH, body).await, want, "{body}");
    }
    assert_eq!(*seen.lock().unwrap(), Vec::<String>::new());
}

/// A namespace whose callers have as many bodies being read as the bound
/// allows is answered 429 at once, before its body is read; another
/// namespace's caller is not.
#[tokio::test]
async fn a_namespace_reading_its_share_of_bodies_is_told_to_ask_again() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let deployer = "system:serviceaccount:counter-app:deployer";
    let full = state(deployer, seen.clone());
    let held: Vec<_> = (0..crate::deploy_api::BODY_READS_PER_NAMESPACE)
        .map(|_| full.body_reads.take("counter-app").expect("under the bound"))
        .collect();
    for (method, path, body) in [
        ("PUT", LEASE, r#"{"token":"t"}"#),
        ("DELETE", LEASE, r#"{"token":"t"}"#),
        ("POST", WATCH, r#"{"token":"t","waitSeconds":5}"#),
        (
            "POST",
            "/deploy/v1/groups/playground/leases",
            r#"{"kind":"migration","operationId":"op-1","instance":"counter-app","ttlSeconds":30}"#,
        ),
    ] {
        assert_eq!(send(full.clone(), method, path, body).await, StatusCode::TOO_MANY_REQUESTS, "{method} {path}");
    }
    assert!(full.body_reads.take("tenant-b").is_some(), "another namespace reads on");
    drop(held);
    assert_ne!(send(full, "PUT", LEASE, r#"{"token":"t"}"#).await, StatusCode::TOO_MANY_REQUESTS);
}
