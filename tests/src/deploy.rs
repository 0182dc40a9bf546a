//! Deploy-API fixtures: a TLS certificate for the operator, operators with
//! the deploy API on, deploy clients (ServiceAccounts with real projected
//! tokens), and an HTTPS client that trusts only the test CA.

use std::path::{Path, PathBuf};
use std::process::Command;

use bloodraven_api::v1alpha1::{DeploymentClient, FailoverGroupRef, MysqlDatabase, MysqlDatabaseSpec};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::operator::LeaderTimings;
use crate::{Cluster, Operator, TestNamespace, free_port};

/// A CA and a server certificate for 127.0.0.1 signed by it.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// CA certificate (what clients trust).
    pub ca: PathBuf,
    /// Server certificate.
    pub cert: PathBuf,
    /// Server key.
    pub key: PathBuf,
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().expect("openssl is installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Makes a CA and a server certificate (EC P-256) for 127.0.0.1 and
/// localhost in `dir`.
pub fn tls_files(dir: &Path) -> TlsFiles {
    tls_files_for(dir, "IP:127.0.0.1,DNS:localhost")
}

/// Makes a CA and a server certificate (EC P-256) in `dir` whose
/// subjectAltName is `sans` (OpenSSL syntax, e.g. `DNS:a.b.svc,IP:10.0.0.1`).
pub fn tls_files_for(dir: &Path, sans: &str) -> TlsFiles {
    std::fs::create_dir_all(dir).unwrap();
    let p = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", &p("ca.key"), "-out", &p("ca.crt"), "-days", "2", "-subj", "/CN=bloodraven-e2e-ca"],
        ]
        .concat(),
    );
    leaf(dir, sans, "tls")
}

/// A new key and certificate `STEM.key`, `STEM.crt` for `sans`, signed by
/// the CA [`tls_files_for`] made in `dir` (a rotation keeps the CA).
pub fn leaf(dir: &Path, sans: &str, stem: &str) -> TlsFiles {
    let p = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let (key, csr, crt) = (p(&format!("{stem}.key")), p(&format!("{stem}.csr")), p(&format!("{stem}.crt")));
    openssl(&[&["req"][..], &ec, &["-keyout", &key, "-out", &csr, "-subj", "/CN=bloodraven"]].concat());
    std::fs::write(dir.join("san.ext"), format!("subjectAltName={sans}\n")).unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &p("ca.crt"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-out",
        &crt,
        "-days",
        "2",
        "-extfile",
        &p("san.ext"),
    ]);
    TlsFiles { ca: dir.join("ca.crt"), cert: PathBuf::from(crt), key: PathBuf::from(key) }
}

/// An operator with the deploy API on a free port.
pub async fn start_operator(
    cluster: &Cluster,
    ns: &TestNamespace,
    name: &str,
    tls: &TlsFiles,
    timings: LeaderTimings,
) -> (Operator, String) {
    start_operator_with(cluster, ns, name, tls, timings, &[]).await
}

/// As [`start_operator`], with extra flags.
pub async fn start_operator_with(
    cluster: &Cluster,
    ns: &TestNamespace,
    name: &str,
    tls: &TlsFiles,
    timings: LeaderTimings,
    flags: &[String],
) -> (Operator, String) {
    let port = free_port();
    let mut extra = vec![
        "--deploy-api-enabled".to_owned(),
        "--deploy-api-addr".to_owned(),
        format!("127.0.0.1:{port}"),
        "--tls-cert-file".to_owned(),
        tls.cert.to_str().unwrap().to_owned(),
        "--tls-key-file".to_owned(),
        tls.key.to_str().unwrap().to_owned(),
        "--tls-reload-seconds".to_owned(),
        "1".to_owned(),
    ];
    extra.extend_from_slice(flags);
    let op = Operator::start_with(cluster, ns, &ns.name, name, timings, &extra).await;
    // The listener opens once the operator's caches are filled.
    crate::wait_for("the deploy API listener", std::time::Duration::from_secs(60), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map(drop).map_err(|e| e.to_string())
    })
    .await;
    (op, format!("https://127.0.0.1:{port}/deploy/v1"))
}

/// An HTTPS client trusting only `ca`.
pub fn client(ca: &Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Creates ServiceAccount `name` in `namespace` (idempotent).
pub async fn service_account(cluster: &Cluster, namespace: &str, name: &str) {
    let api: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), namespace);
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("failed to create ServiceAccount {namespace}/{name}: {e}"),
    }
}

/// A real projected token of `namespace/name` for `audiences` (empty: the
/// API server's default audience).
pub async fn token(cluster: &Cluster, namespace: &str, name: &str, audiences: &[&str]) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), namespace);
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audiences.iter().map(|a| (*a).to_owned()).collect(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    api.create_token_request(name, &PostParams::default(), &req).await.unwrap().status.unwrap().token
}

/// Creates MysqlDatabase `name` in `namespace` on `group` with `clients`.
pub async fn database(cluster: &Cluster, namespace: &str, name: &str, group: &str, clients: &[(&str, &str)]) {
    let api: Api<MysqlDatabase> = Api::namespaced(cluster.client.clone(), namespace);
    let db = MysqlDatabase::new(
        name,
        MysqlDatabaseSpec {
            failover_group_ref: FailoverGroupRef { name: group.into() },
            schema: "counter".into(),
            deployment_clients: clients
                .iter()
                .map(|(ns, sa)| DeploymentClient { namespace: (*ns).into(), service_account: (*sa).into() })
                .collect(),
        },
    );
    api.create(&PostParams::default(), &db).await.unwrap();
}

/// Waits up to `timeout` until group `group`'s `status.instanceClaims` gives
/// instance `name` to namespace `namespace`. The operator writes the claim a
/// moment after the MysqlDatabase appears; until then the webhook refuses a
/// Job for it ("no MysqlDatabase named … is accepted"), so a test that
/// creates a Job right after [`database`] waits for this first (a CI run
/// under load created one in that moment).
pub async fn wait_claimed(cluster: &Cluster, group: &str, namespace: &str, name: &str, timeout: std::time::Duration) {
    let groups = cluster.groups();
    let databases = kube::Api::<bloodraven_api::v1alpha1::MysqlDatabase>::namespaced(cluster.client.clone(), namespace);
    crate::wait_for(&format!("group {group} to accept MysqlDatabase {namespace}/{name}"), timeout, || async {
        let g = groups.get(group).await.map_err(|e| e.to_string())?;
        let claims = g.status.map(|s| s.instance_claims).unwrap_or_default();
        if claims.iter().any(|c| c.instance == name && c.namespace == namespace) {
            Ok(())
        } else {
            // What the operator last said of the database, for the failure message.
            let said = match databases.get_opt(name).await {
                Ok(Some(db)) => format!("{:?}", db.status.map(|s| s.conditions).unwrap_or_default()),
                other => format!("{other:?}"),
            };
            Err(format!("claims: {claims:?}; the database's conditions: {said}"))
        }
    })
    .await;
}

/// A response: status and JSON body (`null` when empty or not JSON).
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: serde_json::Value,
}

/// Sends `method url` with a bearer token and an optional JSON body, and
/// checks the answer against `docs/deploy-api.openapi.yaml` (status
/// documented for the operation, body valid against its schema).
pub async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> Reply {
    let mut req = http.request(method.clone(), url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let reply = Reply { status, body: serde_json::from_str(&text).unwrap_or(serde_json::Value::Null) };
    check_contract(&method, url, status, &text, &reply.body);
    reply
}

/// As [`call`], asked again (for up to 30 s) while the answer is `503
/// not_leader`: for tests about something other than leadership, on a
/// loaded two-core machine where the operator's short test Lease can move
/// between two requests.
pub async fn call_leader(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> Reply {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let reply = call(http, method.clone(), url, token, body.clone()).await;
        if reply.status != 503 || std::time::Instant::now() >= until {
            return reply;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

fn contract() -> &'static serde_json::Value {
    static CONTRACT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    CONTRACT.get_or_init(|| {
        let text = std::fs::read_to_string(crate::repo_root().join("docs/deploy-api.openapi.yaml")).unwrap();
        serde_saphyr::from_str(&text).unwrap()
    })
}

/// Inlines every local `$ref` (the contract has no cycles).
fn resolve(v: &serde_json::Value, root: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::String(r)) = map.get("$ref") {
                let target = root.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling $ref {r}"));
                return resolve(target, root);
            }
            serde_json::Value::Object(map.iter().map(|(k, v)| (k.clone(), resolve(v, root))).collect())
        }
        serde_json::Value::Array(items) => serde_json::Value::Array(items.iter().map(|v| resolve(v, root)).collect()),
        other => other.clone(),
    }
}

/// Panics unless the contract documents `status` for this call and `body` fits its schema.
pub fn check_contract(method: &reqwest::Method, url: &str, status: u16, text: &str, body: &serde_json::Value) {
    let path = url.split("/deploy/v1/groups/").nth(1).unwrap_or_default();
    let template = match (path.split('/').count(), path.ends_with("/watch")) {
        (1, _) => "/deploy/v1/groups/{group}",
        (2, _) => "/deploy/v1/groups/{group}/leases",
        (4, _) => "/deploy/v1/groups/{group}/leases/{kind}/{operationId}",
        (5, true) => "/deploy/v1/groups/{group}/leases/{kind}/{operationId}/watch",
        _ => return, // not an API path: the router's 404 fallback
    };
    let root = contract();
    let op = &root["paths"][template][method.as_str().to_ascii_lowercase()];
    assert!(!op.is_null(), "{method} {template} is not in the contract");
    let response = resolve(&op["responses"][status.to_string()], root);
    assert!(!response.is_null(), "{method} {template} answered {status}, which the contract does not document: {text}");
    let schema = &response["content"]["application/json"]["schema"];
    if schema.is_null() {
        assert!(text.is_empty(), "{method} {template} {status} must have no body: {text}");
        return;
    }
    let validator = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{method} {template} {status} breaks the contract: {errors:?}\nbody: {text}");
}

/// A real, correctly signed ServiceAccount token whose `exp` has passed:
/// signed with the control plane's service-account key, claims as the API
/// server issues them.
pub fn expired_token(namespace: &str, name: &str, uid: &str) -> String {
    use base64::Engine as _;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
    let claims = serde_json::json!({
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "aud": ["bloodraven-deploy"],
        "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
    });
    let signing_input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
    let key = crate::e2e_dir().join("control-plane/pki/sa.key");
    let mut child = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign", key.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), signing_input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    format!("{signing_input}.{}", b64(&out.stdout))
}

/// One deploy client of one group: its token, and the calls of the deploy
/// API (every answer checked against the contract).
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// HTTPS client trusting the test CA.
    pub http: reqwest::Client,
    /// Deploy API base (`https://127.0.0.1:PORT/deploy/v1`).
    pub base: String,
    /// The group.
    pub group: String,
    /// The caller's ServiceAccount token (audience `bloodraven-deploy`).
    pub token: String,
}

impl Pipeline {
    fn url(&self, path: &str) -> String {
        format!("{}/groups/{}{path}", self.base, self.group)
    }

    /// `GET /groups/{group}`.
    pub async fn get(&self) -> Reply {
        call(&self.http, reqwest::Method::GET, &self.url(""), &self.token, None).await
    }

    /// `POST /groups/{group}/leases`.
    pub async fn post(&self, kind: &str, op: &str, instance: &str, ttl: u32) -> Reply {
        let body = serde_json::json!({"kind": kind, "operationId": op, "instance": instance, "ttlSeconds": ttl});
        call(&self.http, reqwest::Method::POST, &self.url("/leases"), &self.token, Some(body)).await
    }

    /// `PUT /groups/{group}/leases/{kind}/{op}` with `body`.
    pub async fn put_body(&self, kind: &str, op: &str, body: serde_json::Value) -> Reply {
        call(&self.http, reqwest::Method::PUT, &self.url(&format!("/leases/{kind}/{op}")), &self.token, Some(body))
            .await
    }

    /// `PUT` (renewal) with a lease token.
    pub async fn put(&self, kind: &str, op: &str, lease_token: &str) -> Reply {
        self.put_body(kind, op, serde_json::json!({"token": lease_token})).await
    }

    /// `DELETE` (release) with a lease token.
    pub async fn delete(&self, kind: &str, op: &str, lease_token: &str) -> Reply {
        let body = serde_json::json!({"token": lease_token});
        call(&self.http, reqwest::Method::DELETE, &self.url(&format!("/leases/{kind}/{op}")), &self.token, Some(body))
            .await
    }

    /// `POST /groups/{group}/leases/{kind}/{op}/watch` (push revocation) with
    /// a lease token and a wait in seconds.
    pub async fn watch(&self, kind: &str, op: &str, lease_token: &str, wait_seconds: u32) -> Reply {
        let body = serde_json::json!({"token": lease_token, "waitSeconds": wait_seconds});
        let url = self.url(&format!("/leases/{kind}/{op}/watch"));
        call(&self.http, reqwest::Method::POST, &url, &self.token, Some(body)).await
    }

    /// The same calls with another caller's token.
    #[must_use]
    pub fn as_caller(&self, token: String) -> Pipeline {
        Pipeline { token, ..self.clone() }
    }

    /// Waits until `POST` answers `want` (the watch caches behind
    /// authorization may lag a create by a moment); returns that answer.
    pub async fn post_until(&self, want: u16, kind: &str, op: &str, instance: &str, ttl: u32) -> Reply {
        crate::wait_for(&format!("POST {kind} {op} to answer {want}"), std::time::Duration::from_secs(60), || async {
            let r = self.post(kind, op, instance, ttl).await;
            if r.status == want { Ok(r) } else { Err(format!("{r:?}")) }
        })
        .await
    }
}

/// The lease token of a grant.
pub fn token_of(r: &Reply) -> String {
    r.body["token"].as_str().unwrap_or_else(|| panic!("no token in {r:?}")).to_owned()
}

/// The `Ready` condition of MysqlDatabase `namespace/name`, once its reason
/// is `reason`; returns its message.
pub async fn wait_database_reason(cluster: &Cluster, namespace: &str, name: &str, reason: &str) -> String {
    let api: Api<MysqlDatabase> = Api::namespaced(cluster.client.clone(), namespace);
    crate::wait_for(
        &format!("MysqlDatabase {namespace}/{name} Ready reason {reason}"),
        std::time::Duration::from_secs(60),
        || async {
            let db = api.get(name).await.map_err(|e| e.to_string())?;
            let ready = db.status.unwrap_or_default().conditions.into_iter().find(|c| c.type_ == "Ready");
            match ready {
                Some(c) if c.reason == reason => Ok(c.message),
                other => Err(format!("Ready: {other:?}")),
            }
        },
    )
    .await
}

/// Waits for an Event with `reason` about the object `namespace/name`; returns its note.
pub async fn wait_object_event(cluster: &Cluster, namespace: &str, name: &str, reason: &str) -> String {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(cluster.client.clone(), namespace);
    let lp = kube::api::ListParams::default().fields(&format!("regarding.name={name}"));
    crate::wait_for(&format!("an Event {reason} on {namespace}/{name}"), std::time::Duration::from_secs(30), || async {
        let events = api.list(&lp).await.map_err(|e| e.to_string())?.items;
        events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.note.clone().unwrap_or_default())
            .ok_or_else(|| format!("events: {:?}", events.iter().map(|e| e.reason.clone()).collect::<Vec<_>>()))
    })
    .await
}

/// The usual deploy-API setup: a [`crate::fixtures::Scenario`] with no
/// operator of its own, one operator with the deploy API on, a bootstrapped
/// group, and the pipeline of ServiceAccount `deployer` listed by
/// MysqlDatabase `counter-app` in the test's namespace.
#[derive(Debug)]
pub struct DeployScenario {
    /// Namespace, MariaDB pair, control plane.
    pub sc: crate::fixtures::Scenario,
    /// The operator serving the deploy API.
    pub op: Operator,
    /// Its certificate files.
    pub tls: TlsFiles,
    /// The `deployer` pipeline on the group.
    pub pipeline: Pipeline,
}

/// Sets up a [`DeployScenario`] in namespace `<prefix>-<random>`.
pub async fn scenario(prefix: &str) -> DeployScenario {
    let sc = crate::fixtures::Scenario::start(prefix, 0, LeaderTimings::default()).await;
    let tls = tls_files(&sc.pair.dir().join("tls"));
    let (op, base) = start_operator(&sc.cluster, &sc.ns, "op", &tls, LeaderTimings::default()).await;
    let group = sc.bootstrapped_group("g").await;
    service_account(&sc.cluster, &sc.ns.name, "deployer").await;
    database(&sc.cluster, &sc.ns.name, "counter-app", &group, &[(&sc.ns.name, "deployer")]).await;
    let token = token(&sc.cluster, &sc.ns.name, "deployer", &["bloodraven-deploy"]).await;
    let pipeline = Pipeline { http: client(&tls.ca), base, group, token };
    DeployScenario { sc, op, tls, pipeline }
}
