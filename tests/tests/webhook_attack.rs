//! The webhook, attacked as a hostile but ordinary cluster user would: the TLS
//! listener spoken to directly (other protocols, old TLS, plaintext,
//! slowloris, oversized and malformed reviews, a flood of connections); a
//! namespace admin moving `deploymentClients` by apply, replace, owner
//! references and delete-and-re-create; the injection paths a tenant can
//! take (CronJob, Pod-template annotations, an annotation added by an
//! update, a container named like the sidecar, look-alike volumes, copies,
//! `generateName`); the operator namespace's admin against the operator's
//! state; and the webhook killed -9 and restarted mid-traffic. Each input
//! that once got through is kept here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test
#![allow(clippy::too_many_lines)] // each test is one attack story, step by step

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlDatabase;
use bloodraven_e2e::deploy::{service_account, token};
use bloodraven_e2e::operator::role;
use bloodraven_e2e::pods::image;
use bloodraven_e2e::webhook::{refusal, refused_replace};
use bloodraven_e2e::{Cluster, wait_for};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use bloodraven_e2e::webhook::{GuardEnv as Env, guard_env as setup};

async fn as_sa(cluster: &Cluster, namespace: &str, name: &str) -> Client {
    service_account(cluster, namespace, name).await;
    cluster.client_with_token(&token(cluster, namespace, name, &[]).await).await
}

fn sa_subject(namespace: &str, name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        ..Subject::default()
    }
}

/// Binds `subject` in `namespace` to ClusterRole `cluster_role` (`admin`: a namespace admin).
async fn bind_cluster_role(cluster: &Cluster, namespace: &str, cluster_role: &str, subject: Subject) {
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(format!("{cluster_role}-{}", subject.name)),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: cluster_role.into(),
        },
        subjects: Some(vec![subject]),
    };
    Api::<RoleBinding>::namespaced(cluster.client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// RBAC changes reach the authorizer within moments: ask until it holds.
async fn eventually<F, Fut, T>(what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    wait_for(what, Duration::from_secs(20), || async { f().await.map_err(|e| e.to_string()) }).await
}

// ---------------------------------------------------------------------------
// 1. The TLS listener, spoken to directly.
// ---------------------------------------------------------------------------

/// A review through the API server that only the webhook refuses: a
/// cluster admin's dry-run create of a deploy Lease. `Ok` when the webhook
/// answered it (refused with its own words); an error text otherwise. A
/// create that succeeds would be a guard answering "allowed": a panic.
async fn guarded_review(env: &Env) -> Result<(), String> {
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "bloodraven-deploy-attack-probe"}})).unwrap();
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    let m = refusal(Api::<Lease>::namespaced(env.cluster.client.clone(), &env.op_ns.name).create(&dry, &lease).await);
    if m.contains("written only by it") { Ok(()) } else { Err(m) }
}

fn https(env: &Env) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&env.webhook.tls.ca).unwrap()).unwrap();
    reqwest::Client::builder().add_root_certificate(ca).http1_only().timeout(Duration::from_secs(30)).build().unwrap()
}

fn url(env: &Env, path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", env.webhook.port)
}

/// An `AdmissionReview` as the API server sends it.
#[allow(clippy::needless_pass_by_value)] // built inline at each call
fn review(resource: (&str, &str, &str), operation: &str, object: Option<Value>, old: Option<Value>) -> Value {
    let (group, resource, kind) = resource;
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "3b5f1a4e-attack", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "name": "bloodraven-leader", "namespace": "somewhere", "operation": operation,
        "userInfo": {"username": "mallory", "groups": ["system:authenticated"]},
        "object": object, "oldObject": old}})
}

const GROUPS: (&str, &str, &str) = ("bloodraven.shipstream.io", "mysqlfailovergroups", "MysqlFailoverGroup");
const JOBS: (&str, &str, &str) = ("batch", "jobs", "Job");
const LEASES: (&str, &str, &str) = ("coordination.k8s.io", "leases", "Lease");

fn alive(env: &Env) {
    let pid = env.webhook.pid().expect("the webhook process is running");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "the webhook process {pid} is gone");
    let log = env.webhook.log_text();
    assert!(!log.contains("panicked"), "the webhook panicked: {log}");
}

/// Runs `openssl s_client` against the webhook with `flags`; its output.
fn s_client(env: &Env, flags: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{}", env.webhook.port), "-brief"])
        .args(["-CAfile", env.webhook.tls.ca.to_str().unwrap()])
        .args(flags)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Runs curl against the webhook; (exit success, `http_code http_version`, output).
fn curl(env: &Env, flags: &[&str], body: &str) -> (bool, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert", env.webhook.tls.ca.to_str().unwrap()])
        .args(["-H", "Content-Type: application/json", "--data-binary", body])
        .args(["-w", "\n%{http_code} %{http_version}"])
        .args(flags)
        .arg(url(env, "/validate/operator-state"))
        .output()
        .expect("curl runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A review of a delete of the leader Lease in the operator's namespace `op_ns`.
fn leader_delete(op_ns: &str) -> Value {
    let lease =
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "bloodraven-leader"}});
    let mut r = review(LEASES, "DELETE", None, Some(lease));
    r["request"]["namespace"] = json!(op_ns);
    r
}

/// Opens a TLS connection to the webhook (rustls, HTTP/1.1 in ALPN).
async fn tls_connect(env: &Env) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(&env.webhook.tls.ca).unwrap();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", env.webhook.port)).await.unwrap();
    connector.connect(rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap()
}

/// Trickles `head` then `body` one byte a second; how long until the
/// webhook ended the connection (or answered), and what it sent.
async fn trickle(env: &Env, bytes: &[u8]) -> (Duration, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let stream = tls_connect(env).await;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let started = Instant::now();
    let bytes = bytes.to_vec();
    let writer = tokio::spawn(async move {
        for b in bytes {
            if wr.write_all(&[b]).await.is_err() || wr.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        // Then hold the connection open, sending nothing.
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut got)).await;
    writer.abort();
    assert!(read.is_ok(), "a trickled request held its connection for 60 s: {}", String::from_utf8_lossy(&got));
    (started.elapsed(), String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn the_listener_answers_garbage_with_errors_and_is_not_held_by_slow_or_many_clients() {
    let env = setup("wha-tls").await;
    let http = https(&env);
    guarded_review(&env).await.expect("the guard answers before the attack");

    // A well-formed review over HTTP/1.1: a verdict.
    let r =
        http.post(url(&env, "/validate/operator-state")).json(&leader_delete(&env.op_ns.name)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["response"]["allowed"], false, "{v}");

    // Garbage: each a 400 with its reason, never a verdict. Found by this
    // attack: every one of these but the first two was answered "allowed".
    let g = json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
                   "metadata": {"name": "g"}, "status": {"activeSite": "pdx", "topologyGeneration": 99}});
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bloodraven-topology-x"}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {
        "bloodraven.shipstream.io/inject": "true", "bloodraven.shipstream.io/group": "g",
        "bloodraven.shipstream.io/instance": "i"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let mut beta = leader_delete(&env.op_ns.name);
    beta["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut wrong_kind = leader_delete(&env.op_ns.name);
    wrong_kind["kind"] = json!("TokenReview");
    let mut no_request = leader_delete(&env.op_ns.name);
    no_request.as_object_mut().unwrap().remove("request");
    let garbage: Vec<(&str, &str, Value)> = vec![
        ("/validate/operator-state", "not JSON", json!("{\"apiVersion\": ")),
        ("/validate/operator-state", "no request", no_request),
        ("/validate/operator-state", "v1beta1", beta),
        ("/validate/operator-state", "another kind", wrong_kind),
        ("/validate/mysqlfailovergroups", "UPDATE without oldObject", review(GROUPS, "UPDATE", Some(g.clone()), None)),
        ("/validate/mysqlfailovergroups", "UPDATE without object", review(GROUPS, "UPDATE", None, Some(g.clone()))),
        (
            "/validate/mysqlfailovergroups",
            "a ConfigMap as the group",
            review(GROUPS, "UPDATE", Some(cm.clone()), Some(g.clone())),
        ),
        // (A CREATE is reviewed there now: a `-by` annotation on a new group.)
        ("/validate/mysqlfailovergroups", "a DELETE", review(GROUPS, "DELETE", None, Some(g.clone()))),
        (
            "/validate/operator-state",
            "a resource it does not guard",
            review(("", "pods", "Pod"), "DELETE", None, Some(cm.clone())),
        ),
        ("/validate/operator-state", "a DELETE without oldObject", review(LEASES, "DELETE", None, None)),
        (
            "/validate/mysqldatabases",
            "a group sent as a database",
            review(GROUPS, "UPDATE", Some(g.clone()), Some(g.clone())),
        ),
        ("/mutate/jobs", "a Pod sent as a Job", review(JOBS, "CREATE", Some(pod), None)),
        ("/mutate/jobs", "a Job review without the Job", review(JOBS, "CREATE", None, None)),
        (
            "/mutate/jobs",
            "a Job DELETE",
            review(JOBS, "DELETE", None, Some(json!({"apiVersion": "batch/v1", "kind": "Job"}))),
        ),
    ];
    for (path, what, body) in garbage {
        let body = if let Value::String(s) = &body { s.clone() } else { body.to_string() };
        let r = http.post(url(&env, path)).header("content-type", "application/json").body(body).send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 400, "{what} to {path}: {status} {text}");
        assert!(!text.contains("\"allowed\":true"), "{what}: {text}");
    }
    // A DELETE with oldObject only is the real shape of a delete: a verdict.
    let db = json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase", "metadata": {"name": "d"},
                    "spec": {"deploymentClients": [{"namespace": env.ns.name, "serviceAccount": "x"}]}});
    let mut delete = review(("bloodraven.shipstream.io", "mysqldatabases", "MysqlDatabase"), "DELETE", None, Some(db));
    delete["request"]["namespace"] = json!(env.ns.name);
    let r = http.post(url(&env, "/validate/mysqldatabases")).json(&delete).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["response"]["allowed"], false, "mallory lacks the verb: {v}");

    // Oversized: 413 (or the connection ends), never read whole.
    let huge = format!("{{\"pad\": \"{}\"}}", "a".repeat(6 * 1024 * 1024));
    match http.post(url(&env, "/validate/operator-state")).body(huge).send().await {
        Ok(r) => assert_eq!(r.status(), 413),
        Err(e) => eprintln!("oversized: the connection ended: {e}"),
    }

    // HTTP/2: with prior knowledge it is not spoken; offered by ALPN, HTTP/1.1 is chosen.
    let body = leader_delete(&env.op_ns.name).to_string();
    {
        // Prior knowledge over TLS: the client preface and an empty SETTINGS frame, sent blind.
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut h2 = tls_connect(&env).await;
        h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap();
        h2.flush().await.unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), h2.read_to_end(&mut got)).await;
        let got = String::from_utf8_lossy(&got);
        eprintln!("HTTP/2 with prior knowledge: {got:?}");
        assert!(read.is_ok(), "an HTTP/2 preface held its connection: {got}");
        assert!(
            !got.contains("\"allowed\"") && !got.contains(" 200 "),
            "HTTP/2 with prior knowledge got a verdict: {got}"
        );
    }
    let (ok, out) = curl(&env, &["--http2"], &body);
    assert!(ok && out.trim_end().ends_with("200 1.1") && out.contains("\"allowed\":false"), "ALPN: {out}");
    let (ok, out) = curl(&env, &["--http1.1"], &body);
    assert!(ok && out.trim_end().ends_with("200 1.1"), "HTTP/1.1: {out}");

    // TLS 1.0 and 1.1 offered (the client allowed to, SECLEVEL=0): the server refuses; 1.2 and 1.3 work.
    for old in ["-tls1", "-tls1_1"] {
        let (ok, out) = s_client(&env, &[old, "-cipher", "DEFAULT:@SECLEVEL=0"]);
        // The server refuses with an alert (rustls sent handshake_failure to a TLS 1.0 hello).
        assert!(
            !ok && (out.contains("alert protocol version") || out.contains("alert handshake failure")),
            "{old}: {out}"
        );
    }
    for new in ["-tls1_2", "-tls1_3"] {
        let (_, out) = s_client(&env, &[new]);
        assert!(out.contains("Verification: OK") || out.contains("Verify return code: 0"), "{new}: {out}");
    }

    // Plaintext HTTP to the TLS port: the connection ends, nothing answers in HTTP.
    let mut plain = TcpStream::connect(("127.0.0.1", env.webhook.port)).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    plain
        .write_all(
            format!(
                "POST /validate/operator-state HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(!String::from_utf8_lossy(&got).contains("HTTP/1.1 200"), "plaintext answered: {got:?}");

    // Slowloris: headers, then a body, trickled a byte a second, while the
    // API server's reviews go on; each connection is cut off.
    let head = b"POST /validate/operator-state HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n".to_vec();
    let mut slow_body = format!(
        "POST /validate/operator-state HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    let head_len = slow_body.len();
    slow_body.extend_from_slice(body.as_bytes());
    let slow = {
        let env = &env;
        let fast_head = async move {
            // The body's own head goes at once, then its body a byte a second.
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let stream = tls_connect(env).await;
            let (mut rd, mut wr) = tokio::io::split(stream);
            let started = Instant::now();
            let rest = slow_body[head_len..].to_vec();
            wr.write_all(&slow_body[..head_len]).await.unwrap();
            let writer = tokio::spawn(async move {
                for b in rest {
                    if wr.write_all(&[b]).await.is_err() || wr.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            let mut got = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut got)).await;
            writer.abort();
            assert!(read.is_ok(), "a trickled body held its connection for 60 s");
            (started.elapsed(), String::from_utf8_lossy(&got).into_owned())
        };
        futures::future::join(trickle(env, &head), fast_head)
    };
    let probes = async {
        let mut answered = 0;
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            guarded_review(&env).await.expect("reviews go on during a slowloris");
            answered += 1;
        }
        answered
    };
    let (((head_took, head_got), (body_took, body_got)), answered) = tokio::join!(slow, probes);
    assert_eq!(answered, 10);
    assert!(head_took < Duration::from_secs(25), "trickled headers held {head_took:?}: {head_got}");
    assert!(!head_got.contains("\"allowed\""), "{head_got}");
    assert!(body_took < Duration::from_secs(25), "a trickled body held {body_took:?}: {body_got}");
    assert!(!body_got.contains("\"allowed\""), "{body_got}");

    // A flood: 600 connections that never finish a handshake. While they
    // are held the API server's reviews may fail, but only closed (the
    // guard fails closed; `guarded_review` panics on an "allowed"); once the
    // handshake timeout ends them, reviews are answered again.
    let flood: Vec<TcpStream> =
        (0..600).filter_map(|_| TcpStream::connect(("127.0.0.1", env.webhook.port)).ok()).collect();
    eprintln!("flood: {} connections open", flood.len());
    let during = guarded_review(&env).await;
    eprintln!("a review during the flood: {during:?}");
    if let Err(m) = &during {
        assert!(m.contains("failed calling webhook"), "during the flood, a refusal that is not the webhook's own: {m}");
    }
    wait_for("reviews answered while the flood is held", Duration::from_secs(30), || guarded_review(&env)).await;
    drop(flood);
    guarded_review(&env).await.expect("reviews after the flood");
    alive(&env);
}

// ---------------------------------------------------------------------------
// 2. A namespace admin and deploymentClients.
// ---------------------------------------------------------------------------

fn database(name: &str, clients: &Value) -> Value {
    json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase", "metadata": {"name": name},
           "spec": {"failoverGroupRef": {"name": "nowhere"}, "schema": "counter", "deploymentClients": clients}})
}

#[tokio::test]
async fn a_namespace_admin_cannot_move_deployment_clients_by_apply_replace_owners_or_re_create() {
    let env = setup("wha-tenant").await;
    let (ns, ns2) = (env.ns.name.clone(), env.ns2.name.clone());
    // Tenant A's admin: the built-in admin ClusterRole in its namespace, and
    // every ordinary verb on MysqlDatabases (not set-deployment-clients).
    let tenant = as_sa(&env.cluster, &ns, "tenant-admin").await;
    bind_cluster_role(&env.cluster, &ns, "admin", sa_subject(&ns, "tenant-admin")).await;
    let verbs: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];
    role(
        &env.cluster,
        &ns,
        "databases",
        ("bloodraven.shipstream.io", &["mysqldatabases"], verbs),
        sa_subject(&ns, "tenant-admin"),
    )
    .await;
    let dbs = Api::<MysqlDatabase>::namespaced(tenant.clone(), &ns);
    let raw = |v: Value| serde_json::from_value::<MysqlDatabase>(v).unwrap();
    let pp = PostParams::default();
    let own = json!([{"namespace": ns, "serviceAccount": "deployer"}]);
    let theirs = json!([{"namespace": ns2, "serviceAccount": "their-deployer"}]);

    eventually("the tenant admin creates a database without clients", || async {
        dbs.create(&pp, &raw(database("app", &json!([])))).await
    })
    .await;
    // The admin cannot grant itself the verb: RBAC refuses a Role with a verb it does not hold.
    let self_grant = Role {
        metadata: ObjectMeta { name: Some("self-grant".into()), ..ObjectMeta::default() },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["bloodraven.shipstream.io".into()]),
            resources: Some(vec!["mysqldatabases".into()]),
            verbs: vec!["set-deployment-clients".into()],
            ..PolicyRule::default()
        }]),
    };
    let m = refusal(Api::<Role>::namespaced(tenant.clone(), &ns).create(&pp, &self_grant).await);
    assert!(m.contains("escalat") || m.contains("forbidden"), "{m}");

    // Server-side apply, with and without force, and a replace (PUT).
    let apply = |clients: &Value| Patch::Apply(database("app", clients));
    for force in [false, true] {
        let mut params = PatchParams::apply("tenant-tool");
        params.force = force;
        let m = refusal(dbs.patch("app", &params, &apply(&own)).await);
        assert!(m.contains("set-deployment-clients"), "apply (force {force}): {m}");
    }
    let m = refused_replace(&dbs, "app", |db| {
        db.spec.deployment_clients = serde_json::from_value(own.clone()).unwrap();
    })
    .await;
    assert!(m.contains("set-deployment-clients"), "replace: {m}");
    let m = refusal(
        dbs.patch(
            "app",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
        {"op": "add", "path": "/spec/deploymentClients", "value": own}]))
                .unwrap(),
            ),
        )
        .await,
    );
    assert!(m.contains("set-deployment-clients"), "JSON patch: {m}");

    // A cluster admin grants the verb in tenant A's namespace only.
    role(
        &env.cluster,
        &ns,
        "clients",
        ("bloodraven.shipstream.io", &["mysqldatabases"], &["set-deployment-clients"]),
        sa_subject(&ns, "tenant-admin"),
    )
    .await;
    eventually("the tenant admin applies its own namespace's client", || async {
        dbs.patch("app", &PatchParams::apply("tenant-tool"), &apply(&own)).await
    })
    .await;
    // Naming tenant B's namespace: by apply, replace, a new database, or delete and re-create.
    let both = json!([{"namespace": ns, "serviceAccount": "deployer"}, {"namespace": ns2, "serviceAccount": "their-deployer"}]);
    let m = refusal(dbs.patch("app", &PatchParams::apply("tenant-tool").force(), &apply(&both)).await);
    assert!(m.contains(&format!("\"{ns2}\"")), "apply naming tenant B: {m}");
    let m = refused_replace(&dbs, "app", |db| {
        db.spec.deployment_clients = serde_json::from_value(both.clone()).unwrap();
    })
    .await;
    assert!(m.contains(&format!("\"{ns2}\"")), "replace naming tenant B: {m}");
    let m = refusal(dbs.create(&pp, &raw(database("borrowed", &theirs))).await);
    assert!(m.contains(&format!("\"{ns2}\"")), "a new database naming tenant B: {m}");
    // A changed owner reference on a database with clients needs the verb: held here (granted).
    // Delete and re-create under the same name with tenant B's client: the delete is the
    // tenant's right (the verb in its namespace), the re-create is not.
    dbs.delete("app", &DeleteParams::default()).await.expect("the tenant may delete its own database with the verb");
    wait_for("the database to go", Duration::from_secs(30), || async {
        match dbs.get_opt("app").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let m = refusal(dbs.create(&pp, &raw(database("app", &theirs))).await);
    assert!(m.contains(&format!("\"{ns2}\"")), "re-created naming tenant B: {m}");
    assert!(dbs.get_opt("app").await.unwrap().is_none());

    // Tenant B's admin (no verb anywhere) against tenant A's new database: nothing to reach.
    let b = as_sa(&env.cluster, &ns2, "b-admin").await;
    bind_cluster_role(&env.cluster, &ns2, "admin", sa_subject(&ns2, "b-admin")).await;
    role(
        &env.cluster,
        &ns2,
        "databases",
        ("bloodraven.shipstream.io", &["mysqldatabases"], verbs),
        sa_subject(&ns2, "b-admin"),
    )
    .await;
    let b_dbs = Api::<MysqlDatabase>::namespaced(b, &ns2);
    let claim = json!([{"namespace": ns, "serviceAccount": "deployer"}]);
    let m = eventually("tenant B's admin is refused by the webhook (not by RBAC)", || async {
        match b_dbs.create(&pp, &raw(database("steal", &claim))).await {
            Err(kube::Error::Api(s)) if s.message.contains("set-deployment-clients") => Ok(s.message),
            other => Err(kube::Error::Service(format!("{other:?}").into())),
        }
    })
    .await;
    assert!(m.contains(&format!("\"{ns2}\"")) && m.contains(&format!("\"{ns}\"")), "{m}");

    // Owner references on a database with clients, by a user with update but not the verb.
    let app = dbs.create(&pp, &raw(database("app", &own))).await.expect("re-created with its own client");
    let plain = as_sa(&env.cluster, &ns, "plain-editor").await;
    role(
        &env.cluster,
        &ns,
        "edit",
        ("bloodraven.shipstream.io", &["mysqldatabases"], &["get", "update", "patch"]),
        sa_subject(&ns, "plain-editor"),
    )
    .await;
    let plain_dbs = Api::<MysqlDatabase>::namespaced(plain, &ns);
    let owner = json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase", "metadata": {"name": "app",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-0000000000aa"}]}});
    let m = eventually("an owner reference by apply is refused", || async {
        match plain_dbs.patch("app", &PatchParams::apply("plain").force(), &Patch::Apply(&owner)).await {
            Err(kube::Error::Api(s)) if s.message.contains("set-deployment-clients") => Ok(s.message),
            other => Err(kube::Error::Service(format!("{other:?}").into())),
        }
    })
    .await;
    assert!(m.contains("set-deployment-clients"), "{m}");
    let stored = dbs.get("app").await.unwrap();
    assert!(stored.metadata.owner_references.is_none(), "{:?}", stored.metadata.owner_references);
    assert_eq!(stored.metadata.uid, app.metadata.uid);
}

// ---------------------------------------------------------------------------
// 3 and 5. Injection paths, and the webhook killed mid-traffic.
// ---------------------------------------------------------------------------

use bloodraven_e2e::webhook::{InjectEnv as Inject, inject_env as inject_setup};

fn annotations(env: &Inject) -> Value {
    json!({"bloodraven.shipstream.io/inject": "true", "bloodraven.shipstream.io/group": env.pods.group,
           "bloodraven.shipstream.io/instance": "counter-app", "bloodraven.shipstream.io/ttl": "30"})
}

fn pod_spec() -> Value {
    json!({"serviceAccountName": "deployer", "automountServiceAccountToken": false, "restartPolicy": "Never",
           "containers": [{"name": "migrate", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
                           "command": ["/bin/sh", "-c", "true"]}]})
}

fn annotated_job(env: &Inject, name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "annotations": annotations(env)},
           "spec": {"template": {"spec": pod_spec()}}})
}

fn jobs(env: &Inject) -> Api<Job> {
    Api::namespaced(env.pods.cluster.client.clone(), &env.pods.ns.name)
}

async fn create(env: &Inject, manifest: &Value, dry_run: bool) -> Result<Job, kube::Error> {
    let pp = PostParams { dry_run, ..PostParams::default() };
    jobs(env).create(&pp, &serde_json::from_value(manifest.clone()).unwrap()).await
}

fn inits(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.init_containers.iter().flatten().map(|c| c.name.clone()).collect()
}

fn injected_once(job: &Job) -> Result<(), String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let names = inits(job);
    let command = pod.containers[0].command.clone().unwrap_or_default();
    let wrapped = command.iter().filter(|c| c.as_str() == "exec").count();
    if names == ["bloodraven-sidecar"] && wrapped == 1 {
        Ok(())
    } else {
        Err(format!("inits {names:?}, command {command:?}"))
    }
}

#[tokio::test]
async fn every_injection_path_a_tenant_can_take_is_injected_once_or_refused_and_a_killed_webhook_fails_closed() {
    let mut env = inject_setup("wha-inject").await;
    let ns = env.pods.ns.name.clone();

    // generateName: injected.
    let mut generated = annotated_job(&env, "");
    generated["metadata"].as_object_mut().unwrap().remove("name");
    generated["metadata"]["generateName"] = json!("migrate-");
    injected_once(&create(&env, &generated, true).await.unwrap()).unwrap();

    // Annotations on the Pod template instead of the Job: refused, saying where they go
    // (they were silently ignored: the migration would have run unfenced).
    let mut on_template = annotated_job(&env, "on-template");
    on_template["metadata"]["annotations"] = json!({});
    on_template["spec"]["template"]["metadata"] = json!({"annotations": annotations(&env)});
    let m = refusal(create(&env, &on_template, true).await);
    assert!(m.contains("Job's metadata.annotations") && m.contains("jobTemplate"), "{m}");

    // The annotation added by an update after create: refused (the template is immutable),
    // never a Job that says "inject" and runs without the sidecar.
    let mut plain = annotated_job(&env, "plain-then-annotated");
    plain["metadata"]["annotations"] = json!({});
    plain["spec"]["suspend"] = json!(true);
    create(&env, &plain, false).await.expect("an un-annotated Job is left alone");
    let m = refusal(
        jobs(&env)
            .patch(
                "plain-then-annotated",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": annotations(&env)}})),
            )
            .await,
    );
    assert!(m.contains("create it again"), "{m}");
    let stored = jobs(&env).get("plain-then-annotated").await.unwrap();
    assert!(
        stored.metadata.annotations.unwrap_or_default().is_empty()
            && inits(&jobs(&env).get("plain-then-annotated").await.unwrap()).is_empty()
    );
    // Other updates of Jobs (annotated or not) never wait on the webhook.
    jobs(&env)
        .patch(
            "plain-then-annotated",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();

    // A container of the Job named like the sidecar: refused with the reason (it would collide).
    let mut named = annotated_job(&env, "named");
    named["spec"]["template"]["spec"]["containers"][0]["name"] = json!("bloodraven-sidecar");
    let m = refusal(create(&env, &named, true).await);
    assert!(m.contains("rename it"), "{m}");
    // Found by this attack: a look-alike volume was taken for ours (a Secret handing the
    // sidecar another token; a hostPath sharing the socket with other Pods).
    let secret = Api::<Secret>::namespaced(env.pods.cluster.client.clone(), &ns);
    secret
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "borrowed-token"}, "stringData": {"token": "not-mine"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    for volume in [
        json!({"name": "bloodraven-token", "secret": {"secretName": "borrowed-token"}}),
        json!({"name": "bloodraven-run", "hostPath": {"path": "/tmp"}}),
    ] {
        let mut j = annotated_job(&env, "look-alike-volume");
        j["spec"]["template"]["spec"]["volumes"] = json!([volume]);
        let m = refusal(create(&env, &j, true).await);
        assert!(m.contains("is not the one this webhook injects"), "{volume}: {m}");
    }

    // A copy of an injected Job, `kubectl get -o yaml` edited the way `kubectl create job
    // --from` would: name changed, selector and controller-uid labels stripped, status gone.
    let injected = create(&env, &annotated_job(&env, "original"), false).await.unwrap();
    injected_once(&injected).unwrap();
    let mut copy = serde_json::to_value(&injected).unwrap();
    copy["metadata"] = json!({"name": "copied", "annotations": injected.metadata.annotations});
    copy["spec"].as_object_mut().unwrap().remove("selector");
    copy["spec"]["template"]["metadata"]["labels"] = json!({"app": "migrate"});
    copy.as_object_mut().unwrap().remove("status");
    injected_once(&create(&env, &copy, true).await.unwrap()).unwrap();

    // A CronJob whose jobTemplate is annotated: the Job the CronJob controller creates is injected.
    let cron: CronJob =
        serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
        "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid", "jobTemplate": {
            "metadata": {"annotations": annotations(&env)}, "spec": {"template": {"spec": pod_spec()}}}}}))
        .unwrap();
    let crons = Api::<CronJob>::namespaced(env.pods.cluster.client.clone(), &ns);
    crons.create(&PostParams::default(), &cron).await.unwrap();
    let from_cron = wait_for("the CronJob controller to create a Job", Duration::from_secs(150), || async {
        let list = jobs(&env).list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|j| j.metadata.owner_references.iter().flatten().any(|o| o.kind == "CronJob" && o.name == "nightly"))
            .ok_or_else(|| "no Job yet".to_owned())
    })
    .await;
    injected_once(&from_cron).unwrap();
    crons.patch("nightly", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    // A CronJob whose Pod template (not its jobTemplate) is annotated: refused at the Job,
    // so the CronJob controller's create fails loudly instead of running unfenced.
    let mut misplaced = annotated_job(&env, "from-misplaced-cron");
    misplaced["metadata"]["annotations"] = json!({"cronjob.kubernetes.io/instantiate": "manual"});
    misplaced["spec"]["template"]["metadata"] = json!({"annotations": annotations(&env)});
    refusal(create(&env, &misplaced, true).await);

    // Kill -9 mid-traffic: every annotated create is injected or refused, never created bare;
    // after a restart everything works without manual action.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = env.pods.cluster.client.clone();
    let manifest = annotated_job(&env, "traffic");
    let traffic = {
        let stop = stop.clone();
        let ns = ns.clone();
        tokio::spawn(async move {
            let api = Api::<Job>::namespaced(client, &ns);
            let dry = PostParams { dry_run: true, ..PostParams::default() };
            let job: Job = serde_json::from_value(manifest).unwrap();
            let (mut injected, mut refused_down) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match api.create(&dry, &job).await {
                    Ok(j) => {
                        injected_once(&j)
                            .unwrap_or_else(|e| panic!("an annotated Job created without the sidecar: {e}"));
                        injected += 1;
                    }
                    Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => refused_down += 1,
                    Err(e) => panic!("an unexpected answer mid-traffic: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (injected, refused_down)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = env.webhook.pid().unwrap();
    env.webhook.kill().await;
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/status")).exists() || {
            let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            s.contains("zombie")
        }
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let down = refusal(create(&env, &annotated_job(&env, "while-down"), false).await);
    assert!(down.contains("failed calling webhook"), "fails closed: {down}");
    assert!(jobs(&env).get_opt("while-down").await.unwrap().is_none());
    env.webhook.restart().await;
    let after = wait_for("an annotated Job injected after the restart", Duration::from_secs(30), || async {
        create(&env, &annotated_job(&env, "after-restart"), false).await.map_err(|e| e.to_string())
    })
    .await;
    injected_once(&after).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (injected_n, refused_n) = traffic.await.unwrap();
    eprintln!("mid-traffic: {injected_n} injected, {refused_n} refused while down");
    assert!(injected_n > 0 && refused_n > 0, "traffic saw both: {injected_n} injected, {refused_n} refused");
}

// ---------------------------------------------------------------------------
// 4. The operator namespace's admin against the operator's state.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_operator_namespaces_admin_cannot_delete_re_create_or_collect_the_operators_state() {
    let env = setup("wha-state").await;
    let op = env.op_ns.name.clone();
    let operator = as_sa(&env.cluster, &op, "bloodraven-operator").await;
    let admin = as_sa(&env.cluster, &op, "ns-admin").await;
    bind_cluster_role(&env.cluster, &op, "admin", sa_subject(&op, "ns-admin")).await;
    role(&env.cluster, &op, "leases", ("coordination.k8s.io", &["leases"], &["*"]), sa_subject(&op, "ns-admin")).await;
    let pp = PostParams::default();
    let label = json!({"app.kubernetes.io/managed-by": "bloodraven"});
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": label}, "data": {"activeSite": "iad", "topologyGeneration": "1"}})).unwrap()
    };
    let lease =
        |name: &str| -> Lease { serde_json::from_value(json!({"metadata": {"name": name, "labels": label}})).unwrap() };
    let record = "bloodraven-topology-0123456789abcdef";
    let op_cms = Api::<ConfigMap>::namespaced(operator.clone(), &op);
    let op_leases = Api::<Lease>::namespaced(operator.clone(), &op);
    op_cms.create(&pp, &cm(record)).await.unwrap();
    op_leases.create(&pp, &lease("bloodraven-deploy-abc-migration")).await.unwrap();
    op_leases.create(&pp, &lease("bloodraven-tombstone-abc-def")).await.unwrap();
    op_leases.create(&pp, &lease("bloodraven-leader")).await.unwrap();
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &op);
    let leases = Api::<Lease>::namespaced(admin.clone(), &op);
    // The admin's own objects with the same label, to show what a collection would take.
    eventually("the admin creates its own ConfigMap", || async { cms.create(&pp, &cm("app-config")).await }).await;
    eventually("the admin creates its own Lease", || async { leases.create(&pp, &lease("app-lock")).await }).await;

    // deletecollection by label selector, and with no selector at all: refused; nothing of the operator's goes.
    let by_label = ListParams::default().labels("app.kubernetes.io/managed-by=bloodraven");
    let m = refusal(cms.delete_collection(&DeleteParams::default(), &by_label).await);
    assert!(m.contains("decision record"), "{m}");
    let m = refusal(leases.delete_collection(&DeleteParams::default(), &ListParams::default()).await);
    assert!(m.contains("bloodraven-"), "{m}");
    for name in ["bloodraven-deploy-abc-migration", "bloodraven-tombstone-abc-def", "bloodraven-leader"] {
        assert!(op_leases.get_opt(name).await.unwrap().is_some(), "{name} survived the collection");
    }
    assert!(op_cms.get_opt(record).await.unwrap().is_some());
    // A collection is reviewed object by object: the admin's own objects did go.
    assert!(cms.get_opt("app-config").await.unwrap().is_none(), "the admin's own ConfigMap was collected");
    assert!(leases.get_opt("app-lock").await.unwrap().is_none(), "the admin's own Lease was collected");
    // Deletes with each propagation policy: refused.
    for policy in [
        kube::api::PropagationPolicy::Orphan,
        kube::api::PropagationPolicy::Background,
        kube::api::PropagationPolicy::Foreground,
    ] {
        let dp = DeleteParams { propagation_policy: Some(policy), ..DeleteParams::default() };
        refusal(cms.delete(record, &dp).await);
        refusal(leases.delete("bloodraven-tombstone-abc-def", &dp).await);
    }
    // Replace (PUT), apply, a finalizer, an owner reference: all writes, all refused.
    let m = refused_replace(&cms, record, |stored| {
        stored.data.get_or_insert_default().insert("activeSite".into(), "pdx".into());
    })
    .await;
    assert!(m.contains("decision record"), "replace of the decision record: {m}");
    let apply =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": record}, "data": {"activeSite": "pdx"}});
    refusal(cms.patch(record, &PatchParams::apply("admin").force(), &Patch::Apply(&apply)).await);
    refusal(
        cms.patch(
            record,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
        )
        .await,
    );
    let owner = cms.create(&pp, &cm("app-config")).await.unwrap();
    let owner_ref = json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "app-config", "uid": owner.metadata.uid}]}});
    refusal(cms.patch(record, &PatchParams::default(), &Patch::Merge(&owner_ref)).await);
    // There is no /status to write around the guard: the API server has none for these
    // (RBAC answers first: 403 for a subresource no role names).
    match cms.patch_status(record, &PatchParams::default(), &Patch::Merge(json!({"data": {"activeSite": "pdx"}}))).await
    {
        Err(kube::Error::Api(s)) => assert!(s.code == 403 || s.code == 404, "{s:?}"),
        other => panic!("a /status write of a ConfigMap: {other:?}"),
    }
    match leases
        .patch_status(
            "bloodraven-leader",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "x"}})),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert!(s.code == 403 || s.code == 404, "{s:?}"),
        other => panic!("a /status write of a Lease: {other:?}"),
    }
    assert_eq!(op_cms.get(record).await.unwrap().data.unwrap()["activeSite"], "iad");

    // Delete and re-create under the same name: once the operator has deleted its
    // record (or tombstone), the name is still the operator's.
    op_cms.delete(record, &DeleteParams::default()).await.unwrap();
    op_leases.delete("bloodraven-tombstone-abc-def", &DeleteParams::default()).await.unwrap();
    let m = refusal(cms.create(&pp, &cm(record)).await);
    assert!(m.contains("planned failover"), "{m}");
    refusal(leases.create(&pp, &lease("bloodraven-tombstone-abc-def")).await);
    // The key Secret too, and its collection.
    let key: Secret =
        serde_json::from_value(json!({"metadata": {"name": "bloodraven-record-key", "labels": label}})).unwrap();
    Api::<Secret>::namespaced(operator.clone(), &op).create(&pp, &key).await.unwrap();
    let secrets = Api::<Secret>::namespaced(admin.clone(), &op);
    refusal(secrets.delete_collection(&DeleteParams::default(), &by_label).await);
    assert!(Api::<Secret>::namespaced(operator, &op).get_opt("bloodraven-record-key").await.unwrap().is_some());
    // The leader Lease: deleted by nobody, also not as part of a collection.
    refusal(leases.delete("bloodraven-leader", &DeleteParams::default()).await);
    assert!(op_leases.get_opt("bloodraven-leader").await.unwrap().is_some());
    // The admin's own objects were its to delete: the owner ConfigMap goes, and the
    // record's absence of an owner reference means nothing follows it.
    cms.delete("app-config", &DeleteParams::default()).await.unwrap();
    let _ = &env.ns2;
}
