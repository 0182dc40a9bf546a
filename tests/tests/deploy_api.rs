//! The deploy API against real components: real TLS, real TokenReview with
//! real projected tokens, real Lease objects, the real operator binary.
//! Each row of the reference table (docs/deploy-api.md), refusals included.

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_e2e::deploy::{self, Reply, call};
use bloodraven_e2e::fixtures::{Scenario, has_condition, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use reqwest::Method;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

struct Env {
    sc: Scenario,
    op: bloodraven_e2e::Operator,
    log: std::path::PathBuf,
    base: String,
    http: reqwest::Client,
    token: String,
    group: String,
}

async fn env(prefix: &str) -> Env {
    let sc = Scenario::start(prefix, 0, LeaderTimings::default()).await;
    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    let (op, base) = deploy::start_operator(&sc.cluster, &sc.ns, "op", &tls, LeaderTimings::default()).await;
    let group = sc.bootstrapped_group("g").await;
    deploy::service_account(&sc.cluster, &sc.ns.name, "deployer").await;
    deploy::database(&sc.cluster, &sc.ns.name, "counter-app", &group, &[(&sc.ns.name, "deployer")]).await;
    let token = deploy::token(&sc.cluster, &sc.ns.name, "deployer", &["bloodraven-deploy"]).await;
    let http = deploy::client(&tls.ca);
    let log = op.log.clone();
    Env { sc, op, log, base, http, token, group }
}

impl Env {
    fn url(&self, path: &str) -> String {
        format!("{}/groups/{}{path}", self.base, self.group)
    }

    async fn get(&self) -> Reply {
        // The MysqlDatabase reflector may lag the create by a moment.
        wait_for("GET to be authorized", T, || async {
            let r = call(&self.http, Method::GET, &self.url(""), &self.token, None).await;
            if r.status == 403 { Err(format!("{r:?}")) } else { Ok(r) }
        })
        .await
    }

    async fn post(&self, kind: &str, op: &str, ttl: u32) -> Reply {
        let body = json!({"kind": kind, "operationId": op, "instance": "counter-app", "ttlSeconds": ttl});
        call(&self.http, Method::POST, &self.url("/leases"), &self.token, Some(body)).await
    }

    async fn put(&self, kind: &str, op: &str, token: &str) -> Reply {
        call(
            &self.http,
            Method::PUT,
            &self.url(&format!("/leases/{kind}/{op}")),
            &self.token,
            Some(json!({"token": token})),
        )
        .await
    }

    async fn delete(&self, kind: &str, op: &str, token: &str) -> Reply {
        call(
            &self.http,
            Method::DELETE,
            &self.url(&format!("/leases/{kind}/{op}")),
            &self.token,
            Some(json!({"token": token})),
        )
        .await
    }
}

fn token_of(r: &Reply) -> String {
    r.body["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_seed_flow_and_every_refusal() {
    let e = env("deploy").await;

    let g = e.get().await;
    assert_eq!(g.status, 200, "{g:?}");
    assert_eq!(g.body["activeSite"], "iad");
    assert_eq!(g.body["topologyGeneration"], 1);
    assert_eq!(g.body["stable"], true);
    assert_eq!(g.body["leases"], json!([]));
    assert!(g.body["health"].is_array() && g.body["operations"].is_array());

    // Migration first: 201 with every field, ttl clamped.
    let m = e.post("migration", "op-1", 500).await;
    assert_eq!(m.status, 201, "{m:?}");
    for f in ["kind", "operationId", "instance", "token", "expiresAt", "ttlSeconds", "topologyGeneration"] {
        assert!(!m.body[f].is_null(), "missing {f}: {m:?}");
    }
    assert_eq!(m.body["ttlSeconds"], 120);
    assert_eq!(m.body["topologyGeneration"], 1);
    let m_token = token_of(&m);

    // A second pipeline: 409 held with the holder.
    let other = e.post("migration", "op-2", 30).await;
    assert_eq!((other.status, other.body["error"].as_str()), (409, Some("held")), "{other:?}");
    assert_eq!(other.body["holder"]["operationId"], "op-1");
    assert_eq!(other.body["holder"]["instance"], "counter-app");
    assert_eq!(other.body["holder"]["expiresAt"], m.body["expiresAt"]);

    // A hold without the mutex: 403; with it: 201.
    assert_eq!(e.post("failover-hold", "op-2", 30).await.status, 403);
    let h = e.post("failover-hold", "op-1", 1).await;
    assert_eq!(h.status, 201, "{h:?}");
    assert_eq!(h.body["ttlSeconds"], 5, "clamped up to 5");
    // A 5 s hold can lapse before the checks below on a loaded machine:
    // re-acquire it (a repeat POST) for a minute.
    let h = e.post("failover-hold", "op-1", 60).await;
    assert_eq!((h.status, h.body["ttlSeconds"].as_u64()), (200, Some(60)), "{h:?}");
    let h_token = token_of(&h);

    // A repeat POST rotates the token: 200, the old token stops working.
    let again = e.post("migration", "op-1", 30).await;
    assert_eq!(again.status, 200, "{again:?}");
    let new_token = token_of(&again);
    assert_ne!(new_token, m_token);
    let stale = e.put("migration", "op-1", &m_token).await;
    assert_eq!((stale.status, stale.body["error"].as_str()), (403, Some("token_mismatch")), "{stale:?}");
    let renewed = e.put("migration", "op-1", &new_token).await;
    assert_eq!(renewed.status, 200, "{renewed:?}");
    assert_eq!(renewed.body["topologyGeneration"], 1);
    assert!(renewed.body["expiresAt"].is_string());

    // The active-lease gauge follows (it is refreshed every 5 s).
    wait_for("bloodraven_deploy_leases_active", T, || async {
        let m = e.op.metrics().await?;
        let want = format!("bloodraven_deploy_leases_active{{group=\"{}\",kind=\"failover-hold\"}} 1", e.group);
        if m.contains(&want) {
            Ok(())
        } else {
            Err(m.lines().filter(|l| l.contains("leases_active")).collect::<Vec<_>>().join("; "))
        }
    })
    .await;

    // The GET lists both leases, never a token.
    let g = e.get().await;
    let leases = g.body["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2, "{g:?}");
    assert!(!g.body.to_string().contains(&new_token) && !g.body.to_string().contains(&h_token));

    // Leases hold token hashes, never tokens.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(e.sc.cluster.client.clone(), &e.sc.ns.name);
    let stored = serde_json::to_string(&leases.list(&kube::api::ListParams::default()).await.unwrap()).unwrap();
    assert!(stored.contains("bloodraven.shipstream.io/token-sha256"));
    for t in [&m_token, &new_token, &h_token] {
        assert!(!stored.contains(t.as_str()), "a token was stored in a Lease");
    }

    // Unknown operation: 404 expired.
    let unknown = e.put("migration", "op-9", &new_token).await;
    assert_eq!((unknown.status, unknown.body["error"].as_str()), (404, Some("expired")), "{unknown:?}");

    // Release: wrong token 403; right token 204, and the hold goes with the mutex.
    assert_eq!(e.delete("migration", "op-1", "wrong").await.status, 403);
    let released = e.delete("migration", "op-1", &new_token).await;
    assert_eq!(released.status, 204, "{released:?}");
    assert_eq!(e.get().await.body["leases"], json!([]));
    assert_eq!(e.delete("migration", "op-1", &new_token).await.status, 404);
    assert_eq!(e.put("failover-hold", "op-1", &h_token).await.status, 404, "the hold was released with the mutex");

    // Tokens never reach the log; every request is logged as "deploy api".
    let log = std::fs::read_to_string(&e.log).unwrap();
    for t in [&m_token, &new_token, &h_token, &e.token] {
        assert!(!log.contains(t.as_str()), "a token reached the log");
    }
    assert!(log.contains(r#""msg":"deploy api""#) && log.contains(r#""operationId":"op-1""#), "{log}");
}

#[tokio::test]
async fn revocation_by_annotation_and_by_generation_leaves_tombstones() {
    let e = env("revoke").await;
    e.get().await;
    // A short TTL: once revoked, op-r keeps the mutex until its last deadline.
    let m = e.post("migration", "op-r", 20).await;
    assert_eq!(m.status, 201, "{m:?}");
    let r = call(
        &e.http,
        Method::PUT,
        &e.url("/leases/migration/op-r"),
        &e.token,
        Some(json!({"token": token_of(&m), "ddlState": "started"})),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");

    // A person revokes by annotation.
    let groups = e.sc.cluster.groups();
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/revoke-deployment-leases": "now"}}});
    groups.patch(&e.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let revoked = wait_for("the lease to be revoked", T, || async {
        let r = e.put("migration", "op-r", &token_of(&m)).await;
        if r.status == 409 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(revoked.body["error"], "revoked");
    assert_eq!(revoked.body["reason"], "OperatorRevoked");
    assert_eq!(revoked.body["topologyGeneration"], 1);
    let note = wait_event(&e.sc.cluster, &e.group, "DeploymentLeaseRevoked").await;
    assert!(note.contains("op-r") && note.contains("started"), "{note}");
    wait_for("the annotation to be removed", T, || async {
        let g = groups.get(&e.group).await.map_err(|e| e.to_string())?;
        if g.metadata.annotations.unwrap_or_default().contains_key("bloodraven.shipstream.io/revoke-deployment-leases")
        {
            Err("still there".into())
        } else {
            Ok(())
        }
    })
    .await;

    // op-r was revoked inside its DDL: no new migration of the instance
    // until a person verified the schema (409 schema_verification_required,
    // naming op-r); then another operation takes the mutex.
    let held_back = wait_for("a new migration refused while op-r's schema awaits verification", T, || async {
        let r = e.post("migration", "op-s", 60).await;
        if r.status == 409 && r.body["error"] == "schema_verification_required" { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(held_back.body["verification"]["operationId"], "op-r", "{held_back:?}");
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/schema-verified": "op-r"}}});
    groups.patch(&e.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // The revoked one retries: still revoked (tombstone).
    let m2 = wait_for("op-s granted once the schema was verified", T, || async {
        let r = e.post("migration", "op-s", 20).await;
        if r.status == 201 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    let retry = e.post("migration", "op-r", 60).await;
    assert_eq!((retry.status, retry.body["error"].as_str()), (409, Some("revoked")), "{retry:?}");

    // The topology moves (as a failover decision would: record, then status):
    // every lease of the group is revoked with TopologyChanged.
    let records: Api<ConfigMap> = Api::namespaced(e.sc.cluster.client.clone(), &e.sc.ns.name);
    let record = records
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|c| c.data.as_ref().is_some_and(|d| d.get("group") == Some(&e.group)))
        .unwrap();
    let name = record.metadata.name.clone().unwrap();
    records
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"data": {"topologyGeneration": "2"}})))
        .await
        .unwrap();
    groups
        .patch_status(&e.group, &PatchParams::default(), &Patch::Merge(json!({"status": {"topologyGeneration": 2}})))
        .await
        .unwrap();
    let moved = wait_for("TopologyChanged", T, || async {
        let r = e.put("migration", "op-s", &token_of(&m2)).await;
        if r.status == 409 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(moved.body["reason"], "TopologyChanged", "{moved:?}");
    assert_eq!(moved.body["topologyGeneration"], 2);
    // op-s's client was last told "until expiresAt" and may not have heard
    // of the revocation: the mutex stays op-s's until then, and the group
    // view says it was revoked.
    // (A generation moved by hand, with no failover behind it, also makes
    // the group Degraded once the next probe compares it with the sites;
    // a POST answers 423 from then on, and is never a grant.)
    let early = e.post("migration", "op-t", 60).await;
    let refusal = (early.status, early.body["error"].as_str(), early.body["holder"]["operationId"].as_str());
    assert!(matches!(refusal, (409, Some("held"), Some("op-s")) | (423, Some("unstable"), None)), "{early:?}");
    let view = e.get().await;
    assert_eq!(view.body["leases"][0]["operationId"], "op-s", "{view:?}");
    assert_eq!(view.body["leases"][0]["revoked"], "TopologyChanged", "{view:?}");
}

#[tokio::test]
async fn an_unstable_group_answers_423_and_never_extends() {
    let e = env("unstable").await;
    e.get().await;
    let m = e.post("migration", "op-u", 30).await;
    assert_eq!(m.status, 201, "{m:?}");
    e.sc.pair.stop_applier("pdx");
    wait_status(&e.sc.cluster, &e.group, "ReplicationNotRunning", T, |s| {
        has_condition(s, "ReplicationNotRunning", "True", None)
    })
    .await;
    // The deploy API reads the status from its own watch, a moment behind
    // the status written: the refusal is asserted once it says unstable.
    wait_for("the deploy API to see the group unstable", T, || async {
        let g = e.get().await;
        if g.body["stable"] == false { Ok(()) } else { Err(format!("{g:?}")) }
    })
    .await;
    let r = e.put("migration", "op-u", &token_of(&m)).await;
    assert_eq!((r.status, r.body["error"].as_str()), (423, Some("unstable")), "{r:?}");
    assert!(r.body["retryAfterSeconds"].as_u64().is_some_and(|s| s > 0), "{r:?}");
    let g = e.get().await;
    assert_eq!(g.body["stable"], false);
    assert_eq!(g.body["unstableReason"], "ReplicationNotRunning");
    assert_eq!(g.body["leases"][0]["expiresAt"], m.body["expiresAt"], "a 423 never moves the deadline");
    assert_eq!(e.post("migration", "op-v", 30).await.status, 423);
    e.sc.pair.start_applier("pdx");
}

#[tokio::test]
async fn malformed_oversized_and_unauthenticated_requests() {
    let e = env("badinput").await;
    e.get().await;
    let raw = |body: &str| {
        let req = e
            .http
            .post(e.url("/leases"))
            .bearer_auth(&e.token)
            .header("content-type", "application/json")
            .body(body.to_owned());
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            let body = serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default();
            deploy::check_contract(&Method::POST, "/deploy/v1/groups/g/leases", status, &text, &body);
            (status, body)
        }
    };
    for (body, field) in [
        ("{not json", "body"),
        (r#"{"kind":"other","operationId":"a","instance":"counter-app","ttlSeconds":30}"#, "kind"),
        (r#"{"kind":"migration","operationId":"has space","instance":"counter-app","ttlSeconds":30}"#, "operationId"),
        (r#"{"kind":"migration","operationId":"a","instance":"counter-app"}"#, "ttlSeconds"),
        (r#"{"kind":"migration","operationId":"a","instance":"counter-app","ttlSeconds":-1}"#, "ttlSeconds"),
        (r#"{"kind":"migration","operationId":"a","instance":"counter-app","ttlSeconds":30,"extra":1}"#, "extra"),
        (
            &format!(
                r#"{{"kind":"migration","operationId":"{}","instance":"counter-app","ttlSeconds":30}}"#,
                "x".repeat(129)
            ),
            "operationId",
        ),
    ] {
        let (status, b) = raw(body).await;
        assert_eq!(status, 400, "{body}: {b}");
        assert_eq!(b["error"], "invalid_request", "{body}");
        assert!(b["message"].as_str().unwrap().contains(field), "{body}: message must name {field}: {b}");
    }
    // Exactly 64 KiB is read (and refused for its content); more is 413,
    // answered from the declared Content-Length before any body is read.
    let shell = r#"{"kind":"migration","operationId":"a","instance":"","ttlSeconds":30}"#;
    let exact = shell.replace(r#""instance":"""#, &format!(r#""instance":"{}""#, "x".repeat(64 * 1024 - shell.len())));
    assert_eq!(exact.len(), 64 * 1024);
    let (status, b) = raw(&exact).await;
    assert_eq!((status, b["error"].as_str()), (400, Some("invalid_request")), "{b}");
    let port = e.base.trim_start_matches("https://127.0.0.1:").split('/').next().unwrap().to_owned();
    let path = e.url("/leases").split_once(&port).unwrap().1.to_owned();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 70000\r\nConnection: close\r\n\r\n",
        e.token
    );
    // Over TLS with the headers alone, then as a client that writes its
    // whole body before it reads (Python's urllib does): both read the 413,
    // the second because the server drains what it refuses instead of
    // closing on it (a close unread made such a client see a broken pipe).
    for body in [String::new(), "x".repeat(70_000)] {
        let answer = tokio::task::spawn_blocking({
            let (request, port) = (format!("{request}{body}"), port.clone());
            move || {
                let mut s_client = std::process::Command::new("openssl")
                    .args(["s_client", "-quiet", "-connect", &format!("127.0.0.1:{port}")])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                let mut stdin = s_client.stdin.take().unwrap();
                let wrote = std::io::Write::write_all(&mut stdin, request.as_bytes());
                drop(stdin);
                let out = s_client.wait_with_output().unwrap();
                (wrote.map_err(|e| e.to_string()), String::from_utf8_lossy(&out.stdout).into_owned())
            }
        })
        .await
        .unwrap();
        let (wrote, answer) = answer;
        assert!(wrote.is_ok(), "{} body bytes: the write failed: {wrote:?}; read: {answer}", body.len());
        assert!(
            answer.starts_with("HTTP/1.1 413") && answer.contains("payload_too_large"),
            "{} body bytes: {answer}",
            body.len()
        );
    }
    let bad_kind = e.put("hold", "a", "t").await;
    assert_eq!((bad_kind.status, bad_kind.body["error"].as_str()), (400, Some("invalid_request")));

    for token in ["", "not-a-token"] {
        let r = call(&e.http, Method::GET, &e.url(""), token, None).await;
        assert_eq!((r.status, r.body["error"].as_str()), (401, Some("unauthenticated")), "{token:?}: {r:?}");
    }
    let r = e.http.get(e.url("")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401, "no Authorization header");
}

#[tokio::test]
async fn restarting_the_operator_releases_and_resets_nothing() {
    let mut e = env("restartd").await;
    e.get().await;
    let m = e.post("migration", "op-k", 120).await;
    assert_eq!(m.status, 201, "{m:?}");
    assert!(e.op.stop().await, "SIGTERM must end the operator cleanly");
    let tls = bloodraven_e2e::deploy::TlsFiles {
        ca: e.sc.pair.dir().join("tls/ca.crt"),
        cert: e.sc.pair.dir().join("tls/tls.crt"),
        key: e.sc.pair.dir().join("tls/tls.key"),
    };
    let (op, base) = deploy::start_operator(&e.sc.cluster, &e.sc.ns, "op2", &tls, LeaderTimings::default()).await;
    e.op = op;
    e.base = base;
    let r = wait_for("the restarted operator to renew the same lease", T, || async {
        let r = e.put("migration", "op-k", &token_of(&m)).await;
        if r.status == 200 { Ok(r) } else { Err(format!("{r:?}")) }
    })
    .await;
    assert_eq!(r.body["topologyGeneration"], 1);
    let held = e.post("migration", "op-l", 30).await;
    assert_eq!((held.status, held.body["holder"]["operationId"].as_str()), (409, Some("op-k")), "{held:?}");
}

#[tokio::test]
async fn the_operator_refuses_to_serve_the_deploy_api_without_tls_files() {
    let out = tokio::process::Command::new(bloodraven_e2e::operator::operator_bin())
        .args(["--deploy-api-enabled", "--plain-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", bloodraven_e2e::e2e_dir().join("control-plane/kubeconfig"))
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--tls-cert-file"), "{text}");
}
